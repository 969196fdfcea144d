"""The experiment driver: load a model, build its step, and time it (in the child).

Shared by the timing run and the verifier, which loads the same model again (eager,
float64) from the same seed to judge the experiment's outputs.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, replace
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING, Any, Callable

from experiment_runner.child.devices import DeviceRuntime, runtime_for
from experiment_runner.child.weights_fit import check_weights_fit
from experiment_runner.core.cpus import HostLoadSample
from experiment_runner.core import dashboards
from experiment_runner.core.matrix import (
    AOT_INDUCTOR_OPTIONS,
    FREEZING_OPTIONS,
    PRECISION_DTYPES,
    Experiment,
    ExperimentConfig,
    autocast_dtype,
    uses_cuda_graphs,
)
from experiment_runner.core.options import RunOptions
from experiment_runner.core.protocol import AOT_PACKAGE
from benchmark_models import BenchmarkModel, LoadRequest, get_suite, map_tensors
from benchmark_models.training import TrainingState, harness_recipe

if TYPE_CHECKING:
    from verifier.subject import TimedRun

def randomize_inputs(value: Any) -> Any:
    """New random values, same shapes and dtypes (integer ids stay within their range)."""
    import torch

    def fresh(t: "torch.Tensor") -> "torch.Tensor":
        if t.is_floating_point():
            return torch.randn_like(t)
        if t.dtype == torch.bool:
            return torch.rand(t.shape, device=t.device) > 0.5
        low, high = int(t.min()), int(t.max()) + 1
        return torch.randint(low, max(high, low + 1), t.shape, dtype=t.dtype, device=t.device)

    return map_tensors(value, fresh)


@dataclass
class ExperimentDriver:
    """Everything needed to run one experiment's iterations, shared by timing and the verifier.

    `load(dtype)` builds a fresh copy of the model from the same seed, so the verifier can
    run eager, float64 and the experiment from identical weights and inputs. It is the
    verifier's `verifier.subject.Subject`.
    """

    experiment: Experiment
    options: RunOptions
    device: DeviceRuntime
    artifacts_dir: Path
    model: BenchmarkModel | None = None
    # With --verify, the AOT Inductor package the timed step built, kept for the verifier's
    # compiled run (see AotInductorModule); discard_aot_package removes it.
    aot_package: "AotPackage | None" = None
    # With --verify, the step that was timed, handed to the verifier for its compiled run (see
    # reusable_timed_step); the verifier drops it once it has run it.
    timed_step: Callable[[], Any] | None = None
    fresh_copy_reason: str | None = None  # why there is none, when verifying
    timed_run: TimedRun | None = None  # with --verify, what the timed runs took (the verifier's first plan)

    @property
    def config(self) -> ExperimentConfig:
        return self.experiment.config

    def with_config(self, config: ExperimentConfig) -> "ExperimentDriver":
        """The same model and options under `config`, on its own device runtime (the verifier's
        native reference for an XLA experiment)."""
        return ExperimentDriver(replace(self.experiment, config=config), self.options, runtime_for(config),
                                 self.artifacts_dir)

    def load(self, precision: str | None = None) -> BenchmarkModel:
        """Load the model (seeded), cast to `precision` ("fp64" for the verifier's reference)."""
        import torch

        suite = get_suite(self.experiment.suite_name)
        request = LoadRequest(
            model_name=self.experiment.model_name, test=self.config.test,
            device=self.device.build_device, accelerator=self.config.accelerator,
            precision=self.config.precision, batch_size=self.config.batch_size,
        )
        if precision is None and not self.options.no_skip:  # the experiment's own load, not the verifier's
            check_weights_fit(suite, request, self.device.memory_capacity())
        precision = precision or self.config.precision
        self.device.reset_rng(self.options.seed)
        model = suite.load(request)
        if self.config.test == "train" and self.config.training_recipe == dashboards.HARNESS_RECIPE:
            model.recipe = harness_recipe(model.recipe, self.experiment.suite_name, self.experiment.model_name,
                                          self.config.accelerator, self.config.dynamo)
        if precision in PRECISION_DTYPES and precision != "fp32":
            dtype = getattr(torch, PRECISION_DTYPES[precision])
            model.module = model.module.to(dtype)
            cast = lambda t: t.to(dtype) if t.is_floating_point() else t  # noqa: E731
            model.args, model.kwargs = map_tensors(model.args, cast), map_tensors(model.kwargs, cast)
        if self.options.randomize_input:
            self.device.reset_rng(self.options.seed + 1)
            model.args, model.kwargs = randomize_inputs(model.args), randomize_inputs(model.kwargs)
        if self.device.build_device != self.device.torch_device:
            move = lambda t: t.to(self.device.torch_device)  # noqa: E731
            model.module = model.module.to(self.device.torch_device)
            model.args, model.kwargs = map_tensors(model.args, move), map_tensors(model.kwargs, move)
        return model

    def autocast(self, precision: str) -> contextlib.AbstractContextManager:
        import torch

        if precision != "amp":
            return contextlib.nullcontext()
        if self.config.xla is not None:
            from experiment_runner.child.devices.xla import xla_autocast

            return xla_autocast(self.config)
        device_type = "cuda" if self.config.accelerator == "cuda" else "cpu"
        return torch.autocast(device_type=device_type, dtype=getattr(torch, str(autocast_dtype(self.config))))

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """torch.compile with the experiment's dynamo backend and compile options
        (fullgraph with --filter-by-single-graph, as the reference)."""
        import torch

        kwargs: dict[str, Any] = {"backend": self.config.dynamo, "fullgraph": self.options.filter_by_single_graph}
        kwargs.update(COMPILE_OPTION_KWARGS[self.config.compile_options])
        if uses_cuda_graphs(self.config) and "mode" not in kwargs:  # the modes that use them set them
            from torch._inductor import config as inductor_config

            inductor_config.triton.cudagraphs = True  # the reference runner's and the harness's setting on CUDA
        return torch.compile(fn, **kwargs)

    def make_step(self, model: BenchmarkModel, compiled: bool = True,
                  precision: str | None = None, full_output: bool | None = None,
                  checking: bool = False) -> Callable[[], Any]:
        """One iteration as a closure. eval: forward under no_grad; train: zero_grad, forward,
        loss, backward and the recipe's optimizer step (where it takes one; on cloned inputs where
        it clones them, as PyTorch's harness does). `compiled` applies the experiment's dynamo backend
        to the whole step (`--compile-scope=step`, what PyTorch's and PyTorch/XLA's harnesses
        time) or to the module alone (`--compile-scope=model`).

        Train returns the loss, or (loss, output) with full_output (`--collect-full-output`).
        A training step runs the module in train mode, except a verification run's (`checking`)
        of a recipe whose accuracy is checked in eval mode (the harness's torchbench).
        """
        import torch

        precision = precision or self.config.precision
        full_output = self.options.collect_full_output if full_output is None else full_output
        compiling = compiled and self.config.dynamo is not None
        aot = compiling and self.config.compile_options in AOT_INDUCTOR_OPTIONS
        if compiling and self.config.compile_options == "dynamic":
            mark_batch_dynamic(model, self.experiment.model_name)
        module = model.module
        if aot:
            target: Any = AotInductorModule(module, self.config.compile_options in FREEZING_OPTIONS,
                                            self.artifacts_dir / AOT_PACKAGE, precision,
                                            reuse=self.aot_package,
                                            keep=self._keep_aot_package if self.options.verify else None)
        else:
            target = self.compile(module) if compiling and self.options.compile_scope == "model" else module
        args, kwargs = model.args, model.kwargs

        whole_step = compiling and not aot and self.options.compile_scope == "step"
        if self.config.test == "eval":
            module.eval()

            def forward() -> Any:
                # The module called here, with no frame of ours in between, as PyTorch's forward_pass
                # calls it: each frame dynamo compiles through a graph break counts that break again.
                with self.autocast(precision):
                    if model.forward is not None:
                        return model.forward(target, args, kwargs)
                    return target(*args, **kwargs)

            # no_grad around the compiled forward, as the harness turns it on around its forward_pass:
            # inside, dynamo would capture the two grad-mode switches as calls of the graph.
            inner = self.compile(forward) if whole_step else forward

            def eval_step() -> Any:
                with torch.no_grad():
                    return inner()

            return eval_step

        module.train(mode=not checking or model.recipe.checked_in_train_mode)
        optimizer = model.optimizer(module.parameters())
        model.training_state = TrainingState(module, optimizer)
        zero_grad = module.zero_grad if optimizer is None else optimizer.zero_grad
        inputs = torch_clone_inputs() if model.recipe.clone_inputs else (lambda value: value)

        def train_step() -> Any:
            zero_grad(set_to_none=True)
            with self.autocast(precision):
                output = model.run_forward(target, inputs(args), inputs(kwargs))
                loss = model.compute_loss(output)
            loss.backward()
            if optimizer is not None:
                optimizer.step()
            return (loss, output) if full_output else loss

        return self.compile(train_step) if whole_step else train_step

    def _keep_aot_package(self, package: "AotPackage") -> None:
        self.aot_package = package

    def discard_aot_package(self) -> None:
        """Remove the kept AOT Inductor package from disk (it is as large as the weights)."""
        if self.aot_package is not None:
            self.aot_package.path.unlink(missing_ok=True)
            self.aot_package = None


def torch_clone_inputs() -> Callable[[Any], Any]:
    """The harness's own clone_inputs (a copy of every input tensor, requires_grad kept)."""
    from torch._dynamo.utils import clone_inputs

    return clone_inputs


def state_versions(module: Any) -> dict[str, tuple[int, int]]:
    """Each parameter's and buffer's identity and in-place version counter: equal before and
    after running a module unless it replaced or modified its own state."""
    tensors = [*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)]
    return {name: (id(tensor), tensor._version) for name, tensor in tensors}


def reusable_timed_step(driver: ExperimentDriver, loaded: dict[str, tuple[int, int]],
                        model: BenchmarkModel) -> str | None:
    """Why the verifier must run a fresh copy rather than the step that was timed, or
    None where the timed step serves: a compiled inference step whose model still holds the
    state it was loaded with computes what a fresh compile of a fresh copy would, and running
    it once more saves tracing and compiling the model again (AOT Inductor reuses its package
    instead, a training step has moved its weights, XLA steps are left to a fresh copy)."""
    config = driver.config
    if config.test != "eval" or config.dynamo is None or config.xla is not None:
        return "not a compiled inference step off XLA"
    if config.compile_options in AOT_INDUCTOR_OPTIONS:
        return "AOT Inductor: the verifier loads the timed step's package"
    if state_versions(model.module) != loaded:
        return "the model changed its parameters or buffers while it was timed"
    return None


def mark_batch_dynamic(model: BenchmarkModel, model_name: str) -> None:
    """The harness's --dynamic-batch-only: in every input tensor the first dimension as long as the
    batch is marked maybe-dynamic, every other dimension left static; not for a batch of 1 or the
    models the harness leaves out (core/dashboards.json)."""
    import torch

    if model.batch_size <= 1 or model_name in dashboards.dynamic_batch_skips():
        return

    def mark(t: "torch.Tensor") -> "torch.Tensor":
        dim = next((i for i, size in enumerate(t.shape) if size == model.batch_size), None)
        if dim is not None:
            torch._dynamo.maybe_mark_dynamic(t, dim)
        return t

    map_tensors((model.args, model.kwargs), mark)


@dataclass(frozen=True)
class AotPackage:
    """An AOT Inductor package on disk and what it was compiled for: the module's precision, the
    freezing setting, and its inputs' structure, shapes, dtypes and devices (input_signature)."""

    path: Path
    precision: str
    freezing: bool
    inputs: tuple[Any, ...]


def input_signature(args: Any, kwargs: Any) -> tuple[Any, ...]:
    """What an exported program is specialised to: the inputs' tree structure and, per leaf, a
    tensor's shape, dtype and device or any other value's repr."""
    import torch
    from torch.utils._pytree import tree_flatten

    leaves, spec = tree_flatten((args, kwargs))
    return (str(spec), *((tuple(leaf.shape), str(leaf.dtype), str(leaf.device)) if isinstance(leaf, torch.Tensor)
                         else repr(leaf) for leaf in leaves))


class AotInductorModule:
    """The harness's --export-aot-inductor: the module exported with torch.export at its first
    call's inputs (non-strict, as the harness), compiled by AOT Inductor into a package, and the
    loaded package run from then on. Compiled on the first call, so that, as with torch.compile,
    the compilation is the first warm-up iteration's and never a timed one's.

    `reuse`, a package compiled for the same precision, freezing and inputs (the timed step's, for
    the verifier's run of a fresh copy of the model from the same seed, so the same weights), is
    loaded instead of compiling the module again: the compilation is most of a verification's
    time, and the verifier then judges the very program that was timed. `keep` gets the package
    built here and leaves it on disk; without it the package is deleted once loaded.
    """

    def __init__(self, module: "torch.nn.Module", freezing: bool, package: Path, precision: str = "fp32",
                 reuse: AotPackage | None = None, keep: Callable[[AotPackage], None] | None = None) -> None:
        self.module, self.freezing, self.package, self.precision = module, freezing, package, precision
        self.reuse, self.keep = reuse, keep
        self.loaded: Callable[..., Any] | None = None
        self.reused = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.loaded is None:
            import torch

            inputs = input_signature(args, kwargs)
            reuse = self.reuse
            if (reuse is not None and (reuse.precision, reuse.freezing, reuse.inputs) == (
                    self.precision, self.freezing, inputs) and reuse.path.exists()):
                self.loaded, self.reused = torch._inductor.aoti_load_package(str(reuse.path)), True
                return self.loaded(*args, **kwargs)
            # A deep copy, as the harness exports: export runs the forward on fake tensors and keeps
            # what it writes outside the parameters and buffers (a FakeTensor in a cache object, a
            # counter moved), and this module is the eager baseline of the pairs.
            exported = torch.export.export(copy.deepcopy(self.module), args, kwargs, strict=False)
            self.package.parent.mkdir(parents=True, exist_ok=True)
            path = torch._inductor.aoti_compile_and_package(
                exported, package_path=str(self.package), inductor_configs={"freezing": self.freezing})
            self.loaded = torch._inductor.aoti_load_package(path)
            if self.keep is None:
                Path(path).unlink(missing_ok=True)  # loaded: the package's copy on disk is not needed again
            else:
                self.keep(AotPackage(Path(path), self.precision, self.freezing, inputs))
        return self.loaded(*args, **kwargs)


# --compile-options values → torch.compile keyword arguments (validity: core/matrix.py).
COMPILE_OPTION_KWARGS: dict[str, dict[str, Any]] = {
    "default": {},
    "reduce-overhead": {"mode": "reduce-overhead"},
    "max-autotune": {"mode": "max-autotune"},
    "max-autotune-no-cudagraphs": {"mode": "max-autotune-no-cudagraphs"},
    "dynamic": {},  # the batch dimension is marked on the inputs instead (mark_batch_dynamic)
    "freezing": {"options": {"freezing": True}},
    "no-cudagraphs": {},  # uses_cuda_graphs leaves CUDA graphs off
    "cpp-wrapper": {"options": {"cpp_wrapper": True}},
    "autotune": {"options": {"max_autotune": True}},
    "freezing-autotune": {"options": {"freezing": True, "max_autotune": True}},
}

# Calibration stops growing a sample beyond this many iterations (a step that does nothing).
MAX_CALIBRATED_ITERATIONS = 1_000_000


@dataclass
class Sample:
    """One timed run: its seconds, what was kept of its first iteration's result, and what its last
    iteration returned."""

    elapsed: float
    first: Any
    last: Any
    device_elapsed: float | None = None  # --pure-wall-time: the device's own clock, where it has one


class WarmupProbe:
    """One warm-up measured as PyTorch's harness's warmup() measures it (run_performance_test):
    garbage collected first, the device's memory figure (DeviceRuntime.harness_memory) and, for a
    compiled step, the dynamo counters' change across it (its get_dynamo_stats). The harness's
    compilation_latency and memory columns are differences and ratios of two such warm-ups, the
    eager one and the compiled one, so both are taken the same way. `block` is the result."""

    def __init__(self, device: DeviceRuntime, dynamo_stats: bool) -> None:
        self.device = device
        self.dynamo_stats = dynamo_stats
        self._before: dict[str, int] = {}
        self.block: dict[str, Any] | None = None

    def start(self) -> None:
        import gc

        gc.collect()
        self.device.harness_memory_start()
        if self.dynamo_stats:
            from experiment_runner.child.instrument.dynamo import harness_dynamo_stats

            self._before = harness_dynamo_stats()

    def finish(self, iteration_times: list[float]) -> dict[str, Any]:
        """The block for the record: the iterations, their summed time (latency_s), the memory
        figure in bytes and how it was read, and the counters' change (dynamo_stats)."""
        memory = self.device.harness_memory()
        self.block = {"iterations": len(iteration_times), "latency_s": sum(iteration_times),
                      "peak_memory_bytes": memory, "memory_method": self.device.harness_memory_method}
        if self.dynamo_stats:
            from experiment_runner.child.instrument.dynamo import harness_dynamo_stats, stats_delta

            self.block["dynamo_stats"] = stats_delta(self._before, harness_dynamo_stats())
        return self.block


def run_sample(step: Callable[[], Any], device: DeviceRuntime, iterations: int,
               device_clock: bool = False, keep_first: Callable[[Any], Any] | None = None) -> Sample:
    """`iterations` iterations on the clock, the device synchronized before and after.
    `keep_first` makes what is kept of the first iteration's result as it returns (on the clock,
    so keep it small: a training step's loss); without it `first` is None. `last` is valid only
    until the step runs again."""
    device.synchronize()
    stop_device_clock = device.start_device_clock() if device_clock else None
    start = perf_counter()
    first = last = device.run_iteration(step)
    first = None if keep_first is None else keep_first(first)
    for _ in range(iterations - 1):
        last = device.run_iteration(step)
    device_elapsed = stop_device_clock() if stop_device_clock is not None else None
    device.synchronize()
    return Sample(perf_counter() - start, first, last, device_elapsed)


def calibrate_iterations(step: Callable[[], Any], device: DeviceRuntime, options: RunOptions,
                         training_state: TrainingState | None = None) -> list[dict[str, float]]:
    """Trials that find the iterations per sample for one sample to last `min_sample_time`.

    Like pyperf and Timer.blocked_autorange: untimed trial samples, growing the count
    (at least doubling, else scaled to the target with 20% headroom) until one trial is
    long enough; the last trial's count is then used for every timed sample. Trials start
    from the state the timed runs start from (training state rewound, RNG reset). Every
    trial is returned (`iterations`, `elapsed_s`) for the record: timed samples much
    shorter than the last trial mean the host changed between calibration and timing.
    """
    trials: list[dict[str, float]] = []
    iterations = 1
    while True:
        if training_state is not None:
            training_state.rewind()
        device.reset_rng(options.seed)
        elapsed = run_sample(step, device, iterations).elapsed
        trials.append({"iterations": iterations, "elapsed_s": elapsed})
        if elapsed >= options.min_sample_time or iterations >= MAX_CALIBRATED_ITERATIONS:
            return trials
        scaled = options.min_sample_time / max(elapsed, 1e-9) * iterations * 1.2
        iterations = min(MAX_CALIBRATED_ITERATIONS, max(2 * iterations, int(scaled) + 1))


def time_iterations(step: Callable[[], Any], device: DeviceRuntime, options: RunOptions,
                    on_repeat: Callable[[int, Any], None] | None = None,
                    training_state: TrainingState | None = None,
                    on_timing: Callable[[], None] | None = None,
                    timings: dict[str, float] | None = None,
                    warmup_probe: WarmupProbe | None = None) -> dict[str, Any]:
    """Warm-up apart, then `repeat` timed runs (samples) of `iterations_per_run` iterations.

    Without an explicit `iterations_per_run` the count is calibrated after warm-up (so
    compilation never enters it) to make a sample last `min_sample_time`; the metrics say
    which count was used (`iterations_per_run`), whether it was calibrated, and the trials
    that chose it (`calibration`). The device
    is synchronized before the clock starts and before it stops; RNG state is reset before
    each run, outside the clock. Warm-up times are kept (they hold the compilation) but
    never mixed into the timed samples. `on_repeat(i, output)` runs after timed run i, outside the
    clock, with what its last iteration returned (per-repeat dumps). With --pure-wall-time the
    samples are the device's own clock where it has one (CUDA events), and `timing_clock` says
    which clock every sample was read from. A training step's state is rewound before every timed run,
    outside the clock, so every run times the same workload; the loss of the first and of
    the last timed step are kept (DeviceRuntime.keep) to show it. The host's load during the timed runs is
    recorded beside them (`host_load`, `noisy_host`: see core/cpus.py). `on_timing()` runs once
    warm-up and calibration are over (the worker reports its phase). `timings` gets the seconds of
    each part, on the wall clock around it: warmup_s, calibration_s and samples_s. `warmup_probe`
    measures the warm-up as PyTorch's harness does (its block then holds the figures).
    """
    timings = {} if timings is None else timings
    started = perf_counter()
    warmup_time: list[float] = []
    if warmup_probe is not None:
        warmup_probe.start()
    for _ in range(options.warmup_iterations):
        device.reset_rng(options.seed)
        warmup_time.append(run_sample(step, device, 1).elapsed)
    if warmup_probe is not None:
        warmup_probe.finish(warmup_time)

    timings["warmup_s"] = perf_counter() - started
    started = perf_counter()
    calibrated = options.iterations_per_run is None
    calibration = calibrate_iterations(step, device, options, training_state) if calibrated else []
    iterations = calibration[-1]["iterations"] if calibrated else options.iterations_per_run
    timings["calibration_s"] = perf_counter() - started
    if on_timing is not None:
        on_timing()
    started = perf_counter()
    device.reset_peak_memory()
    load = HostLoadSample.start()
    metrics: dict[str, Any] = {"total_time": [], "per_iter_time": []}
    clocks = set()
    first = last = None
    for index in range(options.repeat):
        if training_state is not None:
            training_state.rewind()
            device.synchronize()  # XLA: run (and compile) the copies now, outside the repeat's metrics
        device.reset_rng(options.seed)
        device.begin_repeat()
        keep = (lambda result: device.keep(loss_of(result))) if training_state is not None and index == 0 else None
        sample = run_sample(step, device, iterations, device_clock=options.pure_wall_time, keep_first=keep)
        first = sample.first if index == 0 else first
        last = device.keep(loss_of(sample.last)) if training_state is not None else None
        elapsed = sample.elapsed if sample.device_elapsed is None else sample.device_elapsed
        clocks.add("host" if sample.device_elapsed is None else "device")
        metrics["total_time"].append(elapsed)
        metrics["per_iter_time"].append(elapsed / iterations)
        for key, value in device.end_repeat().items():
            metrics.setdefault(key, []).append(value)
        if on_repeat is not None:
            on_repeat(index, sample.last)
    host_load = load.finish(options.noisy_host_share)
    timings["samples_s"] = perf_counter() - started
    metrics["warmup_time"] = warmup_time
    metrics["timing_clock"] = "+".join(sorted(clocks)) or "host"
    metrics["host_load"] = host_load
    metrics["noisy_host"] = host_load["noisy_host"]
    metrics["iterations_per_run"] = iterations
    metrics["iterations_per_run_calibrated"] = calibrated
    if calibrated:
        metrics["calibration"] = calibration
    metrics.update(device.peak_memory())
    if training_state is not None and last is not None:
        metrics["loss_first_timed_step"] = float(first.float().cpu())
        metrics["loss_last_timed_step"] = float(last.float().cpu())
    return metrics


def loss_of(step_result: Any) -> Any:
    """The loss a train step returned (alone, or as (loss, output) with --collect-full-output)."""
    return step_result[0] if isinstance(step_result, tuple) else step_result


def apply_denormal_mode(options: RunOptions) -> None:
    """Flush-to-zero on the CPU, set explicitly either way so every record's mode is a fact.
    Set before the model is loaded or compiled, so eager and compiled runs get the same mode."""
    import torch

    torch.set_flush_denormal(options.flush_denormal)


# The TF32 default is TF32 on CUDA. Since torch 2.9, set_float32_matmul_precision("high") also lets
# oneDNN's float32 matmuls on the CPU use TF32 where the CPU has it; PyTorch's harness turns TF32
# on for CUDA only (common.py, at import: torch.backends.cuda.matmul.allow_tf32 = True), so its
# CPU matmuls stay IEEE. The default keeps them so; an explicit --matmul-precision gets torch's
# whole meaning. docs/benchmarks/paired_vs_harness.md (2026-11-26) compares both processes.
DEFAULT_CPU_MATMUL_FP32_PRECISION = {
    "torch.backends.mkldnn.matmul.fp32_precision": "none",
    "source": "pytorch/benchmark userbenchmark/dynamo/dynamobench/common.py @ 0e83c440, module level"}


def apply_matmul_precision(options: RunOptions) -> None:
    import torch

    if options.disable_tf32:
        torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision(options.effective_matmul_precision)
    if options.matmul_precision is None and hasattr(torch.backends.mkldnn, "matmul"):  # torch 2.9 on
        torch.backends.mkldnn.matmul.fp32_precision = \
            DEFAULT_CPU_MATMUL_FP32_PRECISION["torch.backends.mkldnn.matmul.fp32_precision"]
