"""Inside the child: load the model, time it, measure it, verify it, publish one result.

Run as `python -m experiment_runner.child TASK_JSON`. Whatever goes wrong in here is
caught and classified into the result; only a death of the process itself (signal,
os._exit, kill) leaves the parent to write the record from the outside.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from experiment_runner.child import paired
from experiment_runner.child.cpu_launch import (
    RUN_CPU_ENV,
    describe_cpu,
    reexec_under_run_cpu,
    set_threads,
    wants_run_cpu,
)
from experiment_runner.child.devices import DeviceRuntime, runtime_for
from experiment_runner.child.driver import (
    ExperimentDriver,
    WarmupProbe,
    apply_denormal_mode,
    apply_matmul_precision,
    reusable_timed_step,
    state_versions,
    time_iterations,
)
from experiment_runner.child.instrument.dynamo import (harness_accuracy_stats, harness_dynamo_stats,
                                                       harness_training_stats)
from experiment_runner.child.instrument.pipeline import Instrumentation
from experiment_runner.core import dashboards
from experiment_runner.core.logs import WORKER_HEADER
from experiment_runner.core.matrix import AOT_INDUCTOR_OPTIONS
from experiment_runner.core.options import PAIRED_METHODS
from experiment_runner.child.plugins import import_plugins
from experiment_runner.core.environment import describe_environment
from experiment_runner.core.protocol import ChildResult, ProtocolMismatch, Task, publish_result, write_phase
from experiment_runner.core.record import TIMING_PHASES, phase
from experiment_runner.core.results import verification_code
from benchmark_models import ModelSkipped
from benchmark_models.training import harness_recipe

TRACEBACK_TAIL_LINES = 15
# harness_count_method of a model none of whose frames broke: the harness's accuracy loop only
# calls the same forward, which dynamo inlines whole, so it breaks nowhere either (no replay).
NO_BREAK = "no break in any frame compiled"


def traceback_tail(exc: BaseException, lines: int = TRACEBACK_TAIL_LINES) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return "\n".join(text.rstrip().splitlines()[-lines:])


def error_block(exc: BaseException) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": str(exc)[:2000], "traceback_tail": traceback_tail(exc)}


def harness_counts_graph_breaks(driver: ExperimentDriver, metrics: dict[str, Any]) -> bool:
    """The harness's graph-break count is its accuracy mode's (--verify here), for dynamo
    inference, and training with its training step (--training-recipe=dynamo_harness), off XLA
    (PyTorch/XLA's runner has no such column); AOT Inductor goes through torch.export, where
    dynamo breaks nothing."""
    config = driver.config
    harness_step = config.test == "eval" or config.training_recipe == dashboards.HARNESS_RECIPE
    return (config.dynamo is not None and config.xla is None and harness_step and "graph_breaks" in metrics
            and config.compile_options not in AOT_INDUCTOR_OPTIONS)


def harness_accuracy_counters(driver: ExperimentDriver) -> tuple[dict[str, int], str]:
    """The dynamo columns of the harness's accuracy row for this experiment (graph_breaks among
    them), replayed on a fresh copy of the model, and how they were taken. A training step is
    replayed with the optimizer the harness takes on its CI job's device (a CUDA job's run on the
    CPU: the CUDA job's), since that decides frames and breaks and PyTorch's file counts that
    job's; its state (at most two tensors per parameter) fits in what the float64 verification
    before it held. The replay runs under the determinism the harness's accuracy process sets,
    which decides what some models trace (deterministic algorithms add a call to GPT-2's
    attention)."""
    from verifier.determinism import deterministic

    config = driver.config
    model = driver.load()
    iterations = dashboards.harness_iterations()

    def autocast() -> Any:
        return driver.autocast(config.precision)

    with deterministic(dashboards.accuracy_determinism(driver.experiment.model_name)):
        if config.test == "eval":
            return harness_accuracy_stats(model, autocast, iterations), "replayed"
        job = dashboards.dashboards().get(config.dashboard or "")
        accelerator = job.accelerator if job is not None else config.accelerator
        recipe = harness_recipe(model.recipe, driver.experiment.suite_name, driver.experiment.model_name,
                                accelerator, config.dynamo)
        optimizer = recipe.make_optimizer(model.module.parameters())
        stats = harness_training_stats(model, optimizer, autocast, iterations)
    return stats, f"replayed with optimizer {recipe.optimizer_spec}, the harness's on {accelerator}"


def run_task(task: Task, on_timed: Callable[[ChildResult], None] | None = None) -> ChildResult:
    """Run one experiment in this process and return the worker's result (never raises).

    With --verify, `on_timed` gets the result as it stands once timing and instrumentation
    are done, before the verification runs (which may kill the process).
    """
    started = time.perf_counter()
    config = task.experiment.config
    timings: dict[str, float] = {}
    with phase(timings, "setup_s"):
        result = ChildResult(status="ok", batch_size=config.batch_size, precision=config.precision,
                             environment=describe_environment(), timings=timings)
    device: DeviceRuntime | None = None
    driver: ExperimentDriver | None = None
    try:
        with phase(timings, "import_s"):
            import torch  # noqa: F401 - timed apart: it is start-up cost, not the experiment's work

            import_plugins()
        with phase(timings, "setup_s"):
            if task.options.verify and config.accelerator == "cuda":
                # cuBLAS reads its workspace setting once, at its first use: before the timed runs,
                # so the verifier's deterministic runs get it (verifier/determinism.py).
                from verifier.determinism import apply_environment

                apply_environment(dashboards.accuracy_determinism(task.experiment.model_name))
            result.environment["cpu"] = {**set_threads(task.options), **describe_cpu()}
            device = runtime_for(config)
            result.accelerator_model = device.accelerator_model()
            apply_matmul_precision(task.options)
            apply_denormal_mode(task.options)
            device.prepare(task.options, Path(task.artifacts_dir))
            driver = ExperimentDriver(task.experiment, task.options, device, Path(task.artifacts_dir))

        with phase(timings, "load_s"):
            write_phase(task, "loading")
            memory_base = device.harness_memory_base()
            model = driver.model = driver.load()
            result.source, result.batch_size = model.source, model.batch_size
            loaded_state = state_versions(model.module)
            result.environment.update(model.provenance)
            if config.test == "train":
                result.loss = model.recipe.loss_spec(model.loss is not None)
                result.optimizer = model.recipe.optimizer_spec

        t0 = time.perf_counter()
        write_phase(task, "warm-up")
        pairs = paired.applies(driver)
        probe = WarmupProbe(device, dynamo_stats=True) if pairs else None
        if pairs:
            with phase(timings, "baseline_first_warmup_s"):  # before anything compiles, as PyTorch's harness
                eager_warmup = paired.warm_eager_first(driver, model, device, task.options)
        with phase(timings, "build_step_s"):  # torch.compile's wrapper: the first one imports dynamo
            step = driver.make_step(model)
            instrumentation = Instrumentation(task, device)
        timed_leaves: list[int] = []

        def after_repeat(index: int, last: Any) -> None:
            """The instrumentation's, and with --verify the timed output's size, which the
            verifier plans its first run with (verifier/memory.py plan_before_eager)."""
            if task.options.verify and index == 0:
                from verifier.memory import float_leaves

                timed_leaves[:] = float_leaves(last)
            instrumentation.after_repeat(index, last)

        metrics = result.metrics = time_iterations(step, device, paired.timing_options(task.options, pairs),
                                                   on_repeat=after_repeat,
                                                   training_state=model.training_state,
                                                   on_timing=lambda: write_phase(task, "timing"),
                                                   timings=timings, warmup_probe=probe)
        if probe is not None:
            metrics["harness_warmup"] = {"eager": eager_warmup, "compiled": probe.block,
                                         **({} if memory_base is None else {"base_memory_bytes": memory_base})}
        result.iterations_per_run = metrics.pop("iterations_per_run")
        result.iterations_per_run_calibrated = metrics.pop("iterations_per_run_calibrated")
        # The profiling pass repeats the timed runs' shape, calibrated count included.
        instrumentation.task = replace(task, options=replace(task.options,
                                                             iterations_per_run=result.iterations_per_run))
        if pairs:
            write_phase(task, "timing pairs")
            metrics["paired"] = paired.measure_pairs(driver, model, step, device, task.options,
                                                     result.iterations_per_run, timings)
            metrics.update(paired.samples(metrics, task.options))
        elif config.dynamo is None and task.options.speedup in PAIRED_METHODS:
            metrics.update(samples_from=paired.ISOLATED_SAMPLES, paired_baseline=paired.EAGER_BESIDE_PAIRS)
        timings["measure_s"] = time.perf_counter() - t0

        with phase(timings, "instrument_s"):
            write_phase(task, "instrumenting")
            instrumentation.finish(step, result.metrics)
            result.artifacts.update(instrumentation.artifacts)
        split_compile(timings, result.metrics)

        if task.options.verify:
            counted = harness_counts_graph_breaks(driver, result.metrics)
            breaks = result.metrics.get("graph_breaks")
            # The harness's training step breaks (backward, its skipped calls) whatever the model does.
            replay = counted and (breaks["total"] > 0 or config.test == "train")
            # Nothing else was compiled in this process: its counters are the timed step's compile,
            # which is what the harness's accuracy run compiles (forward_pass, once) where nothing
            # broke, and the inductor compile whose cudagraph_skips a replay cannot see otherwise.
            timed_compile = harness_dynamo_stats() if counted else {}
            if counted and not replay:
                breaks.update(harness_count=0, harness_count_method=NO_BREAK, harness_stats=timed_compile)
            # The verifier loads its own copies: the timed model, its step and what they hold go
            # first, so verification has the memory they took (verifier/memory.py plans with it);
            # a timed step that serves as the verifier's compiled run goes as soon as that has run.
            with phase(timings, "verify_prepare_s"):
                from verifier import verify_experiment
                from verifier.memory import timed_run

                driver.timed_run = timed_run(result.metrics, timed_leaves, model.module, config.test)
                driver.model = None
                driver.fresh_copy_reason = reusable_timed_step(driver, loaded_state, model)
                driver.timed_step = step if driver.fresh_copy_reason is None else None
                del model, step, instrumentation
                gc.collect()
                if on_timed is not None:
                    on_timed(replace(result, verification_code=verification_code(task.options.verify,
                                                                                 result.status, None),
                                     artifacts={**result.artifacts, **device.artifacts()}, timings=dict(timings)))

            with phase(timings, "verify_s"):
                write_phase(task, "verifying")
                result.verification = verify_experiment(driver, timings)
            if replay:
                # After verification: the replay resets dynamo, which drops the timed step's code.
                with phase(timings, "harness_graph_breaks_s"):
                    write_phase(task, "counting graph breaks as the harness")
                    try:
                        stats, method = harness_accuracy_counters(driver)
                    except MemoryError:
                        raise
                    except Exception as exc:  # noqa: BLE001 - a count must not discard the verdict
                        breaks["harness_count_error"] = f"{type(exc).__name__}: {str(exc)[:1000]}"
                    else:
                        breaks.update(harness_count=stats["graph_breaks"], harness_count_method=method,
                                      harness_stats={**stats, "cudagraph_skips": timed_compile["cudagraph_skips"]})
    except ModelSkipped as exc:
        result.status, result.error = "skipped", {"type": "ModelSkipped", "message": str(exc)}
    except BaseException as exc:  # noqa: BLE001 - every failure must become data
        oom = device.is_oom(exc) if device is not None else isinstance(exc, MemoryError)
        error = error_block(exc)
        if isinstance(exc, paired.BaselineCopyFailed):
            error["phase"] = paired.BASELINE_COPY_PHASE
        result.status, result.error = "oom" if oom else "error", error
    with phase(timings, "finish_s"):
        if driver is not None:
            driver.discard_aot_package()
        result.verification_code = verification_code(task.options.verify, result.status, result.verification)
        if device is not None:
            result.artifacts.update(device.artifacts())
            if result.metrics:
                result.metrics.update(device.lifetime_peak_memory())
    timings["work_s"] = sum(timings.get(k, 0.0) for k in ("load_s", "measure_s", "instrument_s", "verify_s",
                                                          "harness_graph_breaks_s"))
    timings["child_s"] = time.perf_counter() - started
    timings["other_s"] = timings["child_s"] - sum(timings.get(k, 0.0) for k in TIMING_PHASES if k != "other_s")
    return result


def split_compile(timings: dict[str, float], metrics: dict[str, Any]) -> None:
    """compile_s out of warmup_s: the compile time the instrumentation derived (first warm-up
    iteration minus the steady one), so warmup_s is left with the warm-up proper."""
    if "warmup_s" in timings:
        compile_s = min(max(0.0, metrics.get("compile_time_s") or 0.0), timings["warmup_s"])
        timings["compile_s"] = compile_s
        timings["warmup_s"] -= compile_s


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        task = Task.read(Path(argv[0]))
    except ProtocolMismatch as exc:
        print(f"experiment_runner.child: {argv[0]}: {exc}", file=sys.stderr)
        return 2
    if wants_run_cpu(task.options, task.experiment.config.accelerator):
        try:
            reexec_under_run_cpu(task.options, argv)  # returns only if it could not
        except Exception as exc:  # noqa: BLE001 - run the experiment plainly; the record says why
            os.environ[RUN_CPU_ENV] = json.dumps({"error": f"{type(exc).__name__}: {exc}"[:500]})
    # The log's first line says whose it is: logs get copied around, and --print-subprocess
    # interleaves them with the parent's progress lines.
    print(f"{WORKER_HEADER}{task.experiment.experiment_id}", flush=True)
    result = run_task(task, on_timed=lambda interim: publish_result(task, interim, final=False))
    publish_result(task, result)
    return 0 if result.status in ("ok", "skipped") else 1


if __name__ == "__main__":
    sys.exit(main())
