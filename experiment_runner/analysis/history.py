"""`experiment_runner history`: what changed over the nights, since when, and is it real?

`compare A B` judges two runs on within-process samples, which cannot see night-to-night
noise. Here every experiment's median per run forms a series over the runs, and change
points in it are found by PELT (ruptures' KernelCPD, linear kernel: least-squares change
points in C) on the log of the series, in units of that experiment's own night-to-night
noise, so one penalty fits every experiment:

  noise      robust standard deviation across runs: 1.4826 x MAD of run-to-run
             differences / sqrt(2) (steps barely move it, as they are single differences)
  outliers   a run further than 3 noise units from its 5-run running median is pulled
             back to that distance first: one bad night never becomes a change by itself
  change     a segment boundary with at least --min-runs runs on each side whose segment
             medians differ by at least --min-effect noise units and --min-change
  first bad  the first run of the new segment; "last good" the run before it

Status (ok -> error, ...) and verification (PASS -> FAIL) changes are every run where an
experiment's status or code differs from its previous run. The same changes are printed as
text (newest first), written as JSON or as a self-contained HTML page (--html).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from experiment_runner.analysis.columns import Factor, Records, read_back, read_records
from experiment_runner.analysis.confirm import DEFAULT_PROCESSES, Verdict, confirm, render_confirmation, suspects
from experiment_runner.analysis.evidence import Difference, Event, differences, events
from experiment_runner.analysis.loader import CONFIG_FIELDS, UNVERIFIED_CODES, results_files, speedup_method
from experiment_runner.analysis.files import check_output
from experiment_runner.analysis.repro import repro_command
from experiment_runner.analysis.page import RECORDS_ON_PAGE, encode_series, link_to, render, write_page
from experiment_runner.core.requirements import install_command
from experiment_runner.errors import EXIT_OK, EXIT_REGRESSION, ReportError, ReportParser, analysis_command

METRICS = ("time", "compile_time", "memory")  # numeric series, each: higher is worse
# Steps smaller than this, in the metric's own unit, are no change whatever the noise: an eager
# experiment's "compile time" (first iteration minus a steady one) is a fraction of a millisecond
# and moves by multiples of itself from night to night.
ABSOLUTE_FLOORS = {"compile_time": 0.05, "memory": float(1 << 20)}
METRIC_COLUMNS = {"time": "median", "compile_time": "compile_time_s", "memory": "peak_memory_bytes"}
PAIRED = "paired_speedup"  # a series beside METRICS, for the dashboard: --speedup=paired's median ratio
GROUP_FIELDS = ("suite", "accelerator", "test", "precision")

DESCRIPTION = "What changed over the nights, since when, and is it real?\n\n" + __doc__.split("\n\n", 1)[1] + """
Exit status: 0 no regression found in the newest --window runs; 1 a regression (slower,
larger, longer to compile, ok -> not ok, PASS -> not PASS) that the history without those runs
did not show: a step needs --min-runs runs after it, so it alerts once, the night it is found;
a step in the newest run alone is `suspected` (shown, never exit 1); 2 bad flags; 3 a file
cannot be read."""


class _Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    pass


@dataclass(frozen=True)
class DetectorConfig:
    """Change-point settings; the defaults meet the accuracy target of benchmarks/nightly_history.py."""

    penalty: float = 8.0  # PELT penalty per change, x log(runs), in squared noise units
    min_runs: int = 2  # runs on each side of a change: one night is an outlier, two are a change
    min_effect: float = 3.0  # noise units between the segments' medians
    min_change: float = 0.02  # relative change, whatever the noise
    clip: float = 3.0  # noise units from the running median before a run counts as an outlier
    noise_floor: float = 1e-3  # relative: identical values every night still have rounding
    flaky_threshold: float = 0.10  # a status or verification flip is `flaky` above this failure rate


@dataclass(frozen=True)
class Change:
    """One change of one experiment: a step in a series, or a status or verification change."""

    experiment_id: str
    metric: str  # time, compile_time, memory, status, verification
    kind: str  # regression, improvement, change
    run_index: int  # first bad run, index into History.runs
    first_bad_run: str
    last_good_run: str
    before: float | str | None  # segment median before, or the old status/code
    after: float | str | None
    size: float | None  # after / before - 1 for series
    noise: float | None  # relative night-to-night noise of the series
    records: tuple[tuple[int, int], ...] = ()  # (file index, record index): last good, first bad
    # flaky flips: (posterior mean pass rate, 90% credible interval) over the runs before it
    pass_rate: tuple[float, float, float] | None = None


@dataclass
class History:
    """Every experiment's final record per run, as (experiments x runs) matrices; runs oldest first."""

    records: Records
    run_ids: list[str]
    run_times: np.ndarray  # last timestamp per run (NaN if none)
    experiment_ids: list[str]
    info: list[dict[str, Any]]  # per experiment: suite, model, configuration fields, batch size
    row: np.ndarray  # record number of each (experiment, run), -1 where absent
    series: dict[str, np.ndarray]  # METRICS and PAIRED, NaN where absent or not ok
    noisy: np.ndarray  # (experiment, run): the record says noisy_host (other processes used the CPUs)

    @cached_property
    def experiment_index(self) -> dict[str, int]:
        return {e: i for i, e in enumerate(self.experiment_ids)}

    def first_runs(self, n: int) -> "History":
        """The history as it was after its first `n` runs (same experiments)."""
        return History(self.records, self.run_ids[:n], self.run_times[:n], self.experiment_ids, self.info,
                       self.row[:, :n], {m: series[:, :n] for m, series in self.series.items()}, self.noisy[:, :n])

    def status(self) -> tuple[np.ndarray, list[str]]:
        return self._codes("status")

    def verification(self) -> tuple[np.ndarray, list[str]]:
        return self._codes("verification_code")

    def _codes(self, name: str) -> tuple[np.ndarray, list[str]]:
        """(experiments x runs) codes into the labels: -1 where the record has none, -2 where no record."""
        factor: Factor = self.records.strings[name]
        return np.where(self.row >= 0, factor.codes[np.maximum(self.row, 0)], -2), factor.labels

    def passed(self) -> np.ndarray:
        """(experiments x runs) booleans, checked PASS; False where absent."""
        return self._per_record(self.records.passed())

    def checked(self) -> np.ndarray:
        """(experiments x runs) booleans, an accuracy verdict; False where absent."""
        return self._per_record(self.records.checked())

    def usable(self) -> np.ndarray:
        """(experiments x runs) booleans, timings that count; False where absent."""
        return self._per_record(self.records.usable())

    def _per_record(self, values: np.ndarray) -> np.ndarray:
        return np.where(self.row >= 0, values[np.maximum(self.row, 0)], False)


def load_history(paths: Sequence[Path]) -> History:
    return build_history(read_records(paths))


def build_history(records: Records) -> History:
    runs, experiments = records.strings["run_id"], records.strings["experiment_id"]
    n = len(records)
    if not n:
        raise ReportError("no records in the given file(s)")
    # Runs ordered as loader.runs_of orders them: by last timestamp, then by first appearance.
    stamps = records.numbers["timestamp"]
    n_runs = len(runs.labels)
    last = np.full(n_runs, -np.inf)
    np.fmax.at(last, runs.codes, np.where(np.isnan(stamps), -np.inf, stamps))
    first_seen = np.full(n_runs, n)
    np.minimum.at(first_seen, runs.codes, np.arange(n))
    has = np.isfinite(last)
    order = np.lexsort((first_seen, np.where(has, last, 0.0), has))
    run_rank = np.empty(n_runs, dtype=np.int64)
    run_rank[order] = np.arange(n_runs)
    # The last record of an experiment within a run wins (a retry supersedes a failure).
    keys = experiments.codes * n_runs + run_rank[runs.codes]
    _, first_from_end = np.unique(keys[::-1], return_index=True)
    final = n - 1 - first_from_end
    n_exp = len(experiments.labels)
    row = np.full((n_exp, n_runs), -1, dtype=np.int64)
    row[experiments.codes[final], run_rank[runs.codes[final]]] = final
    ok = np.array([label == "ok" for label in records.strings["status"].labels] + [False])[
        records.strings["status"].codes]
    present = row >= 0
    noisy = present & (records.numbers["noisy_host"] == 1.0)[np.maximum(row, 0)]
    series = {}
    for metric, column in {**METRIC_COLUMNS, PAIRED: "paired_speedup"}.items():
        values = np.where(ok, records.numbers[column], np.nan)
        series[metric] = np.where(present, values[np.maximum(row, 0)], np.nan)
    first_row = np.full(n_exp, n)
    np.minimum.at(first_row, experiments.codes, np.arange(n))
    names = ("suite", "model", "accelerator", *CONFIG_FIELDS, "test", "precision")
    columns = {name: records.strings[name].values(first_row) for name in names}
    batch = records.numbers["batch_size"][first_row]
    info = [{**{name: columns[name][e] for name in names},
             "batch_size": None if math.isnan(batch[e]) else int(batch[e])} for e in range(n_exp)]
    run_times = np.where(np.isfinite(last), last, np.nan)[order]
    return History(records, [runs.labels[i] for i in order], run_times, list(experiments.labels), info, row,
                   series, noisy)


def configuration(info: dict[str, Any]) -> str:
    """The label loader.Row.configuration gives the same fields."""
    parts = [f"xla={info['xla']}", f"dynamo={info['dynamo']}"]
    if info["xla_flags"]:
        parts.append(f"XLA_FLAGS={info['xla_flags']}")
    if info["torch_xla2"]:
        parts.append(f"torch_xla2={info['torch_xla2']}")
    if info["compile_options"]:
        parts.append(f"compile={info['compile_options']}")
    return " ".join(parts)


# ---- change points ---------------------------------------------------------------------

def normalize(logs: np.ndarray, config: DetectorConfig) -> tuple[np.ndarray, np.ndarray]:
    """Rows of log series (runs along axis 1, at least 3) -> each row's noise, and the rows in units
    of it with single outlier runs pulled back to `config.clip` units of a 5-run running median.

    Noise: 1.4826 x MAD of run-to-run differences / sqrt(2), a robust standard deviation that a
    step moves little (it is one difference among many). Whole matrices at once: 2,000 series
    cost one numpy call, not 2,000.
    """
    from numpy.lib.stride_tricks import sliding_window_view

    diffs = np.diff(logs, axis=1)
    spread = np.median(np.abs(diffs - np.median(diffs, axis=1, keepdims=True)), axis=1)
    noise = 1.4826 * spread / math.sqrt(2.0)
    scale = np.maximum(noise, config.noise_floor)[:, None]
    z = (logs - np.median(logs, axis=1, keepdims=True)) / scale
    trend = np.median(sliding_window_view(np.pad(z, ((0, 0), (2, 2)), mode="edge"), 5, axis=1), axis=2)
    return noise, trend + np.clip(z - trend, -config.clip, config.clip)


def segment(logs: np.ndarray, z: np.ndarray, noise: float, config: DetectorConfig) -> list[tuple[int, float, float]]:
    """Steps in one normalized series: (index of the first run after, median before, median after)."""
    if len(logs) < 2 * config.min_runs or np.ptp(logs) < math.log1p(config.min_change):
        return []  # too short, or no step could be large enough: skip the search
    import ruptures

    scale = max(noise, config.noise_floor)
    bounds = ruptures.KernelCPD(kernel="linear", min_size=config.min_runs).fit(z).predict(
        pen=config.penalty * math.log(len(z)))
    edges = [0, *bounds]
    found = []
    for i, cut in enumerate(bounds[:-1]):
        before, after = np.median(logs[edges[i]:cut]), np.median(logs[cut:edges[i + 2]])
        step = after - before
        if abs(step) >= config.min_effect * scale and abs(math.expm1(step)) >= config.min_change:
            # Each of the first min_runs runs after the cut must have moved (half the threshold, in the
            # step's direction): a two-run segment of one old and one new value has a median halfway,
            # which would date a step in the newest run one run too early.
            threshold = 0.5 * max(config.min_effect * scale, math.log1p(config.min_change))
            if all(math.copysign(1.0, step) * (v - before) >= threshold for v in logs[cut:cut + config.min_runs]):
                found.append((cut, float(math.exp(before)), float(math.exp(after))))
    return found


def change_points(values: np.ndarray, config: DetectorConfig) -> tuple[list[tuple[int, float, float]], float]:
    """Steps in one positive series, and its relative noise (NaN under 3 values)."""
    if len(values) < 3:
        return [], math.nan
    logs = np.log(values)
    noise, z = normalize(logs[None, :], config)
    return segment(logs, z[0], float(noise[0]), config), float(noise[0])


def _newest_step(values: np.ndarray, cuts: list[int], noise: float,
                 config: DetectorConfig) -> tuple[float, float] | None:
    """A step in the newest run alone, which a change cannot show yet (it needs `min_runs` on each
    side): (median before, newest) when the newest value is `min_effect` noise units and
    `min_change` away from the median of the segment it follows (at least `min_runs` runs)."""
    start = cuts[-1] if cuts else 0
    segment_ = values[start:-1]
    if len(segment_) < config.min_runs or not math.isfinite(noise):
        return None
    before, newest = float(np.median(segment_)), float(values[-1])
    step = math.log(newest / before)
    if abs(step) >= config.min_effect * max(noise, config.noise_floor) and abs(math.expm1(step)) >= config.min_change:
        return before, newest
    return None


def _series_steps(matrix: np.ndarray, config: DetectorConfig) -> Iterator[tuple[int, np.ndarray, float, list]]:
    """(experiment, runs used, noise, steps) for every row of an (experiments x runs) matrix with 3+
    values; complete rows are normalized together, rows with gaps (failed runs) one by one."""
    usable = np.isfinite(matrix) & (matrix > 0)
    complete = np.flatnonzero(usable.all(axis=1))
    if len(complete) and matrix.shape[1] >= 3:
        logs = np.log(matrix[complete])
        noise, z = normalize(logs, config)
        runs = np.arange(matrix.shape[1])
        for row, e in enumerate(complete.tolist()):
            yield e, runs, float(noise[row]), segment(logs[row], z[row], float(noise[row]), config)
    for e in np.flatnonzero(~usable.all(axis=1) & (usable.sum(axis=1) >= 3)).tolist():
        runs = np.flatnonzero(usable[e])
        steps, noise_e = change_points(matrix[e, runs], config)
        yield e, runs, noise_e, steps


@dataclass
class Analysis:
    """What `history` found: changes (oldest first), per-experiment noise, per-configuration series."""

    history: History
    changes: list[Change]
    noise: dict[str, np.ndarray]  # metric -> per experiment relative noise (NaN if too short)
    window: int
    dashboard: list[dict[str, Any]]  # per configuration, series over the runs (see `dashboard`)

    alerts: list[Change]  # regressions first found in the newest `window` runs (see detect)
    config: DetectorConfig = DetectorConfig()
    # What else differed between each change's last good and first bad record (add_evidence):
    # only for changes whose records were read back.
    evidence: dict[Change, list[Difference]] = field(default_factory=dict)

    def events(self) -> list[Event]:
        ordered = newest_first(self.changes)
        return events(ordered, [self.evidence.get(c) for c in ordered])

    def regressions_in_window(self) -> list[Change]:
        return self.alerts

    @property
    def window_runs(self) -> int:
        """How many runs the window holds: `--window 3` over a history of two runs is those two,
        and the page and the text say two, not three."""
        return min(self.window, len(self.history.run_ids))

    def not_judged(self) -> list[str]:
        """Why history could not judge what it read, as compare says why it did not: too few
        runs, no experiment in two runs."""
        h, needed = self.history, 2 * self.config.min_runs
        reasons = []
        if len(h.run_ids) < needed:
            reasons.append(f"{len(h.run_ids)} run(s): a step needs {needed} runs to be found as a change "
                           f"({self.config.min_runs} on each side), and {self.config.min_runs + 1} to be suspected in the "
                           "newest run")
        if len(h.run_ids) > 1 and not ((h.row >= 0).sum(axis=1) > 1).any():
            reasons.append(f"no experiment appears in more than one of the {len(h.run_ids)} runs: nothing to "
                           "follow from run to run (different suites, models or configurations?)")
        return reasons

    def noisy_runs(self) -> list[str]:
        """The runs whose records say noisy_host, where compare judges no time. history keeps their
        times (on a shared host every night may be noisy, and nothing would be left to judge) and
        says which they are: a step there may be the neighbours', not the build's."""
        h = self.history
        return [f"run {h.run_ids[i]} ({_when(h.run_times[i])}): {int(h.noisy[:, i].sum())} of "
                f"{int((h.row[:, i] >= 0).sum())} records say noisy_host (other processes used the CPUs while they "
                "were timed): a time step there may be the host's, not the build's; rerun that run's experiments "
                "while nothing else runs on the host before trusting one (compare leaves such times unjudged)"
                for i in np.flatnonzero(h.noisy.any(axis=0)).tolist()]

    def as_json(self) -> dict[str, Any]:
        h = self.history
        return {
            "runs": [{"run_id": run_id, "timestamp": _stamp(h.run_times[i]),
                      "experiments": int((h.row[:, i] >= 0).sum()), "passed": int(h.passed()[:, i].sum())}
                     for i, run_id in enumerate(h.run_ids)],
            "window": self.window,
            "regressions_in_window": len(self.regressions_in_window()),
            "not_judged": self.not_judged(),
            "noisy_runs": self.noisy_runs(),
            "changes": [change_json(c, h, self.evidence.get(c)) for c in newest_first(self.changes)],
            "events": [event_json(e, newest_first(self.changes), h) for e in self.events()],
            "experiments": [{"experiment_id": e, **h.info[i], "configuration": configuration(h.info[i]),
                             "noise": {m: _num(self.noise[m][i]) for m in METRICS},
                             "series": {m: _floats(h.series[m][i]) for m in METRICS}}
                            for i, e in enumerate(h.experiment_ids)],
            "dashboard": self.dashboard,
        }


def _num(value: Any) -> float | None:
    value = float(value)
    return None if math.isnan(value) else float(f"{value:.6g}")


def _floats(values: np.ndarray) -> list[float | None]:
    """As recorded (no rounding), None where absent."""
    return [None if math.isnan(v) else v for v in values.tolist()]


def _stamp(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def newest_first(changes: Sequence[Change]) -> list[Change]:
    return sorted(changes, key=lambda c: (-c.run_index, c.kind != "regression", c.metric, c.experiment_id))


def add_evidence(analysis: Analysis, records: dict[tuple[int, int], dict]) -> None:
    """Fill analysis.evidence for the changes whose two records (last good, first bad) are in
    `records`; a status or verification change does not list itself."""
    for change in analysis.changes:
        if len(change.records) == 2 and all(key in records for key in change.records):
            found = differences(records[change.records[0]], records[change.records[1]])
            analysis.evidence[change] = [d for d in found if d.field != change.metric]


def _differences_json(found: list[Difference] | None) -> list[dict[str, Any]] | None:
    return None if found is None else [asdict(d) for d in found]


def event_json(event: Event, ordered: Sequence[Change], history: History) -> dict[str, Any]:
    return {"run_id": event.run_id, "timestamp": _stamp(history.run_times[event.run_index]),
            "environment": _differences_json(list(event.environment)), "changes": len(event.members),
            "time_geomean_change": _num(event.time_geomean) if event.time_geomean is not None else None,
            "experiments": sorted({ordered[i].experiment_id for i in event.members})}


def change_json(change: Change, history: History, evidence: list[Difference] | None = None) -> dict[str, Any]:
    out = asdict(change)
    out["timestamp"] = _stamp(history.run_times[change.run_index])
    for name in ("before", "after", "size", "noise"):
        if isinstance(out[name], float):
            out[name] = _num(out[name])
    out["records"] = [{"file": str(history.records.files[f]), "record": int(r)} for f, r in change.records]
    out["repro"] = repro(change, history)
    out["evidence"] = _differences_json(evidence)
    return out


def repro(change: Change, history: History) -> str:
    """The command that runs the changed experiment again, alone (analysis.repro)."""
    return repro_command(change.experiment_id, history.info[history.experiment_index[change.experiment_id]])


def _records_of(history: History, e: int, runs: Sequence[int]) -> tuple[tuple[int, int], ...]:
    rows = [history.row[e, r] for r in runs if history.row[e, r] >= 0]
    return tuple((int(history.records.source[x]), int(history.records.index[x])) for x in rows)


def detect(history: History, config: DetectorConfig = DetectorConfig(), window: int = 3) -> Analysis:
    """Every change of `history`, and which regressions were first found in its newest `window`
    runs: those the same search over the history without those runs did not find (a change
    needs `min_runs` runs after it, so a step is found a run or more after its first bad run,
    and it alerts then, once)."""
    changes, noise = find_changes(history, config)
    earlier, _ = find_changes(history.first_runs(max(len(history.run_ids) - window, 0)), config)
    known = {(c.experiment_id, c.metric, c.run_index) for c in earlier if c.kind == "regression"}
    alerts = [c for c in changes if c.kind == "regression"
              and not any((c.experiment_id, c.metric, c.run_index + d) in known for d in (-1, 0, 1))]
    return Analysis(history, changes, noise, window, dashboard(history), alerts, config)


def find_changes(history: History, config: DetectorConfig) -> tuple[list[Change], dict[str, np.ndarray]]:
    """Steps of every series, a suspected step in the newest run, and status and verification
    changes (oldest first); and each metric's per-experiment noise."""
    changes: list[Change] = []
    n_exp = len(history.experiment_ids)
    noise = {m: np.full(n_exp, np.nan) for m in METRICS}
    newest = len(history.run_ids) - 1
    for metric in METRICS:
        floor = ABSOLUTE_FLOORS.get(metric, 0.0)
        for e, valid, noise[metric][e], steps in _series_steps(history.series[metric], config):
            steps = [(cut, before, after) for cut, before, after in steps if abs(after - before) >= floor]
            for cut, before, after in steps:
                first_bad, last_good = int(valid[cut]), int(valid[cut - 1])
                changes.append(Change(
                    history.experiment_ids[e], metric, "regression" if after > before else "improvement",
                    first_bad, history.run_ids[first_bad], history.run_ids[last_good], before, after,
                    after / before - 1, noise[metric][e], _records_of(history, e, (last_good, first_bad))))
            if len(valid) and int(valid[-1]) == newest:
                suspected = _newest_step(history.series[metric][e, valid], [c for c, _, _ in steps],
                                         noise[metric][e], config)
                if suspected is not None and abs(suspected[1] - suspected[0]) >= floor:
                    before, after = suspected
                    last_good = int(valid[-2])
                    changes.append(Change(
                        history.experiment_ids[e], metric, "suspected", newest, history.run_ids[newest],
                        history.run_ids[last_good], before, after, after / before - 1, noise[metric][e],
                        _records_of(history, e, (last_good, newest))))
    changes.extend(_code_changes(history, "status", *history.status(), good="ok", config=config))
    verification, labels = history.verification()
    verified = {i for i, label in enumerate(labels) if label not in UNVERIFIED_CODES}
    status, status_labels = history.status()
    ok_code = status_labels.index("ok") if "ok" in status_labels else -3
    verification = np.where((status == ok_code) & np.isin(verification, list(verified)), verification, -2)
    changes.extend(_code_changes(history, "verification", verification, labels, good="PASS", config=config))
    return sorted(changes, key=lambda c: (c.run_index, c.metric, c.experiment_id)), noise


# How many runs before a flip its experiment's pass rate is estimated over.
FLAKY_RUNS = 30


def pass_rate(good: int, bad: int) -> tuple[float, float, float]:
    """Posterior mean and 90% credible interval of a pass probability after `good` passes and
    `bad` failures, under a uniform prior (Beta(1 + good, 1 + bad))."""
    from scipy.special import betaincinv

    a, b = 1 + good, 1 + bad
    return a / (a + b), float(betaincinv(a, b, 0.05)), float(betaincinv(a, b, 0.95))


def _code_changes(history: History, metric: str, codes: np.ndarray, labels: list[str], good: str,
                  config: DetectorConfig = DetectorConfig()) -> list[Change]:
    """Every run whose code differs from the same experiment's previous run that has one (-2: none):
    a regression when it leaves `good`, an improvement when it reaches it, else a change; and
    `flaky` instead when, over the FLAKY_RUNS runs before it, the experiment had already come back
    to `good` after failing and failed more often than `config.flaky_threshold`."""
    found = []
    good_code = labels.index(good) if good in labels else -3
    for e in range(codes.shape[0]):
        present = np.flatnonzero(codes[e] != -2)
        if len(present) < 2:
            continue
        values = codes[e, present]
        for j in np.flatnonzero(values[1:] != values[:-1]).tolist():
            old, new = (labels[v] if v >= 0 else None for v in (values[j], values[j + 1]))
            kind = "regression" if old == good else "improvement" if new == good else "change"
            prior = values[max(0, j + 1 - FLAKY_RUNS):j + 1] == good_code
            recovered = bool(np.any(~prior[:-1] & prior[1:]))
            rate = pass_rate(int(prior.sum()), int((~prior).sum())) if recovered else None
            if rate is not None and 1.0 - rate[0] > config.flaky_threshold:
                kind = "flaky"
            last_good, first_bad = int(present[j]), int(present[j + 1])
            found.append(Change(history.experiment_ids[e], metric, kind, first_bad, history.run_ids[first_bad],
                                history.run_ids[last_good], old, new, None, None,
                                _records_of(history, e, (last_good, first_bad)),
                                rate if kind == "flaky" else None))
    return found


# ---- dashboard over runs --------------------------------------------------------------

def _geomean(matrix: np.ndarray) -> np.ndarray:
    """Column-wise geometric mean ignoring NaN; NaN where a column has no value."""
    with np.errstate(invalid="ignore", divide="ignore"):
        logs = np.log(matrix)
        count = np.isfinite(logs).sum(axis=0)
        total = np.where(np.isfinite(logs), logs, 0.0).sum(axis=0)
        return np.where(count > 0, np.exp(total / np.maximum(count, 1)), np.nan)


def dashboard(history: History) -> list[dict[str, Any]]:
    """Per configuration and run: pass rate, geomean speedup and memory ratio over the eager
    baseline (xla=None, dynamo=None, same model, accelerator, test, precision, batch size) and
    mean compile time of passing models (none for eager, which compiles nothing), as report.py
    defines them: a passing experiment with a paired speedup (--speedup=paired) counts with it,
    others with the ratio of the two experiments' medians; `speedup_method` says which per run
    (paired, isolated or mixed)."""
    passed, checked, timed = history.passed(), history.checked(), history.usable()
    time_, compile_, memory = (history.series[m] for m in METRICS)
    status, labels = history.status()
    ok = status == (labels.index("ok") if "ok" in labels else -3)
    base_of: dict[tuple, int] = {}
    for e, info in enumerate(history.info):
        if info["xla"] is None and info["dynamo"] is None and not info["xla_flags"] and not info["torch_xla2"]:
            base_of[(info["suite"], info["model"], info["accelerator"], info["test"], info["precision"],
                     info["batch_size"])] = e
    groups: dict[tuple, list[int]] = {}
    for e, info in enumerate(history.info):
        groups.setdefault((*(info[k] for k in GROUP_FIELDS), configuration(info)), []).append(e)
    out = []
    for key, members in sorted(groups.items(), key=lambda kv: tuple(str(k) for k in kv[0])):
        members_a = np.array(members)
        bases = np.array([base_of.get((history.info[e]["suite"], history.info[e]["model"],
                                       history.info[e]["accelerator"], history.info[e]["test"],
                                       history.info[e]["precision"], history.info[e]["batch_size"]), -1)
                          for e in members])
        has_base = bases >= 0
        usable = timed[members_a] & np.where(has_base[:, None], ok[np.maximum(bases, 0)], False)
        paired = np.where(timed[members_a], history.series[PAIRED][members_a], np.nan)
        has_paired = np.isfinite(paired)
        with np.errstate(invalid="ignore", divide="ignore"):
            isolated = np.where(usable, time_[np.maximum(bases, 0)] / time_[members_a], np.nan)
        speedup = np.where(has_paired, paired, isolated)
        counted = np.isfinite(speedup)
        with np.errstate(invalid="ignore", divide="ignore"):
            mem_ratio = np.where(usable, memory[np.maximum(bases, 0)] / memory[members_a], np.nan)
        eager = all(history.info[members[0]][name] is None for name in ("xla", "dynamo", "torch_xla2"))
        compile_pass = np.where(timed[members_a] & (not eager), compile_[members_a], np.nan)
        present = history.row[members_a] >= 0
        count = np.isfinite(compile_pass).sum(axis=0)
        compile_mean = np.where(count > 0, np.nansum(compile_pass, axis=0) / np.maximum(count, 1), np.nan)
        suite, accelerator, test, precision, label = key
        out.append({
            "suite": suite, "accelerator": accelerator, "test": test, "precision": precision,
            "configuration": label, "baseline": label == "xla=None dynamo=None",
            "experiments": [history.experiment_ids[e] for e in members],
            "models": [int(v) for v in present.sum(axis=0)],
            "passed": [int(v) for v in passed[members_a].sum(axis=0)],
            "checked": [int(v) for v in checked[members_a].sum(axis=0)],
            "speedup_geomean": [_num(v) for v in _geomean(speedup)],
            "speedup_method": [speedup_method(int((counted & has_paired)[:, r].sum()), int(counted[:, r].sum()))
                               for r in range(speedup.shape[1])],
            "compile_time_mean_s": [_num(v) for v in compile_mean],
            "memory_ratio_geomean": [_num(v) for v in _geomean(mem_ratio)],
            "speedups_latest": [_num(v) for v in speedup[:, -1]],
        })
    return out


# ---- rendering --------------------------------------------------------------------------

def _count(n: int, noun: str) -> str:
    """`1 run`, `2 runs`: a history of one night is read by people checking their first setup."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _when(stamp: float) -> str:
    return "unknown time" if math.isnan(stamp) else time.strftime("%Y-%m-%d %H:%M", time.gmtime(stamp))


def _value(value: Any, metric: str) -> str:
    if not isinstance(value, float):
        return str(value)
    if metric == "memory":
        return f"{value / 2**20:.1f} MiB"
    return f"{value:.4g} s"


def describe(change: Change, history: History) -> str:
    """One line per change; the same words the page shows."""
    flaky = "" if change.pass_rate is None else (
        f" (flaky: passes {change.pass_rate[0]:.0%} of runs, 90% interval {change.pass_rate[1]:.0%}-"
        f"{change.pass_rate[2]:.0%})")
    what = f"{change.before} -> {change.after}{flaky}" if change.size is None else (
        f"{change.size:+.1%} ({_value(change.before, change.metric)} -> {_value(change.after, change.metric)}, "
        f"noise {change.noise:.1%})")
    return (f"{_when(history.run_times[change.run_index])}  {change.kind.upper():<11} {change.metric:<12} "
            f"{change.experiment_id}: {what}; first bad run {change.first_bad_run}, "
            f"last good run {change.last_good_run}")


def render_text(analysis: Analysis) -> str:
    h = analysis.history
    out = [f"history: {_count(len(h.run_ids), 'run')} ({_when(h.run_times[0])} .. {_when(h.run_times[-1])}), "
           f"{_count(len(h.experiment_ids), 'experiment')}, {_count(len(analysis.changes), 'change')}, newest first"]
    found = [e for e in analysis.events() if len(e.members) > 1 or e.environment]
    if found:
        out.append(f"{len(found)} event(s): changes of one run that share what changed in the environment")
        for event in found:
            effect = "" if event.time_geomean is None else f", time geomean {event.time_geomean:+.1%}"
            what = "; ".join(map(str, event.environment)) or "no environment change"
            out.append(f"  {_when(h.run_times[event.run_index])} run {event.run_id}: {len(event.members)} "
                       f"change(s){effect}; {what}")
        out.append("changes:")
    for change in newest_first(analysis.changes):
        out.append(describe(change, h))
        if change in analysis.evidence:
            found_here = analysis.evidence[change]
            out.append(f"    what else changed: {'; '.join(map(str, found_here)) or 'nothing the records show'}")
        if change.kind == "suspected":
            out.append("    the newest run alone: a change once the next run agrees")
        if change.kind in ("regression", "suspected"):
            out.append(f"    to see it again: {repro(change, h)}")
    bad = analysis.regressions_in_window()
    suspected = sum(c.kind == "suspected" for c in analysis.changes)
    out.append(f"{len(bad)} regression(s) first found in the newest {analysis.window_runs} run(s)"
               + (f"; {suspected} suspected in the newest run (the next run confirms or clears them)"
                  if suspected else ""))
    out += [f"not judged: {reason}" for reason in analysis.not_judged()]
    out += [f"noisy host: {run}" for run in analysis.noisy_runs()]
    return "\n".join(out) + "\n"


def load_change_records(analysis: Analysis, limit: int = RECORDS_ON_PAGE) -> dict[tuple[int, int], dict]:
    """The records behind the newest `limit` changes, read back from their files for the page."""
    wanted: dict[int, set[int]] = {}
    for change in newest_first(analysis.changes)[:limit]:
        for f, r in change.records:
            wanted.setdefault(f, set()).add(r)
    return read_back(analysis.history.records, wanted)


def page_data(analysis: Analysis, records: dict[tuple[int, int], dict], out: Path | None,
              limit: int = RECORDS_ON_PAGE) -> dict[str, Any]:
    """What the page shows of `analysis`; `records` are the records behind its changes (load_change_records)."""

    h = analysis.history
    files = [link_to(f, out) for f in h.records.files]
    experiments = [{"id": e, "suite": h.info[i]["suite"], "model": h.info[i]["model"],
                    "accelerator": h.info[i]["accelerator"], "test": h.info[i]["test"],
                    "precision": h.info[i]["precision"], "configuration": configuration(h.info[i]),
                    "noise": {m: None if math.isnan(analysis.noise[m][i]) else round(float(analysis.noise[m][i]), 5)
                              for m in METRICS}}
                   for i, e in enumerate(h.experiment_ids)]
    changes, embedded = [], {}
    for n, change in enumerate(newest_first(analysis.changes)):
        item = change_json(change, h, analysis.evidence.get(change))
        keys = [f"{f}:{r}" for f, r in change.records]
        if n < limit:
            embedded.update({f"{f}:{r}": records[(f, r)] for f, r in change.records if (f, r) in records})
        changes.append({"e": h.experiment_index[change.experiment_id], "metric": change.metric, "kind": change.kind,
                        "run": change.run_index, "good": h.run_ids.index(change.last_good_run),
                        "size": item["size"], "before": item["before"], "after": item["after"],
                        "noise": item["noise"], "records": keys, "text": describe(change, h),
                        "repro": item["repro"], "evidence": item["evidence"]})
    data = {
        "kind": "history",
        "title": f"experiment_runner history: {_count(len(h.run_ids), 'run')}, "
                 f"{_count(len(h.experiment_ids), 'experiment')}",
        "generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "window": analysis.window_runs,
        "regressions_in_window": len(analysis.regressions_in_window()),
        "runs": [{"id": r, "t": None if math.isnan(t) else float(t)} for r, t in zip(h.run_ids, h.run_times)],
        "files": files,
        "experiments": experiments,
        "series": {m: [encode_series(h.series[m][i]) for i in range(len(h.experiment_ids))] for m in METRICS},
        "changes": changes,
        "events": [{**event_json(e, newest_first(analysis.changes), h), "run": e.run_index}
                   for e in analysis.events()],
        "records": embedded,
        "dashboard": latest_dashboard(analysis),
    }
    return data


def latest_dashboard(analysis: Analysis) -> list[dict[str, Any]]:
    """The dashboard rows of the page's "latest run" table and per-model speedups: the
    configurations the newest run measured, each with only its experiments of that run (by
    index into the page's experiments). An experiment of an older run alone would show there as
    the latest run's, a baseline at 1.000x and a compiled one at "-"; its series stay on the page."""
    h = analysis.history
    out = []
    for row in analysis.dashboard:
        kept = [(h.experiment_index[e], speedup) for e, speedup in zip(row["experiments"], row["speedups_latest"])
                if h.row[h.experiment_index[e], -1] >= 0]
        if kept:
            out.append({**row, "experiments": [e for e, _ in kept], "speedups_latest": [s for _, s in kept]})
    return out


# ---- command ------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    d = DetectorConfig()
    p = ReportParser(prog="experiment_runner history", description=DESCRIPTION,
                formatter_class=_Formatter)
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                   help="results files, or folders searched for *.jsonl (e.g. one folder per night)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="what goes to stdout")
    p.add_argument("--html", type=Path, metavar="OUT.html", help="also write the self-contained page there")
    p.add_argument("--window", type=int, default=3,
                   help="exit 1 for a regression first found in the newest N runs (the cron recipe: 1)")
    g = p.add_argument_group("change points")
    g.add_argument("--penalty", type=float, default=d.penalty, help="PELT penalty per change, x log(runs)")
    g.add_argument("--min-runs", type=int, default=d.min_runs, help="runs on each side of a change")
    g.add_argument("--min-effect", type=float, default=d.min_effect,
                   help="smallest step in units of the experiment's night-to-night noise")
    g.add_argument("--min-change", type=float, default=d.min_change, help="smallest relative step (0.02 = 2%%)")
    p.add_argument("--confirm", action="store_true",
                   help="rerun each suspect now (a slowdown suspected in the newest run, a regression that would "
                        "alert) with --confirm-processes processes, into confirm/ beside its newest results file, "
                        "and exit 1 only for those the reruns uphold")
    p.add_argument("--confirm-processes", type=int, default=DEFAULT_PROCESSES, metavar="N",
                   help="fresh processes per rerun (default %(default)s)")
    g.add_argument("--flaky-threshold", type=float, default=d.flaky_threshold,
                   help="a status or verification flip of an experiment that already failed and recovered in "
                        f"its last {FLAKY_RUNS} runs, and failed in more than this share of them, is `flaky` "
                        "(shown with its pass rate, never exit 1)")
    return p


def _config(args: argparse.Namespace) -> DetectorConfig:
    if args.window < 1:
        raise ReportError("--window must be at least 1")
    if args.min_runs < 1:
        raise ReportError("--min-runs must be at least 1")
    for name in ("penalty", "min_effect", "min_change"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value >= 0):
            raise ReportError(f"--{name.replace('_', '-')} must be a finite number >= 0")
    if args.confirm_processes < 1:
        raise ReportError("--confirm-processes must be at least 1")
    if not 0.0 <= args.flaky_threshold <= 1.0:
        raise ReportError("--flaky-threshold must be between 0 and 1")
    return DetectorConfig(penalty=args.penalty, min_runs=args.min_runs, min_effect=args.min_effect,
                          min_change=args.min_change, flaky_threshold=args.flaky_threshold)


def _check_dependencies() -> None:
    from importlib.util import find_spec

    missing = [name for name in ("duckdb", "pyarrow", "ruptures") if find_spec(name) is None]
    if missing:
        raise ReportError(f"history needs {', '.join(missing)}: {install_command(missing)}")


@analysis_command("history")
def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    config = _config(args)
    inputs = results_files(args.paths)
    if args.html is not None:
        check_output(args.html, inputs, "--html")
    _check_dependencies()
    analysis = detect(load_history(inputs), config, args.window)
    records = load_change_records(analysis)
    add_evidence(analysis, records)
    verdicts = run_confirmation(analysis, args.confirm_processes) if args.confirm else None
    if args.html is not None:
        write_page(args.html, render(page_data(analysis, records, args.html)))
        print(f"wrote {args.html}", file=sys.stderr)
    if args.format == "json":
        document = {**analysis.as_json(), **({"confirmation": [asdict(v) for v in verdicts]}
                                             if verdicts is not None else {})}
        sys.stdout.write(json.dumps(document, separators=(",", ":")) + "\n")
    else:
        sys.stdout.write(render_text(analysis) + render_confirmation(verdicts, args.confirm_processes))
    if verdicts is not None:
        return EXIT_REGRESSION if any(v.alerts for v in verdicts) else EXIT_OK
    return EXIT_REGRESSION if analysis.regressions_in_window() else EXIT_OK


def run_confirmation(analysis: Analysis, processes: int) -> list[Verdict]:
    """--confirm: rerun the suspects (analysis.confirm) and judge each on its reruns."""
    h = analysis.history
    targets = [c for c in suspects(analysis.changes, analysis.alerts) if c.records]
    newest_file = {c.experiment_id: Path(h.records.files[c.records[-1][0]]) for c in targets}
    info = {c.experiment_id: h.info[h.experiment_index[c.experiment_id]] for c in targets}
    return confirm(targets, info, newest_file, processes, analysis.config.min_effect, analysis.config.min_change)
