"""What else changed between an experiment's last good and first bad record, and which changes
belong to one event.

A step rarely comes alone: a torch bump moves forty models at once, and a graph break that
appears beside a slowdown is most of its explanation. The records already hold that evidence
(environment, dynamo accounting, compile time, memory, verification, host load, per-op
profiles); this module puts the differences next to the change, and groups the changes of one
run that share an environment difference into one event, with its count and geometric-mean
effect.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

# (label, path into the record, kind): "env" fields define events; "exact" fields are compared
# as they are; "scale" fields are reported when they moved by MOVED or more.
FIELDS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("torch", ("environment", "torch"), "env"),
    ("torch_xla", ("environment", "torch_xla"), "env"),
    ("transformers", ("environment", "transformers"), "env"),
    ("timm", ("environment", "timm"), "env"),
    ("torchbenchmark", ("environment", "torchbenchmark"), "env"),
    ("python", ("environment", "python"), "env"),
    ("device driver", ("environment", "device driver"), "env"),
    ("platform", ("environment", "platform"), "env"),
    ("host", ("environment", "hostname"), "env"),
    ("accelerator model", ("experiment", "accelerator_model"), "env"),
    ("threads", ("environment", "cpu", "threads"), "env"),
    ("cpu launcher", ("environment", "cpu", "cpu_launcher"), "env"),
    # hosts a fleet names alike ("AMD EPYC") can differ in the kernels torch takes on them
    ("cpu", ("environment", "cpu", "cpuid"), "env"),
    ("cpu isa", ("environment", "cpu", "isa"), "env"),
    ("aten capability", ("environment", "cpu", "aten_capability"), "env"),
    ("mkldnn bf16", ("environment", "cpu", "mkldnn_bf16"), "env"),
    # the CPU allocator: a preloaded one, or glibc malloc's settings, move a training step by a tenth or more
    ("ld_preload", ("environment", "cpu", "ld_preload"), "env"),
    ("malloc env", ("environment", "cpu", "malloc_env"), "env"),
    ("graph breaks", ("measurements", "graph_breaks", "total"), "exact"),
    ("unique graphs", ("measurements", "graph_breaks", "unique_graphs"), "exact"),
    ("compiled frames", ("measurements", "dynamo_compile", "frames"), "exact"),
    ("iterations per run", ("iterations_per_run",), "exact"),
    ("status", ("status",), "exact"),
    ("error", ("error", "type"), "exact"),
    ("verification", ("verification_code",), "exact"),
    ("noisy host", ("measurements", "noisy_host"), "exact"),
    # --speedup=paired/harness: per_iter_time from the pairs or from isolated runs (a method change)
    ("samples from", ("measurements", "samples_from"), "exact"),
    ("compile time s", ("measurements", "compile_time_s"), "scale"),
    ("timed peak rss bytes", ("measurements", "timed_peak_rss_bytes"), "scale"),
    ("peak allocated bytes", ("measurements", "peak_allocated_bytes"), "scale"),
)
MOVED = 0.10  # a numeric field is evidence when it moved by 10% or more
TOP_OPS = 3  # with per-op profiles on both sides: the ops whose self time moved most


@dataclass(frozen=True)
class Difference:
    field: str
    before: Any
    after: Any
    environment: bool  # part of the host or software stack (what makes an event)

    def __str__(self) -> str:
        return f"{self.field} {self.before} -> {self.after}"


def _get(record: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = record
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _hashable(value: Any) -> Any:
    """A field's value as a Difference holds it: events group by differences."""
    if isinstance(value, dict):
        return tuple(sorted(value.items()))
    return tuple(value) if isinstance(value, list) else value


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[Difference]:
    """The evidence that differs between two records of one experiment, in FIELDS order, then
    the ops whose self time moved most when both have per-op profiles."""
    found = []
    for label, path, kind in FIELDS:
        old, new = _hashable(_get(before, path)), _hashable(_get(after, path))
        if kind == "scale":
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (old, new)) or old <= 0:
                continue
            if abs(new / old - 1.0) < MOVED:
                continue
            old, new = round(old, 4), round(new, 4)
        elif old == new:
            continue
        found.append(Difference(label, old, new, kind == "env"))
    return found + op_differences(before, after)


def op_differences(before: dict[str, Any], after: dict[str, Any]) -> list[Difference]:
    """The TOP_OPS ops whose self time (CPU and device) per iteration moved most, each by MOVED
    or more, when both records have --profile-cuda-cpu-individual-ops profiles."""
    old, new = _op_times(before), _op_times(after)
    if old is None or new is None:
        return []
    found = []
    for op in sorted(old.keys() | new.keys(), key=lambda op: -abs(new.get(op, 0.0) - old.get(op, 0.0))):
        a, b = old.get(op, 0.0), new.get(op, 0.0)
        if len(found) == TOP_OPS or abs(b - a) < MOVED * max(a, b):
            break
        found.append(Difference(f"{op} self ms per iteration", round(a * 1e3, 4), round(b * 1e3, 4), False))
    return found


def _op_times(record: dict[str, Any]) -> dict[str, float] | None:
    """Self seconds per iteration of each profiled op (the profile sums repeat x iterations_per_run)."""
    table = _get(record, ("measurements", "per_op_profile"))
    iterations = (record.get("repeat") or 0) * (record.get("iterations_per_run") or 0)
    if not isinstance(table, dict) or not table or not isinstance(iterations, int) or iterations <= 0:
        return None
    return {op: ((totals.get("self_cpu_time_s") or 0.0) + (totals.get("self_cuda_time_s") or 0.0)) / iterations
            for op, totals in table.items() if isinstance(totals, dict)}


@dataclass(frozen=True)
class Event:
    """Changes whose first bad run is the same run and whose environment differed the same way."""

    run_index: int
    run_id: str
    environment: tuple[Difference, ...]
    members: tuple[int, ...]  # indices into the list of changes given to `events`
    time_geomean: float | None  # geometric mean of the time changes' ratios, minus 1


def events(changes: Sequence[Any], evidence: Sequence[list[Difference] | None]) -> list[Event]:
    """Group `changes` (history Changes) by first bad run and environment difference, newest run
    first, largest group first. Changes without evidence (not read back) group by run alone."""
    groups: dict[tuple[int, tuple[Difference, ...]], list[int]] = {}
    for i, change in enumerate(changes):
        if change.kind == "suspected":
            continue
        env = tuple(d for d in evidence[i] or [] if d.environment)
        groups.setdefault((change.run_index, env), []).append(i)
    found = []
    for (run_index, env), members in groups.items():
        ratios = [1.0 + changes[i].size for i in members if changes[i].metric == "time" and changes[i].size is not None]
        geomean = math.exp(sum(map(math.log, ratios)) / len(ratios)) - 1.0 if ratios else None
        found.append(Event(run_index, changes[members[0]].first_bad_run, env, tuple(members), geomean))
    return sorted(found, key=lambda e: (-e.run_index, -len(e.members), [str(d) for d in e.environment]))
