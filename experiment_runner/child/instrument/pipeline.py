"""The optional measurements of one experiment, driven around its timing loop.

Everything here runs outside the timed runs (after them, or between repeats outside the
clock), so turning a flag on never changes the timings it sits beside. A failure in an
optional measurement is reported in `instrumentation_errors` and never discards the timings.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from experiment_runner.child.devices import DeviceRuntime
from experiment_runner.child.instrument.dynamo import (
    compile_time_metrics,
    counters_delta,
    dynamo_compile_summary,
    dynamo_counters,
    summarize_graph_breaks,
)
from experiment_runner.core.compiler_caches import precompiled_headers
from experiment_runner.core.protocol import Task


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


@dataclass
class Instrumentation:
    """The optional measurements of one experiment, driven by the worker around its timing loop.

    `after_repeat(i, output)` runs after each timed repeat, outside the clock; `finish(...)` runs once
    after the timed runs and adds its metrics. `artifacts` maps names to paths relative to
    the experiment's artifacts folder.
    """

    task: Task
    device: DeviceRuntime
    artifacts: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    _last_counters: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Built before the first compile: headers that appear later were built in this
    # experiment's compile time (or a parallel experiment's it waited for).
    _headers_before: set[str] = field(default_factory=lambda: precompiled_headers(tempfile.gettempdir()))

    @property
    def artifacts_dir(self) -> Path:
        return Path(self.task.artifacts_dir)

    @property
    def uses_dynamo(self) -> bool:
        return self.task.experiment.config.dynamo is not None

    def add_artifact(self, name: str, path: Path) -> None:
        self.artifacts[name] = str(path.relative_to(self.artifacts_dir))

    def after_repeat(self, index: int, output: Any = None) -> None:
        """--save-output: repeat_<i>/output.pt, what the repeat's last iteration returned, on the CPU.
        --dump-dynamo-counters: repeat_<i>/dynamo_counters.json, cumulative and new in this repeat
        (anything new after warm-up means recompilation inside the timed runs)."""
        if self.task.options.save_output and output is not None:
            self._guarded("save_output", lambda: self._save_output(index, output))
        if not self.task.options.dump_dynamo_counters:
            return
        counters = dynamo_counters()
        path = self.artifacts_dir / f"repeat_{index}" / "dynamo_counters.json"
        write_json(path, {"repeat": index, "counters": counters,
                          "changed_in_this_repeat": counters_delta(self._last_counters, counters)})
        self._last_counters = counters
        self.add_artifact(f"dynamo_counters_repeat_{index}", path)

    def _save_output(self, index: int, output: Any) -> None:
        import torch

        from benchmark_models.model import map_tensors

        path = self.artifacts_dir / f"repeat_{index}" / "output.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(map_tensors(output, lambda t: t.detach().to("cpu")), path)
        self.add_artifact(f"output_repeat_{index}", path)

    def finish(self, step: Callable[[], Any], metrics: dict[str, Any]) -> None:
        """Add compile time, dynamo accounting, profiler figures and the cache bench to metrics."""
        options = self.task.options
        metrics.update(compile_time_metrics(metrics))
        self._guarded("dynamo", lambda: self._dynamo(metrics))
        if options.profile_cuda_cpu or options.profile_cuda_cpu_individual_ops or options.dump_pytorch_profiles:
            self._guarded("profile", lambda: self._profile(step, metrics))
        if options.cache_bench:
            self._guarded("cache_bench", lambda: self._cache_bench(metrics))
        if self.errors:
            metrics["instrumentation_errors"] = dict(self.errors)

    def _guarded(self, name: str, action: Callable[[], None]) -> None:
        try:
            action()
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - an optional measurement must not discard the timings
            self.errors[name] = f"{type(exc).__name__}: {str(exc)[:1000]}"

    def _dynamo(self, metrics: dict[str, Any]) -> None:
        if self.uses_dynamo:
            summary = dynamo_compile_summary()
            if summary is not None:
                built = precompiled_headers(tempfile.gettempdir()) - self._headers_before
                metrics["dynamo_compile"] = {**summary, "precompiled_headers_built": len(built)}
        if self.uses_dynamo or self.task.options.collect_dynamo_counters:
            counters = dynamo_counters()
            if self.uses_dynamo:
                metrics["graph_breaks"] = summarize_graph_breaks(counters)
            if self.task.options.collect_dynamo_counters:
                metrics["dynamo_counters"] = counters

    def _profile(self, step: Callable[[], Any], metrics: dict[str, Any]) -> None:
        from experiment_runner.child.instrument.profiling import profile_pass

        figures, artifacts = profile_pass(step, self.device, self.task.options, self.artifacts_dir)
        metrics.update(figures)
        self.artifacts.update(artifacts)

    def _cache_bench(self, metrics: dict[str, Any]) -> None:
        from experiment_runner.child.instrument.cachebench import run_cache_bench

        metrics.update(run_cache_bench(self.task, self.add_artifact))
