"""`experiment_runner report`: the dashboard's metrics of one run against a baseline.

Pure Python over flat rows (see loader.py) so that a 100,000-record file reports in
seconds without pandas, numpy or torch; matplotlib is imported only for --plot.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from experiment_runner.analysis.baselines import (
    BASELINE_KEYS,
    DEFAULT_BASELINE,
    PAIR_METHODS,
    GroupKey,
    ModelResult,
    is_baseline,
    pair_with_baselines,
    parse_baseline,
)
from experiment_runner.analysis.loader import (
    CONFIG_FIELDS,
    Row,
    RunInfo,
    read_rows,
    results_files,
    runs_of,
    select_run,
    speedup_method,
)
from experiment_runner.analysis.files import check_output, render_csv
from experiment_runner.analysis.stats import geomean
from experiment_runner.core.record import TIMING_PHASES, VERIFY_STEPS
from experiment_runner.core.requirements import install_command
from experiment_runner.errors import (
    EXIT_OK,
    EXIT_RESULTS_IO,
    ReportError,
    ReportParser,
    analysis_command,
    did_you_mean,
)

DESCRIPTION = """\
Report one run of a results file with the metrics of PyTorch's compiler dashboard, per
suite, accelerator, test, precision and configuration, against a baseline configuration
of the same model:

  pass rate      n/N models that are ok and, when verification ran, PASS
  speedup        geometric mean over models of baseline median / configuration median,
                 over models that pass and whose baseline is ok
  compile time   mean over passing models of measurements.compile_time_s when recorded, else
                 of an estimate: first warm-up iteration minus the median iteration
                 (marked ~); none (-) for eager (xla, dynamo and torch_xla2 None), which
                 compiles nothing
  memory ratio   geometric mean of baseline peak / configuration peak over the timed
                 runs: peak_allocated_bytes (CUDA) when both sides have it, else
                 timed_peak_rss_bytes (the process's RSS high-water mark during the timed
                 runs, not its lifetime peak, which holds the interpreter, the torch
                 import and compilation); no ratio when a side lacks both

Samples: the median of metrics.per_iter_time, the timed repeats only; warm-up
iterations are never mixed in. The baseline of a model matches its suite, model,
accelerator, test, precision and batch size, with the --baseline fields replaced.
The last record of an experiment within a run wins, so a retry supersedes a failure.
Records of the reference runner (no run_id) form one run per timestamp per file:
legacy:<file name>@<timestamp>. The reference times its first repeat cold, so a legacy
record without warmup_time has its first sample taken as the warm-up (warmup_estimated)
and its compile time estimated from it (~). With --processes N, a model's median is the
median of its N per-process medians. Statistics are always recomputed from the samples,
never read from `stats`.
Corrupt or torn lines are skipped; one warning per file says how many and where.
Exit status: 0 done, 2 bad flags or no such run, 3 a file cannot be read."""

# The plots' notes for flagged speedups, in the text report's words (ModelResult.flags, !N).
FLAGGED_BARS = "hatched, (noisy host) or (unstable):\nrerun on a quiet host before trusting it"
FLAGGED_GEOMEAN = "!N: N of the geomean's speedups come from noisy-host or unstable samples"
MODELS_PER_PLOT = 40  # more models per bar chart are unreadable: they go to further pages

# What each line of `--table timings` holds: the record's phases (core/record.py TIMING_PHASES),
# verify_s's steps (VERIFY_STEPS, within it: not added to the total), then the children's time no
# phase can hold.
PHASE_LABELS: dict[str, str] = {
    "import_s": "imports in the child (torch, plug-ins)",
    "setup_s": "setup (threads, device, environment)",
    "load_s": "model build and load",
    "baseline_first_warmup_s": "paired baseline: first warm-up, on a copy",
    "build_step_s": "building the step (torch.compile's wrapper)",
    "warmup_s": "warm-up, less compile",
    "compile_s": "compile (first iteration minus a steady one)",
    "calibration_s": "calibration of iterations per sample",
    "samples_s": "isolated timed samples",
    "pairs_warmup_s": "paired baseline: build and warm-up",
    "pairs_s": "timed pairs",
    "instrument_s": "instrumentation",
    "verify_prepare_s": "before verification: verifier import, freeing",
    "verify_s": "verification (float64 reference included)",
    "verify_eager_s": "of which the two eager runs",
    "verify_compiled_s": "of which the experiment's own run",
    "verify_float64_s": "of which the float64 reference",
    "verify_compare_s": "of which the comparisons",
    "harness_graph_breaks_s": "graph breaks counted as the harness (replayed)",
    "finish_s": "finishing (artifacts, lifetime peak memory)",
    "other_s": "in the child, in no phase",
    "unsplit": "in the child, not split (records before the breakdown)",
    "outside": "child start and exit (wall_s - child_s)",
    "no_result": "children without a final result (crashed, timed out)",
}


def check_baseline(fixed: dict[str, str | None], rows: Sequence[Row], run_id: str) -> None:
    """A --baseline value no experiment of the run has can match nothing: a misspelling
    (dynamo=inductr) would otherwise read as a run without a baseline. None is never checked: a
    run without eager experiments is a run without a baseline, said per model."""
    for key, value in fixed.items():
        if value is None:
            continue
        known = sorted({str(getattr(row, key)) for row in rows})
        if value not in known:
            raise ReportError(f"--baseline {key}={value}: no experiment of run {run_id} has it"
                              f"{did_you_mean(value, known)} (its {key} values: {', '.join(known)})")


def describe_baseline(fixed: dict[str, str | None]) -> str:
    same = [k for k in ("accelerator", "test", "precision") if k not in fixed]
    shown = " ".join(f"{k}={v}" for k, v in fixed.items() if v is not None or k in ("xla", "dynamo"))
    return f"{shown} (same {', '.join(same + ['batch size'])})"


@dataclass
class Summary:
    """The dashboard's metrics for one configuration within one group."""

    suite: str
    accelerator: str
    test: str
    precision: str
    configuration: str
    config: dict[str, str | None]  # the CONFIG_FIELDS behind the label, for csv and json readers
    is_baseline: bool
    compiles: bool = True  # loader.Row.compiles: an eager configuration has no compile time
    models: int = 0
    ok: int = 0
    checked: int = 0  # models with an accuracy verdict: only those can pass
    passed: int = 0
    speedups: list[float] = field(default_factory=list)
    speedup_methods: dict[str, int] = field(default_factory=dict)  # how many speedups each method gave
    speedups_flagged: int = 0  # speedups from noisy-host or unstable samples (ModelResult.flags)
    compile_times: list[float] = field(default_factory=list)
    compile_estimated: bool = False
    memory_ratios: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        compile_mean = sum(self.compile_times) / len(self.compile_times) if self.compile_times else None
        return {
            "suite": self.suite, "accelerator": self.accelerator, "test": self.test,
            "precision": self.precision, "configuration": self.configuration, **self.config,
            "baseline": self.is_baseline, "models": self.models, "ok": self.ok, "checked": self.checked,
            "passed": self.passed, "pass_rate": self.passed / self.models if self.checked else None,
            "speedup_geomean": geomean(self.speedups), "speedup_models": len(self.speedups),
            "speedup_paired": self.speedup_methods.get("paired", 0),
            "speedup_harness": self.speedup_methods.get("harness", 0), "speedup_flagged": self.speedups_flagged,
            "compile_time_mean_s": compile_mean, "compile_time_estimated": self.compile_estimated,
            "memory_ratio_geomean": geomean(self.memory_ratios), "memory_models": len(self.memory_ratios),
            "compression_ratio_mean": (sum(self.memory_ratios) / len(self.memory_ratios)
                                       if self.memory_ratios else None),
        }


def summarize_run(results: Iterable[ModelResult], fixed: dict[str, str | None]) -> list[Summary]:
    table: dict[tuple, Summary] = {}
    for res in results:
        r = res.row
        key = (*res.group, r.configuration)
        summary = table.get(key)
        if summary is None:
            config = {name: getattr(r, name) for name in CONFIG_FIELDS}
            summary = table[key] = Summary(*res.group, r.configuration, config, is_baseline(r, fixed), r.compiles)
        summary.models += 1
        summary.ok += r.status == "ok"
        summary.checked += r.checked
        summary.passed += r.passed
        if res.speedup is not None:
            summary.speedups.append(res.speedup)
            summary.speedup_methods[str(res.method)] = summary.speedup_methods.get(str(res.method), 0) + 1
            summary.speedups_flagged += bool(res.flags())
        if res.memory_ratio is not None:
            summary.memory_ratios.append(res.memory_ratio)
        compile_time = r.harness_compilation_latency_s if r.harness_compilation_latency_s is not None else \
            r.compile_time_s
        if r.usable and r.compiles and compile_time is not None:
            summary.compile_times.append(compile_time)
            summary.compile_estimated |= bool(r.compile_time_estimated) and r.harness_compilation_latency_s is None
    return sorted(table.values(), key=lambda s: (s.suite, s.accelerator, s.test, s.precision,
                                                 not s.is_baseline, s.configuration))


def describe_source(run: RunInfo, runs: Sequence[RunInfo], runs_in: dict[Path, set[str]]) -> str:
    """Which files of a folder the reported run came from and what else is there: a folder
    holds many runs, and the report alone names only the one it chose."""
    def listed(paths: Sequence[Path], shown: int = 3) -> str:
        names = ", ".join(map(str, paths[:shown]))
        return names + (f" and {len(paths) - shown} more" if len(paths) > shown else "")

    own = [path for path, ids in runs_in.items() if run.run_id in ids]
    others = [path for path, ids in runs_in.items() if run.run_id not in ids]
    line = f"report: read run {run.run_id} from {listed(own)}"
    if others:
        line += f"; {len(others)} other results file(s) there: {listed(others)}"
    if len(runs) > 1:
        line += f"; {len(runs) - 1} other run(s) in the files read: choose one with --run-id"
    return line


def time_breakdown(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Where the run's children spent their time: each phase of `timings` summed over the
    experiments that have it, with its share of the total and how many experiments it covers.
    Records from before the breakdown count their child_s unsplit; wall_s - child_s is the
    child's start and exit, and a child that left no result counts its wall_s alone. verify_s's
    steps are lines of their own, `within` it: the total and the shares' sum leave them out."""
    seconds = dict.fromkeys(PHASE_LABELS, 0.0)
    counts = dict.fromkeys(PHASE_LABELS, 0)

    def add(key: str, value: float) -> None:
        seconds[key] += value
        counts[key] += 1

    for row in rows:
        timings = row.timings
        if "other_s" in timings:
            for phase in TIMING_PHASES + VERIFY_STEPS:
                if phase in timings:
                    add(phase, timings[phase])
        elif "child_s" in timings:
            add("unsplit", timings["child_s"])
        if "wall_s" in timings:
            add(*(("outside", timings["wall_s"] - timings["child_s"]) if "child_s" in timings
                  else ("no_result", timings["wall_s"])))
    total = sum(value for key, value in seconds.items() if key not in VERIFY_STEPS)
    return [{"phase": key, "what": PHASE_LABELS[key], "seconds": _round(seconds[key]),
             "share": _round(seconds[key] / total) if total else None, "experiments": counts[key],
             "within": "verify_s" if key in VERIFY_STEPS else None}
            for key in PHASE_LABELS if counts[key]]


def render_timings(run: RunInfo, breakdown: Sequence[dict[str, Any]]) -> str:
    from tabulate import tabulate

    if not breakdown:
        return f"run {run.run_id}: none of its records has timings\n"
    total = sum(line["seconds"] for line in breakdown if line["within"] is None)
    rows = [[line["phase"], line["what"], f"{line['seconds']:.1f}", _fmt(line["share"], ".1%"), line["experiments"]]
            for line in breakdown]
    rows.append(["total", "", f"{total:.1f}", "100.0%" if total else "-", ""])
    return "\n".join([
        f"run {run.run_id}: where its children's time went ({total / 3600:.2f} h), summed over its experiments' "
        "final records",
        tabulate(rows, headers=["phase", "what", "seconds", "share", "experiments"], tablefmt="simple",
                 disable_numparse=True),
        "", "Phases are the records' timings (docs/timing.md#where-the-time-goes); an experiment's processes "
        "are summed. The lines \"of which\" are verify_s's steps, within it and not in the total.", ""])


# ---- rendering ---------------------------------------------------------------------------

def _round(value: Any) -> Any:
    """Six significant digits: stable output across platforms' last-bit float differences."""
    return float(f"{value:.6g}") if isinstance(value, float) else value


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def model_records(results: Sequence[ModelResult]) -> list[dict[str, Any]]:
    out = []
    for res in sorted(results, key=lambda m: (*m.group, m.row.model or "", m.row.configuration)):
        r, b = res.row, res.baseline
        out.append({
            "suite": r.suite, "accelerator": r.accelerator, "test": r.test, "precision": r.precision,
            "model": r.model, "batch_size": r.batch_size, "configuration": r.configuration,
            **{name: getattr(r, name) for name in CONFIG_FIELDS},
            "status": r.status, "verification_code": r.verification_code, "checked": r.checked, "passed": r.passed,
            "median_per_iter_time_s": _round(r.median_per_iter_time_s),
            "baseline_median_per_iter_time_s": _round(b.median_per_iter_time_s) if b else None,
            "speedup": _round(res.speedup), "compile_time_s": _round(r.compile_time_s),
            "compile_time_estimated": r.compile_time_estimated,
            "memory_ratio": _round(res.memory_ratio), "unstable": r.unstable,
        })
    return out


def summary_records(summaries: Sequence[Summary]) -> list[dict[str, Any]]:
    return [{k: _round(v) for k, v in s.as_dict().items()} for s in summaries]


def pass_cell(s: Summary) -> str:
    """`3/5`; a model never checked counts as no pass, and the cell says how many were not."""
    if not s.checked:
        return "not checked"
    unchecked = s.models - s.checked
    return f"{s.passed}/{s.models}" + (f" ({unchecked} not checked)" if unchecked else "")


def render_text(run: RunInfo, fixed: dict[str, str | None], summaries: Sequence[Summary],
                results: Sequence[ModelResult], tables: str) -> str:
    from tabulate import tabulate

    def utc(t: float) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))

    # A run's timestamp is when it started; its last record says when it was written (older records do not).
    if run.last_record is not None:
        when = (f"started {utc(run.timestamp)}, " if run.timestamp else "") + f"last record {utc(run.last_record)}"
    else:
        when = f"run timestamp {utc(run.timestamp)}" if run.timestamp else "unknown time"
    out = [f"run {run.run_id} ({run.experiments} experiments, {when})",
           f"baseline: {describe_baseline(fixed)}", ""]
    if tables in ("all", "summary"):
        rows = []
        for s in summaries:
            d = s.as_dict()
            compile_mark = "~" if s.compile_estimated else ""
            rows.append([s.suite, s.accelerator, s.test, s.precision,
                         s.configuration + (" (baseline)" if s.is_baseline else ""),
                         pass_cell(s), _fmt(d["speedup_geomean"], ".3f", "x") + _method_mark(s)
                         + (f" !{s.speedups_flagged}" if s.speedups_flagged else ""),
                         len(s.speedups), _fmt(d["compile_time_mean_s"], ".3f", compile_mark),
                         _fmt(d["memory_ratio_geomean"], ".3f", "x")])
        out.append(tabulate(rows, headers=["suite", "accelerator", "test", "precision", "configuration",
                                           "pass", "geomean speedup", "n", "mean compile s",
                                           "memory ratio"], tablefmt="simple"))
        out.append("")
    if tables in ("all", "models"):
        groups: dict[GroupKey, list[ModelResult]] = {}
        for res in results:
            groups.setdefault(res.group, []).append(res)
        for group in sorted(groups):
            members = groups[group]
            configs = sorted({m.row.configuration for m in members if not is_baseline(m.row, fixed)})
            if not configs:
                continue
            cells: dict[tuple[str, int | None], dict[str, str]] = {}
            for m in members:
                cells.setdefault((m.row.model or "", m.row.batch_size), {})[m.row.configuration] = m.cell()
            rows = [[model, "-" if bs is None else bs, *(by.get(c, "") for c in configs)]
                    for (model, bs), by in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0))]
            out.append(f"speedup per model: {' / '.join(group)}")
            out.append(tabulate(rows, headers=["model", "batch", *configs], tablefmt="simple"))
            out.append("")
    failures = [r for r in results if r.row.status not in ("ok", "skipped")]
    if failures and tables == "all":
        rows = [[r.row.model, f"{r.row.accelerator} {r.row.test} {r.row.precision} {r.row.configuration}",
                 r.row.status, _first_line(f"{r.row.error_type}: {r.row.error_message}"), _shown_path(r.row.log)]
                for r in sorted(failures, key=lambda r: (r.row.model or "", r.row.experiment_id))]
        out.append("failures (each log holds the experiment's own output):")
        out.append(tabulate(rows, headers=["model", "experiment", "status", "error", "log"], tablefmt="simple"))
        out.append("")
    minified = [r for r in results if r.row.minified is not None]
    if minified and tables == "all":
        rows = [[r.row.model, f"{r.row.accelerator} {r.row.test} {r.row.precision} {r.row.configuration}",
                 r.row.verification_code if r.row.status == "ok" else r.row.status, r.row.minified,
                 _shown_path(r.row.minified_repro)]
                for r in sorted(minified, key=lambda r: (r.row.model or "", r.row.experiment_id))]
        out.append("minified repros (python REPRO runs the failing graph alone; minified.jsonl says more):")
        out.append(tabulate(rows, headers=["model", "experiment", "failure", "minified", "repro"],
                            tablefmt="simple"))
        out.append("")
    out.append("speedup = baseline median / configuration median of per_iter_time (warm-up excluded); "
               "~ marks compile times estimated from the first warm-up iteration.")
    if tables in ("all", "summary") and any(not s.compiles for s in summaries):
        out.append("mean compile s: none (-) for eager configurations, which compile nothing (the first iteration's "
                   "overhead, measurements.compile_time_s of their records, is no compile time).")
    if any(s.speedups_flagged for s in summaries):
        out.append("!N: N of the geomean's speedups come from noisy-host or unstable samples (marked per model): "
                   "rerun them on a quiet host before trusting the figure.")
    if any("paired" in s.speedup_methods for s in summaries):
        out.append("paired: the median ratio of baseline and compiled samples interleaved in the compiled "
                   "experiment's own process (--speedup=paired, measurements.paired).")
    if any("harness" in s.speedup_methods for s in summaries):
        out.append("harness: the ratio of the medians of eager and compiled samples timed in pairs in the compiled "
                   "experiment's own process as PyTorch's harness times them (--speedup=harness, a --dashboard "
                   "run's default; measurements.paired).")
    if any(_method_mark(s) == " mixed" for s in summaries):
        out.append("mixed: a geomean over speedups measured in different ways (speedup_paired and speedup_harness "
                   "count the pairs' in --format json and csv).")
    return "\n".join(out) + "\n"


def _method_mark(summary: Summary) -> str:
    """How the geomean's speedups were measured, when any came from pairs."""
    methods = summary.speedup_methods
    method = speedup_method(methods.get("paired", 0), sum(methods.values()), methods.get("harness", 0))
    return f" {method}" if method in (*PAIR_METHODS, "mixed") else ""


def _shown_path(path: str | None) -> str:
    """A log's path as short as it is true: relative to the working folder when inside it."""
    if path is None:
        return "-"
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _first_line(text: str, width: int = 100) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[:width - 1] + "…"


# ---- plots -------------------------------------------------------------------------------

def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise ReportError(f"--plot needs matplotlib: {install_command(['matplotlib'])}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _slug(parts: Iterable[str]) -> str:
    return "_".join("".join(c if c.isalnum() or c in "-." else "-" for c in p) for p in parts)


def write_plots(directory: Path, rows: Sequence[Row], run: RunInfo, runs: Sequence[RunInfo],
                fixed: dict[str, str | None]) -> list[Path]:
    """Per-model speedup bars of the run and the geomean speedup of every run over time."""
    plt = _pyplot()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReportError(f"cannot create plot folder {directory}: {exc.strerror or exc}", EXIT_RESULTS_IO) from None
    written: list[Path] = []
    by_run: dict[str, list[Row]] = {}
    for row in rows:
        by_run.setdefault(row.run_id, []).append(row)

    groups: dict[GroupKey, list[ModelResult]] = {}
    for res in pair_with_baselines(by_run[run.run_id], fixed):
        if res.speedup is not None and not is_baseline(res.row, fixed):
            groups.setdefault(res.group, []).append(res)
    for group, members in sorted(groups.items()):
        models = sorted({m.row.model or "" for m in members})
        pages = [models[i:i + MODELS_PER_PLOT] for i in range(0, len(models), MODELS_PER_PLOT)]
        for number, page in enumerate(pages, start=1):
            suffix = f"_p{number}" if len(pages) > 1 else ""
            on_page = set(page)
            shown = [m for m in members if (m.row.model or "") in on_page]
            fig = _speedup_bars(plt, page, shown, f"{' / '.join(group)} - run {run.run_id}")
            written.append(_save(fig, plt, directory / f"speedup_{_slug(group)}{suffix}.png"))

    series: dict[GroupKey, dict[str, list[tuple[float, float, int]]]] = {}
    for info in runs:
        if info.timestamp is None:
            continue
        for s in summarize_run(pair_with_baselines(by_run[info.run_id], fixed), fixed):
            value = geomean(s.speedups)
            if value is not None and not s.is_baseline:
                key = (s.suite, s.accelerator, s.test, s.precision)
                series.setdefault(key, {}).setdefault(s.configuration, []).append(
                    (info.timestamp, value, s.speedups_flagged))
    for group, lines in sorted(series.items()):
        from datetime import datetime, timezone

        fig, ax = plt.subplots(figsize=(8, 4.5))
        for config, points in sorted(lines.items()):
            times = [datetime.fromtimestamp(t, timezone.utc) for t, _, _ in points]
            ax.plot(times, [v for _, v, _ in points], marker="o", label=config)
            for when, (_, value, flagged) in zip(times, points):
                if flagged:
                    ax.annotate(f"!{flagged}", (when, value), xytext=(0, 4), textcoords="offset points",
                                ha="center", fontsize="small")
        ax.axhline(1.0, color="black", linewidth=0.8)
        if any(flagged for points in lines.values() for _, _, flagged in points):
            ax.set_xlabel(FLAGGED_GEOMEAN)
        ax.set_ylabel("geomean speedup over baseline")
        ax.set_title(f"{' / '.join(group)} over time")
        ax.legend(fontsize="small")
        fig.autofmt_xdate()
        written.append(_save(fig, plt, directory / f"geomean_over_time_{_slug(group)}.png"))
    return written


def _speedup_bars(plt: Any, models: Sequence[str], members: Sequence[ModelResult], title: str) -> Any:
    """Per-model speedup bars; a speedup the text report flags (noisy host, unstable) is hatched and
    labelled as it is there, so a chart read alone does not show a neighbour's noise as a figure."""
    from matplotlib.patches import Patch

    configs = sorted({m.row.configuration for m in members})
    width = 0.8 / len(configs)
    # the legend goes to the right of the bars, where no bar or label can hide it
    fig, ax = plt.subplots(figsize=(max(6.0, 0.35 * len(models) * len(configs) + 2) + 3.0, 4.5))
    handles, tallest, flagged = [], 0.0, False
    for i, config in enumerate(configs):
        results = {m.row.model: m for m in members if m.row.configuration == config}
        shown = [(j, results[model]) for j, model in enumerate(models) if model in results]
        bars = ax.bar([j + i * width for j, _ in shown], [m.speedup for _, m in shown], width)
        handles.append(Patch(facecolor=bars.patches[0].get_facecolor(), label=config))
        for bar, (_, m) in zip(bars, shown):
            tallest = max(tallest, bar.get_height())
            if m.flags():
                flagged = True
                bar.set_hatch("//")
                ax.annotate(" ".join(f"({flag})" for flag in m.flags()),
                            (bar.get_x() + bar.get_width() / 2, bar.get_height()), xytext=(0, 2),
                            textcoords="offset points", ha="center", va="bottom", rotation=90, fontsize="x-small")
    if flagged:
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", label=FLAGGED_BARS))
        ax.set_ylim(0, tallest * 1.3)  # room for the labels above the bars
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(models))], models, rotation=60, ha="right")
    ax.set_ylabel("speedup over baseline")
    ax.set_title(title)
    ax.legend(handles=handles, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def _save(fig: Any, plt: Any, path: Path) -> Path:
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=100)
    except OSError as exc:
        raise ReportError(f"cannot write plot {path}: {exc.strerror or exc}", EXIT_RESULTS_IO) from None
    finally:
        plt.close(fig)
    return path


# ---- command -----------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = ReportParser(prog="experiment_runner report", description=DESCRIPTION,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", type=Path, metavar="PATH",
                   help="results files (JSONL), or folders searched for *.jsonl (as history takes them)")
    p.add_argument("--run-id", help="the run to report (default: the run with the latest record)")
    p.add_argument("--baseline", default=DEFAULT_BASELINE, metavar="KEY=VALUE,...",
                   help=f"baseline configuration; keys: {', '.join(BASELINE_KEYS)}. xla, xla_flags, dynamo "
                        f"and torch_xla2 not given are None; accelerator, test and precision not given "
                        f"are the configuration's own (default: {DEFAULT_BASELINE}, i.e. eager); a value no "
                        f"experiment of the run has (dynamo=inductr) is refused with the run's values")
    p.add_argument("--format", choices=("text", "csv", "json", "html"), default="text",
                   help="output format; html: one self-contained page (dashboard table, per-model speedups)")
    p.add_argument("--table", choices=("all", "summary", "models", "timings"),
                   help="which tables: the summary, the per-model rows, or both (default: all; "
                        "summary for csv, which holds one table); timings: instead, where the run's children "
                        "spent their time, each phase of the records' timings summed over the run (text, csv, "
                        "json)")
    p.add_argument("--plot", type=Path, metavar="DIR",
                   help="also write PNG plots there (needs matplotlib): per-model speedup bars of the "
                        f"run ({MODELS_PER_PLOT} models per image) and geomean speedup of every run in "
                        "the files over time")
    return p


def report(args: argparse.Namespace) -> str:
    fixed = parse_baseline(args.baseline)
    tables = args.table or ("summary" if args.format == "csv" else "all")
    if args.format == "csv" and tables == "all":
        raise ReportError("csv holds one table: choose --table summary or --table models")
    if args.format == "html" and tables == "timings":
        raise ReportError("--table timings is for --format text, csv or json; html shows the dashboard tables")
    inputs = results_files(args.files)
    if args.plot is not None:
        check_output(args.plot, inputs, "--plot", folder=True)
    runs_in: dict[Path, set[str]] = {}
    rows = read_rows(inputs, runs_in)
    runs = runs_of(rows)
    run = select_run(runs, args.run_id)
    if any(path.is_dir() for path in args.files):
        print(describe_source(run, runs, runs_in), file=sys.stderr)
    selected = [r for r in rows if r.run_id == run.run_id]
    check_baseline(fixed, selected, run.run_id)
    if tables == "timings":
        breakdown = time_breakdown(selected)
        if args.format == "text":
            return render_timings(run, breakdown)
        if args.format == "csv":
            return render_csv(breakdown)
        return json.dumps({"run_id": run.run_id, "timestamp": run.timestamp, "timings": breakdown}, indent=2) + "\n"
    results = pair_with_baselines(selected, fixed)
    summaries = summarize_run(results, fixed)
    if args.plot is not None:
        for path in write_plots(args.plot, rows, run, runs, fixed):
            print(f"wrote {path}", file=sys.stderr)
    if args.format == "text":
        return render_text(run, fixed, summaries, results, tables)
    if args.format == "csv":
        return render_csv(summary_records(summaries) if tables == "summary" else model_records(results))
    if args.format == "html":
        from experiment_runner.analysis.page import report_page

        key = ("suite", "model", "accelerator", "test", "precision", "batch_size", "configuration")
        cells = {tuple(getattr(m.row, k) for k in key): m.cell() for m in results}
        models = [dict(m, cell=cells[tuple(m[k] for k in key)]) for m in model_records(results)]
        return report_page(run, describe_baseline(fixed), summary_records(summaries), models)
    document: dict[str, Any] = {"run_id": run.run_id, "timestamp": run.timestamp,
                                "baseline": describe_baseline(fixed)}
    if tables in ("all", "summary"):
        document["summary"] = summary_records(summaries)
    if tables in ("all", "models"):
        document["models"] = model_records(results)
    return json.dumps(document, indent=2) + "\n"


@analysis_command("report")
def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    sys.stdout.write(report(args))
    return EXIT_OK
