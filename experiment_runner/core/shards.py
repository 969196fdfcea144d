"""Balanced static shards: split models over hosts by how long they took last time.

`--shard-by=duration:PATH` reads an earlier results file, sums each model's experiment
wall times (final record per experiment), and deals models longest first onto the
least-loaded shard (LPT, within 4/3 of the best split). Models the file does not know
count as the median. Ties break by name and shard index, so every host computes the same
split from the same file and model list, without talking to the others.
"""

from __future__ import annotations

import heapq
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from experiment_runner.core.results import BadLine, ResultsFileError, iter_records


def model_durations(records: Iterable[dict]) -> dict[str, float]:
    """Seconds per model: the wall times of its experiments' final records, summed."""
    durations: dict[str, float] = {}
    latest: dict[str, dict] = {}
    for record in records:  # an experiment's last record is its final one, whatever the run
        latest[str(record.get("experiment_id"))] = record
    for record in latest.values():
        wall = (record.get("timings") or {}).get("wall_s")
        name = (record.get("model") or {}).get("model_name")
        if isinstance(wall, (int, float)) and isinstance(name, str):
            durations[name] = durations.get(name, 0.0) + float(wall)
    return durations


def experiment_durations(records: Iterable[dict]) -> dict[str, float]:
    """Seconds per experiment id: the wall time of its final record."""
    latest = {str(record.get("experiment_id")): (record.get("timings") or {}).get("wall_s") for record in records}
    return {eid: float(wall) for eid, wall in latest.items() if isinstance(wall, (int, float))}


def read_records(path: Path, flag: str) -> list[dict]:
    """The records of an earlier results file; ResultsFileError, naming `flag`, if it cannot be read or
    holds no record."""
    bad: list[BadLine] = []
    records = list(iter_records(path, bad_lines=bad))
    if not records:
        why = f" (line {bad[0].lineno}: {bad[0].reason})" if bad else " (it is empty)"
        raise ResultsFileError(f"{flag}: {path} holds no results record{why}")
    return records


def read_durations(path: Path) -> dict[str, float]:
    """model_durations of a results file; ResultsFileError if it cannot be read or holds no record."""
    return model_durations(read_records(path, "--shard-by"))


@dataclass(frozen=True)
class MachineTime:
    """The expected seconds of a set of experiments: `known` of them from an earlier file, the
    `unknown` rest at the median of the known (`median_s`)."""

    seconds: float
    known: int
    unknown: int
    median_s: float


def machine_time(experiment_ids: Sequence[str], durations: dict[str, float]) -> MachineTime:
    known = [durations[e] for e in experiment_ids if e in durations]
    median = statistics.median(known) if known else 0.0
    return MachineTime(sum(known) + median * (len(experiment_ids) - len(known)), len(known),
                       len(experiment_ids) - len(known), median)


def costs(models: Sequence[str], durations: dict[str, float]) -> dict[str, float]:
    """Each model's expected seconds: its duration, or the median of the known ones."""
    known = [durations[m] for m in models if m in durations]
    default = statistics.median(known) if known else 1.0
    return {m: durations.get(m, default) for m in models}


def balanced_shards(models: Sequence[str], durations: dict[str, float], total: int) -> list[list[str]]:
    """`total` shards of `models` with loads as even as LPT makes them; each shard sorted by name."""
    cost = costs(models, durations)
    heap = [(0.0, index) for index in range(total)]
    shards: list[list[str]] = [[] for _ in range(total)]
    for model in sorted(models, key=lambda m: (-cost[m], m)):
        load, index = heapq.heappop(heap)
        shards[index].append(model)
        heapq.heappush(heap, (load + cost[model], index))
    return [sorted(shard, key=lambda n: (n.lower(), n)) for shard in shards]


def shard_loads(shards: Sequence[Sequence[str]], durations: dict[str, float]) -> list[float]:
    """Each shard's expected seconds (unknown models at the median), for reports and benchmarks."""
    cost = costs([m for shard in shards for m in shard], durations)
    return [sum(cost[m] for m in shard) for shard in shards]
