"""Inside the child: load the model, time it, measure it, verify it, publish one result.

Run as `python -m experiment_runner.worker TASK_JSON`. Whatever goes wrong in here is
caught and classified into the result; only a death of the process itself (signal,
os._exit, kill) leaves the parent to write the record from the outside.
"""

from __future__ import annotations

import contextlib
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from benchmark_models import BenchmarkModel, LoadRequest, ModelSkipped, get_suite
from experiment_runner.devices import DeviceRuntime, runtime_for
from experiment_runner.instrumentation import Instrumentation
from experiment_runner.environment import describe_environment, import_plugins
from experiment_runner.matrix import Experiment
from experiment_runner.protocol import RunOptions, Task, write_result

TRACEBACK_TAIL_LINES = 15

_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp64": "float64"}


def traceback_tail(exc: BaseException, lines: int = TRACEBACK_TAIL_LINES) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return "\n".join(text.rstrip().splitlines()[-lines:])


def error_block(exc: BaseException) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": str(exc)[:2000], "traceback_tail": traceback_tail(exc)}


def map_tensors(value: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply fn to every tensor in a nested structure of tuples, lists and dicts."""
    import torch

    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, dict):
        return type(value)((k, map_tensors(v, fn)) for k, v in value.items())
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(map_tensors(v, fn) for v in value)
    return value


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
class ExperimentHarness:
    """Everything needed to run one experiment's iterations, shared by timing and the verifier.

    `load(dtype)` builds a fresh copy of the model from the same seed, so the verifier can
    run eager, float64 and the experiment from identical weights and inputs.
    """

    experiment: Experiment
    options: RunOptions
    device: DeviceRuntime
    artifacts_dir: Path
    model: BenchmarkModel | None = None

    @property
    def config(self):
        return self.experiment.config

    def load(self, precision: str | None = None) -> BenchmarkModel:
        """Load the model (seeded), cast to `precision` ("fp64" for the verifier's reference)."""
        import torch

        precision = precision or self.config.precision
        self.device.reset_rng(self.options.seed)
        suite = get_suite(self.experiment.suite_name)
        model = suite.load(LoadRequest(
            model_name=self.experiment.model_name, test=self.config.test,
            device=self.device.build_device, accelerator=self.config.accelerator,
            precision=self.config.precision, batch_size=self.config.batch_size,
        ))
        if precision in _DTYPES and precision != "fp32":
            dtype = getattr(torch, _DTYPES[precision])
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
            from experiment_runner.xla import xla_autocast

            return xla_autocast(self.config)
        device_type = "cuda" if self.config.accelerator == "cuda" else "cpu"
        dtype = torch.float16 if device_type == "cuda" else torch.bfloat16
        return torch.autocast(device_type=device_type, dtype=dtype)

    def make_step(self, model: BenchmarkModel, compiled: bool = True,
                  precision: str | None = None, full_output: bool | None = None) -> Callable[[], Any]:
        """One iteration as a closure. eval: forward under no_grad; train: forward, loss,
        backward and optimizer step. `compiled` applies the experiment's dynamo backend.

        Train returns the loss, or (loss, output) with full_output (`--collect-full-output`).
        """
        import torch

        precision = precision or self.config.precision
        full_output = self.options.collect_full_output if full_output is None else full_output
        module = model.module
        target = module
        if compiled and self.config.dynamo is not None:
            target = torch.compile(module, backend=self.config.dynamo)
        args, kwargs = model.args, model.kwargs

        if self.config.test == "eval":
            module.eval()

            def eval_step() -> Any:
                with torch.no_grad(), self.autocast(precision):
                    return model.run_forward(target, args, kwargs)

            return eval_step

        module.train()
        optimizer = model.optimizer(module.parameters())

        def train_step() -> Any:
            optimizer.zero_grad(set_to_none=True)
            with self.autocast(precision):
                output = model.run_forward(target, args, kwargs)
                loss = model.compute_loss(output)
            loss.backward()
            optimizer.step()
            return (loss, output) if full_output else loss

        return train_step


def time_iterations(step: Callable[[], Any], device: DeviceRuntime, options: RunOptions,
                    on_repeat: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Warm-up apart, then `repeat` timed runs of `iterations_per_run` iterations.

    The device is synchronized before the clock starts and before it stops; RNG state is
    reset before each run, outside the clock. Warm-up times are kept (they hold the
    compilation) but never mixed into the timed samples. `on_repeat(i)` runs after timed
    run i, outside the clock (per-repeat dumps).
    """
    from time import perf_counter

    warmup_time: list[float] = []
    for _ in range(options.warmup_iterations):
        device.reset_rng(options.seed)
        device.synchronize()
        start = perf_counter()
        device.run_iteration(step)
        device.synchronize()
        warmup_time.append(perf_counter() - start)

    device.reset_peak_memory()
    metrics: dict[str, Any] = {"total_time": [], "per_iter_time": []}
    for index in range(options.repeat):
        device.reset_rng(options.seed)
        device.begin_repeat()
        device.synchronize()
        start = perf_counter()
        for _ in range(options.iterations_per_run):
            device.run_iteration(step)
        device.synchronize()
        elapsed = perf_counter() - start
        metrics["total_time"].append(elapsed)
        metrics["per_iter_time"].append(elapsed / options.iterations_per_run)
        for key, value in device.end_repeat().items():
            metrics.setdefault(key, []).append(value)
        if on_repeat is not None:
            on_repeat(index)
    metrics["warmup_time"] = warmup_time
    metrics.update(device.peak_memory())
    return metrics


def apply_matmul_precision(options: RunOptions) -> None:
    import torch

    if options.disable_tf32:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    elif options.matmul_precision:
        torch.set_float32_matmul_precision(options.matmul_precision)


def run_task(task: Task) -> dict[str, Any]:
    """Run one experiment in this process and return the worker's result (never raises)."""
    started = time.perf_counter()
    config = task.experiment.config
    result: dict[str, Any] = {
        "status": "ok", "error": None, "metrics": {}, "source": None,
        "batch_size": config.batch_size, "precision": config.precision, "accelerator_model": None,
        "verification_code": "VERIFIER_SKIPPED", "verification": None, "artifacts": {},
        "environment": describe_environment(), "timings": {},
    }
    device: DeviceRuntime | None = None
    try:
        t0 = time.perf_counter()
        import torch  # noqa: F401 - timed apart: it is start-up cost, not the experiment's work

        import_plugins()
        result["timings"]["import_s"] = time.perf_counter() - t0
        device = runtime_for(config)
        result["accelerator_model"] = device.accelerator_model()
        apply_matmul_precision(task.options)
        device.prepare(task.options, Path(task.artifacts_dir))
        harness = ExperimentHarness(task.experiment, task.options, device, Path(task.artifacts_dir))

        t0 = time.perf_counter()
        model = harness.model = harness.load()
        result.update(source=model.source, batch_size=model.batch_size)
        result["timings"]["load_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        step = harness.make_step(model)
        instrumentation = Instrumentation(task, device)
        result["metrics"] = time_iterations(step, device, task.options, on_repeat=instrumentation.after_repeat)
        result["timings"]["measure_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        instrumentation.finish(step, result["metrics"])
        result["artifacts"].update(instrumentation.artifacts)
        result["timings"]["instrument_s"] = time.perf_counter() - t0

        if task.options.verify:
            from verifier import verify_experiment

            t0 = time.perf_counter()
            verification = verify_experiment(harness)
            result["verification_code"] = verification["code"]
            result["verification"] = verification
            result["timings"]["verify_s"] = time.perf_counter() - t0
    except ModelSkipped as exc:
        result.update(status="skipped", error={"type": "ModelSkipped", "message": str(exc)})
    except BaseException as exc:  # noqa: BLE001 - every failure must become data
        oom = device.is_oom(exc) if device is not None else isinstance(exc, MemoryError)
        result.update(status="oom" if oom else "error", error=error_block(exc))
        if task.options.verify and result["verification"] is None:
            result["verification_code"] = "VERIFIER_DIDNT_RUN"
    if device is not None:
        result["artifacts"].update(device.artifacts())
    timings = result["timings"]
    timings["work_s"] = sum(timings.get(k, 0.0) for k in ("load_s", "measure_s", "instrument_s", "verify_s"))
    timings["child_s"] = time.perf_counter() - started
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    task = Task.read(Path(argv[0]))
    # The log's first line says whose it is: logs get copied around, and --print-subprocess
    # interleaves them with the parent's progress lines.
    print(f"experiment_runner worker: {task.experiment.experiment_id}", flush=True)
    result = run_task(task)
    write_result(task.result_path, result)
    return 0 if result["status"] in ("ok", "skipped") else 1


if __name__ == "__main__":
    sys.exit(main())
