"""The profiling pass: torch.profiler over runs of its own after the timed ones.

Profiler overhead (event recording, CUPTI) would inflate the timings it is meant to
explain, so it never wraps a timed run. The pass repeats the timed runs' shape: `repeat`
runs of `iterations_per_run` iterations, RNG reset before each, the device synchronized
before the profiler stops, one profiler session per run so dumps are per repeat.

Figures (seconds):
- total_cpu_time_s / total_cuda_time_s: per profiled run, the totals key_averages().table()
  prints at its foot ("Self CPU time total", "Self CUDA time total"). Device time is summed
  over the device's own events only (kernels, memcpy): a CPU op's event also carries the time
  of the kernels it launched, so summing every event would count each kernel twice;
- per_iter_cpu_time_s / per_iter_cuda_time_s: those divided by iterations_per_run;
- inductor_ops (xla_unlowered_ops on XLA), the reference runner's names and shape: per
  profiled run, a table of the ops kept by the runtime's `profiled_op` (aten ops; XLA
  fallback ops on XLA): self and total CPU/CUDA time and call counts;
- per_op_profile: the same tables summed over all profiled runs, largest first.

Where the profiler records no device (CPU experiments), the CUDA figures are null, not 0
(one null per profiled run, in the reference's shape).
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

    def as_record(self, with_device: bool) -> dict[str, Any]:
        data: dict[str, Any] = asdict(self)
        if not with_device:
            data.update(self_cuda_time_s=None, total_cuda_time_s=None)
        return data


def event_totals(events: Iterable[Any]) -> tuple[float, float]:
    """Self CPU and self device time of a profile in seconds, counted as the profiler's table
    counts them: CPU time over every event; device time over device events only (or, from
    the legacy profiler, the CPU events that hold their kernels), user annotations left out."""
    from torch.autograd import DeviceType

    device_types = {DeviceType.CUDA, DeviceType.PrivateUse1, DeviceType.MTIA, DeviceType.XPU}
    cpu = device = 0.0
    for event in events:
        cpu += event.self_cpu_time_total
        legacy = event.device_type == DeviceType.CPU and event.is_legacy
        if legacy or (event.device_type in device_types and not event.is_user_annotation):
            device += event.self_device_time_total
    return cpu * US, device * US


def profile_pass(step: Callable[[], Any], device: DeviceRuntime, options: RunOptions,
                 artifacts_dir: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """Run the profiled runs; return (metrics, artifacts relative to artifacts_dir)."""
    from torch.profiler import profile

    activities = device.profiler_activities()
    with_device = len(activities) > 1
    sort_key = "self_cuda_time_total" if with_device else "self_cpu_time_total"
    iterations = options.iterations_per_run or 1
    metrics: dict[str, Any] = {}
    artifacts: dict[str, str] = {}
    ops: dict[str, OpTotals] = {}
    for index in range(options.repeat):
        device.reset_rng(options.seed)
        device.synchronize()
        with profile(activities=activities) as prof:
            for _ in range(iterations):
                device.run_iteration(step)
            device.synchronize()
        averages = prof.key_averages()
        if options.profile_cuda_cpu:
            cpu, cuda = event_totals(averages)
            for name, value in (("total_cpu_time_s", cpu), ("per_iter_cpu_time_s", cpu / iterations),
                                ("total_cuda_time_s", cuda if with_device else None),
                                ("per_iter_cuda_time_s", cuda / iterations if with_device else None)):
                metrics.setdefault(name, []).append(value)
        if options.profile_cuda_cpu_individual_ops:
            run_ops: dict[str, OpTotals] = {}
            for event in averages:
                if device.profiled_op(event.key):
                    ops.setdefault(event.key, OpTotals()).add(event)
                    run_ops.setdefault(event.key, OpTotals()).add(event)
            metrics.setdefault(device.op_profile_key, []).append(
                {name: totals.as_record(with_device) for name, totals in run_ops.items()})
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
        metrics["per_op_profile"] = {name: totals.as_record(with_device) for name, totals in ranked}
    return metrics, artifacts
