"""What a compiler engineer needs beside the timings: compile time, dynamo's own accounting,
counters and graph breaks, a profiling pass and the cold/warm compile-cache measurement.

Everything here runs outside the timed runs (after them, or between repeats outside the
clock), so turning a flag on never changes the timings it sits beside. A failure in an
optional measurement is reported in `instrumentation_errors` and never discards the timings.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from experiment_runner.devices import DeviceRuntime
from experiment_runner.protocol import Task

COMPILE_TIME_DOC = (
    "compile_time_s = first warm-up iteration minus the median timed iteration, floored at 0: "
    "the one-off cost of the first call (dynamo tracing, backend compilation, cache loads, lazy "
    "initialization) beyond a steady iteration. first_iter_time_s and steady_iter_time_s are "
    "recorded beside it; without warm-up iterations there is no compile_time_s."
)

# Fields of dynamo's CompilationMetrics summed over every compiled frame, when this torch has them.
_DYNAMO_TIME_FIELDS = (
    "entire_frame_compile_time_s", "backend_compile_time_s", "inductor_compile_time_s", "code_gen_time_s",
)
_DYNAMO_COUNT_FIELDS = (
    "inductor_fx_local_cache_hit_count", "inductor_fx_local_cache_miss_count",
    "inductor_fx_remote_cache_hit_count", "inductor_fx_remote_cache_miss_count",
    "aotautograd_local_cache_hit_count", "aotautograd_local_cache_miss_count",
    "num_graph_breaks",
)
GRAPH_BREAK_REASON_CHARS = 300


def compile_time_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Compile-time figures from the timing loop's metrics (see COMPILE_TIME_DOC)."""
    per_iter = metrics.get("per_iter_time") or []
    if not per_iter:
        return {}
    steady = statistics.median(per_iter)
    out = {"steady_iter_time_s": steady}
    warmup = metrics.get("warmup_time") or []
    if warmup:
        out["first_iter_time_s"] = warmup[0]
        out["compile_time_s"] = max(0.0, warmup[0] - steady)
    return out


def dynamo_compile_summary() -> dict[str, Any] | None:
    """Dynamo's own compile-time accounting, summed over the frames compiled in this process.

    Reads torch._dynamo.utils.get_compilation_metrics() (a bounded log of recent frames),
    so a model with more compiled frames than that log holds is under-counted; `frames`
    says how many were summed. None when nothing was compiled.
    """
    from torch._dynamo import utils as dynamo_utils

    entries = list(dynamo_utils.get_compilation_metrics())
    if not entries:
        return None
    summary: dict[str, Any] = {"frames": len(entries)}
    for name in _DYNAMO_TIME_FIELDS + _DYNAMO_COUNT_FIELDS:
        values = [getattr(e, name, None) for e in entries]
        present = [v for v in values if isinstance(v, (int, float))]
        if present:
            summary[name] = sum(present)
    failures = sorted({str(e.fail_type) for e in entries if getattr(e, "fail_type", None)})
    if failures:
        summary["fail_types"] = failures
    return summary


def dynamo_counters() -> dict[str, dict[str, int | float | str]]:
    """torch._dynamo.utils.counters as plain JSON: string keys, numbers kept, anything else as text."""
    from torch._dynamo.utils import counters

    return {
        str(group): {str(k): v if isinstance(v, (int, float)) else str(v) for k, v in values.items()}
        for group, values in counters.items()
    }


def counters_delta(before: Mapping[str, Mapping[str, Any]],
                   after: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """What changed between two counter snapshots (numeric entries only, zero changes left out)."""
    delta: dict[str, dict[str, float]] = {}
    for group, values in after.items():
        for key, value in values.items():
            old = before.get(group, {}).get(key, 0)
            if isinstance(value, (int, float)) and isinstance(old, (int, float)) and value != old:
                delta.setdefault(group, {})[key] = value - old
    return delta


def summarize_graph_breaks(counters: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Graph breaks grouped by the first line of dynamo's reason, most frequent first.

    Dynamo's reasons are multi-line (reason, explanation, hints, links); the first line
    names the cause and the explanation line says what was hit, which is what a reader
    scanning many records needs.
    """
    groups: dict[str, dict[str, Any]] = {}
    for text, count in counters.get("graph_break", {}).items():
        lines = [line.strip() for line in str(text).splitlines() if line.strip()]
        head = (lines[0] if lines else str(text))[:GRAPH_BREAK_REASON_CHARS]
        entry = groups.setdefault(head, {"reason": head, "count": 0})
        entry["count"] += int(count)
        explanation = next((line for line in lines if line.startswith("Explanation:")), None)
        if explanation and "explanation" not in entry:
            entry["explanation"] = explanation.removeprefix("Explanation:").strip()[:GRAPH_BREAK_REASON_CHARS]
    reasons = sorted(groups.values(), key=lambda e: (-e["count"], e["reason"]))
    stats = counters.get("stats", {})
    return {
        "total": sum(e["count"] for e in reasons),
        "unique_graphs": stats.get("unique_graphs", 0),
        "reasons": reasons,
    }


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


@dataclass
class Instrumentation:
    """The optional measurements of one experiment, driven by the worker around its timing loop.

    `after_repeat(i)` runs after each timed repeat, outside the clock; `finish(...)` runs once
    after the timed runs and adds its metrics. `artifacts` maps names to paths relative to
    the experiment's artifacts folder.
    """

    task: Task
    device: DeviceRuntime
    artifacts: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    _last_counters: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def artifacts_dir(self) -> Path:
        return Path(self.task.artifacts_dir)

    @property
    def uses_dynamo(self) -> bool:
        return self.task.experiment.config.dynamo is not None

    def add_artifact(self, name: str, path: Path) -> None:
        self.artifacts[name] = str(path.relative_to(self.artifacts_dir))

    def after_repeat(self, index: int) -> None:
        """--dump-dynamo-counters: repeat_<i>/dynamo_counters.json, cumulative and new in this repeat
        (anything new after warm-up means recompilation inside the timed runs)."""
        if not self.task.options.dump_dynamo_counters:
            return
        counters = dynamo_counters()
        path = self.artifacts_dir / f"repeat_{index}" / "dynamo_counters.json"
        write_json(path, {"repeat": index, "counters": counters,
                          "changed_in_this_repeat": counters_delta(self._last_counters, counters)})
        self._last_counters = counters
        self.add_artifact(f"dynamo_counters_repeat_{index}", path)

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
                metrics["dynamo_compile"] = summary
        if self.uses_dynamo or self.task.options.collect_dynamo_counters:
            counters = dynamo_counters()
            if self.uses_dynamo:
                metrics["graph_breaks"] = summarize_graph_breaks(counters)
            if self.task.options.collect_dynamo_counters:
                metrics["dynamo_counters"] = counters

    def _profile(self, step: Callable[[], Any], metrics: dict[str, Any]) -> None:
        from experiment_runner.profiling import profile_pass

        figures, artifacts = profile_pass(step, self.device, self.task.options, self.artifacts_dir)
        metrics.update(figures)
        self.artifacts.update(artifacts)

    def _cache_bench(self, metrics: dict[str, Any]) -> None:
        from experiment_runner.cachebench import run_cache_bench

        metrics.update(run_cache_bench(self.task, self.add_artifact))
