"""The profiling pass: torch.profiler over runs of its own after the timed ones.

Profiler overhead (event recording, CUPTI) would inflate the timings it is meant to
explain, so it never wraps a timed run. The pass repeats the timed runs' shape: `repeat`
runs of `iterations_per_run` iterations, RNG reset before each, the device synchronized
before the profiler stops, one profiler session per run so dumps are per repeat.

Figures (seconds):
- total_cpu_time_s / total_cuda_time_s: per profiled run, the sum of every event's self
  CPU (device) time, the same totals key_averages().table() prints at its foot;
- per_iter_cpu_time_s / per_iter_cuda_time_s: those divided by iterations_per_run;
- inductor_ops (xla_unlowered_ops on XLA), the reference runner's names and shape: per
  profiled run, a table of the ops kept by the runtime's `profiled_op` (aten ops; XLA
  fallback ops on XLA): self and total CPU/CUDA time and call counts;
- per_op_profile: the same tables summed over all profiled runs, largest first.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from experiment_runner.child.devices import DeviceRuntime
from experiment_runner.core.options import RunOptions

US = 1e-6


@dataclass
class OpTotals:
    """One op's profile summed over the profiled runs, in seconds."""

    self_cpu_time_s: float = 0.0
    total_cpu_time_s: float = 0.0
    self_cuda_time_s: float = 0.0
    total_cuda_time_s: float = 0.0
    num_of_calls: int = 0

    def add(self, event: Any) -> None:
        self.self_cpu_time_s += event.self_cpu_time_total * US
        self.total_cpu_time_s += event.cpu_time_total * US
        self.self_cuda_time_s += event.self_device_time_total * US
        self.total_cuda_time_s += event.device_time_total * US
        self.num_of_calls += int(event.count)


def event_totals(averages: Iterable[Any]) -> tuple[float, float]:
    """Total self CPU and self device time of a profile, in seconds (self times do not overlap)."""
    cpu = cuda = 0.0
    for event in averages:
        cpu += event.self_cpu_time_total
        cuda += event.self_device_time_total
    return cpu * US, cuda * US


def profile_pass(step: Callable[[], Any], device: DeviceRuntime, options: RunOptions,
                 artifacts_dir: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """Run the profiled runs; return (metrics, artifacts relative to artifacts_dir)."""
    from torch.profiler import profile

    activities = device.profiler_activities()
    sort_key = "self_cuda_time_total" if len(activities) > 1 else "self_cpu_time_total"
    metrics: dict[str, Any] = {}
    artifacts: dict[str, str] = {}
    ops: dict[str, OpTotals] = {}
    for index in range(options.repeat):
        device.reset_rng(options.seed)
        device.synchronize()
        with profile(activities=activities) as prof:
            for _ in range(options.iterations_per_run):
                device.run_iteration(step)
            device.synchronize()
        averages = prof.key_averages()
        if options.profile_cuda_cpu:
            cpu, cuda = event_totals(averages)
            for name, value in (("total_cpu_time_s", cpu), ("per_iter_cpu_time_s", cpu / options.iterations_per_run),
                                ("total_cuda_time_s", cuda),
                                ("per_iter_cuda_time_s", cuda / options.iterations_per_run)):
                metrics.setdefault(name, []).append(value)
        if options.profile_cuda_cpu_individual_ops:
            run_ops: dict[str, OpTotals] = {}
            for event in averages:
                if device.profiled_op(event.key):
                    ops.setdefault(event.key, OpTotals()).add(event)
                    run_ops.setdefault(event.key, OpTotals()).add(event)
            metrics.setdefault(device.op_profile_key, []).append(
                {name: asdict(totals) for name, totals in run_ops.items()})
        if options.dump_pytorch_profiles:
            folder = artifacts_dir / f"repeat_{index}"
            folder.mkdir(parents=True, exist_ok=True)
            trace, table = folder / "pytorch_trace.json", folder / "pytorch_profile.txt"
            prof.export_chrome_trace(str(trace))
            table.write_text(averages.table(sort_by=sort_key, row_limit=-1) + "\n")
            artifacts[f"pytorch_trace_repeat_{index}"] = str(trace.relative_to(artifacts_dir))
            artifacts[f"pytorch_profile_repeat_{index}"] = str(table.relative_to(artifacts_dir))
    if options.profile_cuda_cpu_individual_ops:
        ranked = sorted(ops.items(), key=lambda item: -(item[1].self_cuda_time_s + item[1].self_cpu_time_s))
        metrics["per_op_profile"] = {name: asdict(totals) for name, totals in ranked}
    return metrics, artifacts
