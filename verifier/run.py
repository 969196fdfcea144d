"""The verification procedure inside the experiment's child, after timing.

Every run starts from the same RNG state and from a fresh copy of the model loaded from the
same seed (or the timed step, whose model still holds what it was loaded with), so eager,
float64 and the experiment see identical weights and inputs:

0. the whole verification planned against the memory this process can still take, from what
   the timed run took (verifier/memory.py): where even its cheapest form cannot fit, nothing runs
   (VERIFIER_SKIPPED), as an OOM kill would lose the record's verdict;
1. eager twice (natively, not on a lazy XLA device): if the two disagree at all, no comparison can be trusted
   (NONDETERMINISTIC_EAGER_RUN), unless the data lists the model as nondeterministic;
2. the experiment itself (its dynamo backend, its precision): the very step that was timed where
   the child hands it over (a compiled inference step whose model kept the state it was loaded
   with; run first, then dropped, and set aside if it drew random numbers), otherwise a fresh
   copy compiled anew, from a reset dynamo, under the inductor settings of PyTorch's accuracy
   runs (fresh_compile);
3. compare experiment against eager → PASS or FAIL, first without the float64 reference
   (closeness.DEFERRED); only where a leaf's verdict needs it (the scalar and RMSE rules),
4. eager in float64, the ground truth those rules need (if it fails or does not fit, every
   leaf is judged against eager alone), and the comparison again with it.

Every run but the timed step's is under the determinism PyTorch's accuracy runs set
(verifier/determinism.py), which the details name (`determinism`); the timed step runs as it was
timed, or it would compile again. The record's details say which: `reference_not_needed`, or
`reference_needed_at` (the first leaf that needed it and its rule) with `reference` (float64, or
null and why). A float64 run that would have failed matters only where it is needed, as it is
the costliest run on a large model and the least often read.

Training compares what a step leaves, as PyTorch's harness does (collect_results), under the
paths `loss`, `grads.<parameter>`, `params.<parameter>` and, for the harness's step,
`buffers.<buffer>`; see run_once for which steps. Nothing assumes how the suite reduces its
output to a loss: the loss is whatever the step returns.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from experiment_runner.core import dashboards
from experiment_runner.core.matrix import AOT_INDUCTOR_OPTIONS, PRECISION_DTYPES, ExperimentConfig, autocast_dtype
from experiment_runner.core.record import phase
from verifier import memory
from verifier.determinism import deterministic
from verifier.closeness import DEFERRED, Comparison, ReferenceNeeded, compare, identical
from verifier.subject import Subject
from verifier.tolerances import Context, Policy, policy_for

TRACEBACK_TAIL_LINES = 15


@dataclass
class Verification:
    """The `verification` block of a record (see to_dict)."""

    code: str
    method: str | None = None
    tolerance: float | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _tail(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return "\n".join(text.rstrip().splitlines()[-TRACEBACK_TAIL_LINES:])


def reference_subject(subject: Subject) -> Subject:
    """Where the eager and float64 runs happen: the experiment's own device, except that an
    XLA experiment is checked against native eager (CUDA for CUDA, otherwise the CPU), since
    eager on a lazy XLA device is the very thing under test when dynamo is None."""
    config = subject.config
    if config.xla is None:
        return subject
    return subject.with_config(dataclasses.replace(config, xla=None, xla_flags=None, dynamo=None, torch_xla2=None,
                                                   accelerator="cuda" if config.accelerator == "cuda" else "cpu"))


def _error(exc: BaseException) -> dict[str, str]:
    return {"type": type(exc).__name__, "message": str(exc)[:2000], "traceback_tail": _tail(exc)}


def context_of(subject: Subject) -> Context:
    config = subject.config
    return Context(suite=subject.experiment.suite_name, model=subject.experiment.model_name,
                   test=config.test, precision=config.precision, accelerator=config.accelerator,
                   dynamo=config.dynamo, xla=config.xla)


def snapshot(value: Any) -> Any:
    """A detached CPU copy of a nested output, so later runs cannot change it and device
    memory is freed. Mappings (ModelOutput included) become plain dicts."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, Mapping):
        return {k: snapshot(v) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(snapshot(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(snapshot(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        clone = copy.copy(value)
        for f in dataclasses.fields(value):
            object.__setattr__(clone, f.name, snapshot(getattr(value, f.name)))
        return clone
    return value


def iterations(subject: Subject) -> int:
    """How many steps a verification run takes: one for inference; for training the harness's
    run_n_iterations (two) with its step, else --verify-iterations."""
    config = subject.config
    if config.test != "train":
        return 1
    if config.training_recipe == dashboards.HARNESS_RECIPE:
        return dashboards.harness_iterations()
    return max(1, subject.options.verify_iterations)


def run_once(subject: Subject, precision: str, compiled: bool) -> Any:
    """Load a fresh model in `precision`, run it from the seeded RNG state, return what to compare.

    Training with the harness's step (--training-recipe=dynamo_harness, the dashboard's) is
    checked as the harness checks it: its own optimizer where it takes one (none on the CPU),
    the module in the mode its accuracy runs use (eval for torchbench), two steps, and what
    collect_results gathers after them: the loss, every parameter's gradient
    (zeros where it has none), the parameters and the buffers, not the output. The default step
    is checked after --verify-iterations SGD steps, whatever the suite times with: Adam's first step
    moves every weight by about lr * sign(grad), so a near-zero gradient whose sign differs between
    eager and the compiled model becomes an lr-sized parameter error; SGD keeps parameter errors
    proportional to gradient errors, which the tolerance rules are made for. It also compares the
    output, which a wrong forward shows first.
    """
    import torch

    model = subject.load(precision)
    harness_step = subject.config.training_recipe == dashboards.HARNESS_RECIPE
    if not harness_step:
        model.recipe = dataclasses.replace(model.recipe, optimizer="SGD")
    step = subject.make_step(model, compiled=compiled, precision=precision, full_output=True, checking=True)
    subject.device.reset_rng(subject.options.seed)
    for _ in range(iterations(subject)):
        out = subject.device.run_iteration(step)
    subject.device.synchronize()
    if subject.config.test != "train":
        return snapshot(out)
    loss, output = out
    params = dict(model.module.named_parameters())
    if not harness_step:
        return snapshot({"loss": loss, "output": output,
                         "grads": {name: p.grad for name, p in params.items()}, "params": params})
    return snapshot({"loss": loss,
                     "grads": {name: torch.zeros_like(p) if p.grad is None else p.grad for name, p in params.items()},
                     "params": params, "buffers": dict(model.module.named_buffers())})


def compile_settings(subject: Subject) -> dict[str, Any] | None:
    """The inductor settings a fresh copy of the experiment compiles under, or None where it
    compiles nothing: an eager experiment, AOT Inductor (it loads the timed step's package)."""
    config = subject.config
    if config.dynamo is None or config.compile_options in AOT_INDUCTOR_OPTIONS:
        return None
    return dashboards.accuracy_inductor_config()


@contextlib.contextmanager
def fresh_compile(settings: dict[str, Any] | None) -> Iterator[None]:
    """Compile under `settings` (PyTorch's accuracy runs': random ops fall back to aten's, so a
    compiled train-mode dropout draws eager's masks from the same seed; inductor's own lowering
    draws others, and a correct step FAILs). dynamo is reset first: the fresh copy's step has
    the timed step's code object, whose cached compile, made without the settings, would
    otherwise pass its guards and serve it."""
    if settings is None:
        yield
        return
    import torch
    import torch._inductor.config

    torch._dynamo.reset()
    with torch._inductor.config.patch(settings):
        yield


# Why a timed step that was run once more is not the experiment's run after all.
DRAWS_RANDOM_NUMBERS = ("the timed step draws random numbers, compiled to draw them its own way, not as eager "
                        "does (fresh_compile)")


def run_timed_step(subject: Subject) -> tuple[bool, Any]:
    """The timed step once more from the seeded RNG state: (True, what to compare), or (False,
    None) where the run moved a torch generator (a step may itself return None). A step that
    draws random numbers was compiled without the accuracy runs' settings, so its draws are not
    eager's (a model that samples noise in eval mode); a fresh copy compiled under them is judged
    instead. The step is dropped, and the timed model with it, before the eager runs need the
    memory."""
    import torch

    step, subject.timed_step = subject.timed_step, None
    subject.device.reset_rng(subject.options.seed)
    before = subject.device.rng_states()
    out = subject.device.run_iteration(step)
    subject.device.synchronize()
    drew = any(not torch.equal(a, b) for a, b in zip(before, subject.device.rng_states()))
    out = None if drew else snapshot(out)
    del step
    gc.collect()
    return not drew, out


def procedure(subject: Subject, policy: Policy, determinism: dashboards.Determinism,
              timings: dict[str, float]) -> Verification:
    """Steps 1 to 4 of the module docstring (may raise: verify_experiment catches); `timings`
    gets each step's seconds (core/record.py VERIFY_STEPS). The timed step runs as it was timed,
    before the determinism settings: dynamo guards on them (deterministic algorithms, TF32), so
    under them it would trace and compile the model a second time and be judged as another graph
    than the one timed. Everything after it runs under them."""
    if policy.skip_reason is not None:
        return Verification("VERIFIER_SKIPPED", details={"reason": policy.skip_reason, **policy.describe()})
    served, result = False, None
    if subject.timed_step is not None:
        with phase(timings, "verify_compiled_s"):
            served, result = run_timed_step(subject)
        if not served:
            subject.fresh_copy_reason = DRAWS_RANDOM_NUMBERS
    with deterministic(determinism):
        return judge(subject, policy, timings, served, result)


def judge(subject: Subject, policy: Policy, timings: dict[str, float], served: bool, result: Any) -> Verification:
    """Steps 1, 3 and 4, and step 2 where the timed step did not serve (`served`: its output is
    `result`)."""
    precision = subject.config.precision
    reference = reference_subject(subject)
    base = {**policy.describe(),
            "iterations": iterations(subject),
            "eager_device": reference.device.torch_device,
            "compiled_run": "timed step" if served else "fresh copy"}
    settings = None
    if not served:
        if subject.fresh_copy_reason:
            base["fresh_copy_reason"] = subject.fresh_copy_reason
        settings = compile_settings(subject)
        if settings is not None:
            base["inductor_config"] = settings
    if subject.timed_run is not None:
        gc.collect()
        before = memory.plan_before_eager(subject.timed_run, memory.resident_bytes(),
                                          memory.output_bytes(result, precision) if served else 0, precision,
                                          reference.device.device_memory())
        base["memory_before_eager"] = before.describe()
        short = before.short_of(with_reference=False)
        if short is not None:
            return does_not_fit(base, "memory_before_eager", short)
    try:
        with phase(timings, "verify_eager_s"):
            gc.collect()
            resident = memory.resident_bytes()
            on_device = reference.device.device_memory()
            subject.device.reset_peak_memory()
            reference.device.reset_peak_memory()
            eager = run_once(reference, precision, compiled=False)
            high_water = subject.device.peak_memory().get("timed_peak_rss_bytes")  # absent where it cannot be reset
            eager_run_bytes = max(0, high_water - resident) if high_water and resident else 0
            device_peak = reference.device.peak_memory().get("peak_allocated_bytes", 0)
            device_run_bytes = max(0, device_peak - on_device.allocated) if on_device is not None else 0
            gc.collect()
            rerun = run_once(reference, precision, compiled=False)
            gc.collect()
    except Exception as exc:  # noqa: BLE001 - eager breaking is a code of its own
        return Verification("EAGER_FAILED", details={**base, "error": _error(exc)})
    with phase(timings, "verify_compare_s"):
        determinism = identical(eager, rerun)
    del rerun
    if not determinism.passed and not policy.nondeterministic:
        return Verification("NONDETERMINISTIC_EAGER_RUN", method="exact", tolerance=0.0,
                            details={**base, **determinism.details()})
    base["eager_deterministic"] = determinism.passed

    device_now = reference.device.device_memory()
    fits = memory.plan(eager, eager_run_bytes, precision,
                       None if device_now is None else (device_run_bytes, device_now))
    base["memory"] = fits.describe()
    short = fits.short_of(with_reference=False)
    if short is not None:
        return does_not_fit(base, "memory", short)
    if not served:
        with phase(timings, "verify_compiled_s"), fresh_compile(settings):
            result = run_once(subject, precision, compiled=True)
            gc.collect()
    rules = {"tolerance": policy.tolerance, "cosine": policy.cosine,
             "larger_small_multiplier": policy.larger_multiplier_reason is not None,
             "computed_in": computed_in(subject.config)}
    try:
        with phase(timings, "verify_compare_s"):
            outcome: Comparison = compare(eager, result, DEFERRED, **rules)
        base.update(reference=None, reference_not_needed=True)
    except ReferenceNeeded as need:
        base["reference_needed_at"] = need.where()
        fp64 = float64_reference(reference, fits, base, timings)
        with phase(timings, "verify_compare_s"):
            outcome = compare(eager, result, fp64, **rules)
    return Verification("PASS" if outcome.passed else "FAIL", method=outcome.method,
                        tolerance=policy.tolerance, details={**base, **outcome.details()})


def does_not_fit(base: dict[str, Any], plan: str, short: memory.MemoryPlan) -> Verification:
    """VERIFIER_SKIPPED for a verification that `short`, a budget of the plan in `base[plan]`
    (memory_before_eager: the whole verification, planned from the timed run before any of it
    ran; memory: the rest, after the eager runs), cannot hold even without the float64 reference."""
    base[plan]["decided_by"] = short.available_from
    what = ("the eager pair included, planned from the timed run before any verification run"
            if plan == "memory_before_eager" else "planned after the eager runs")
    return Verification("VERIFIER_SKIPPED", details={
        **base, "reason": f"the verification would not fit in the memory available ({short.available_from}: "
                          f"about {short.without_reference / memory.GIB:.1f} GiB more even without the "
                          f"float64 reference; {what})"})


def computed_in(config: ExperimentConfig) -> Any:
    """The floating dtype an experiment computes in where it is coarser than float32 (bf16, fp16,
    amp's autocast dtype), or None."""
    import torch

    name = autocast_dtype(config) or (PRECISION_DTYPES.get(config.precision)
                                      if config.precision in ("bf16", "fp16") else None)
    return None if name is None else getattr(torch, name)


def float64_reference(reference: Subject, fits: memory.MemoryPlan, base: dict[str, Any],
                      timings: dict[str, float]) -> Any:
    """Step 4's float64 run, or None where it does not fit or fails (`base` says which)."""
    short = fits.short_of(with_reference=True)
    if short is not None:
        base["memory"]["decided_by"] = short.available_from
        base.update(reference=None, reference_skipped=(
            f"the float64 reference would need about {short.with_reference / memory.GIB:.1f} GiB more than is "
            f"in use; {short.available_from} has less available"))
        return None
    with phase(timings, "verify_float64_s"):
        try:
            fp64 = run_once(reference, "fp64", compiled=False)
            base["reference"] = "float64"
        except Exception as exc:  # noqa: BLE001 - without it eager alone judges
            fp64 = None
            base.update(reference=None, reference_error=_error(exc))
        gc.collect()
    return fp64


def verify_experiment(subject: Subject, timings: dict[str, float] | None = None) -> dict[str, Any]:
    """Verify the harness's experiment; never raises (a broken verifier is EXCEPTION_RAISED).
    `timings` gets the seconds of the steps that ran (core/record.py VERIFY_STEPS)."""
    policy: Policy | None = None
    timings = {} if timings is None else timings
    try:
        policy = policy_for(context_of(subject), override=subject.options.tolerance)
        determinism = dashboards.accuracy_determinism(subject.experiment.model_name)
        verification = procedure(subject, policy, determinism, timings)
        verification.details["determinism"] = determinism.describe()
        return verification.to_dict()
    except Exception as exc:  # noqa: BLE001 - every failure must become data
        return Verification("EXCEPTION_RAISED", tolerance=policy.tolerance if policy else None,
                            details={"error": _error(exc)}).to_dict()
