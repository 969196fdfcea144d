"""Results files as flat rows: one per experiment, for reports, `compare` and pandas users.

Records are streamed through `results.iter_records` and flattened at once, so only the
few fields the reports need stay in memory, never whole records. Summary statistics are
always recomputed from the raw samples: stored `stats` are never trusted, so a file whose
samples were edited is judged by its samples.

With `--processes N` an experiment has one record per process; its Row aggregates them
(see `combine`). Older records of the reference runner (no schema_version, run_id,
experiment_id, status or stats) are accepted: they are grouped into runs by their
`timestamp` (the reference stamps every record of one invocation with the same one), see
`results.legacy_run_id`; their experiment key is derived from the model and configuration
fields; their status is `error` when their metrics hold an `error`, `ok` when they hold
per_iter_time samples. The reference times its first repeat cold, compilation included,
and records no warm-up: when a legacy record has no `warmup_time`, its first sample is
taken as the warm-up (`warmup_estimated`) and the compile-time estimate is derived from it.

Our own figures are read from `record["measurements"]`, falling back to `metrics` for
files written before the two were split.

Which files are results files is said here, once, for every reader (`results_files`): a file
is one by its first record (ours: a schema_version, a run id and an experiment id; the reference
runner's: its model, experiment and metrics objects), whatever its name, so an export or another
tool's JSON lines beside the results are named and left out, never read as a run of Nones.

`load_dataframe` needs pandas; nothing here needs torch.
"""

from __future__ import annotations

import gc
import math
import statistics
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

from experiment_runner.core.minify import SIDECAR, block_for, read_minified, sidecar_path
from experiment_runner.core.results import (
    BadLine,
    ResultsFileError,
    final_records,
    iter_records,
    legacy_run_id,
    process_index,
)
from experiment_runner.core.stats import summarize
from experiment_runner.errors import EXIT_RESULTS_IO, ReportError

if TYPE_CHECKING:
    import pandas

# Configuration dimensions besides the accelerator, test and precision: what tells a
# compiler setup apart within one (model, accelerator, test, precision).
CONFIG_FIELDS: tuple[str, ...] = ("xla", "xla_flags", "dynamo", "torch_xla2", "compile_options")
# Verification codes that mean "not verified" rather than "verified and failed".
UNVERIFIED_CODES = frozenset({None, "VERIFIER_SKIPPED"})
# The required fields (core/record.schema.json) that make a JSON object one of our records: the
# version that says how to read it, and the run and experiment every reader groups it by. A record
# missing a figure is still read (the field becomes None); one missing these is no record of ours.
OWN_RECORD_FIELDS: tuple[str, ...] = ("schema_version", "run_id", "experiment_id")
# The objects every record of the reference runner (PyTorch/XLA's experiment_runner.py) holds.
REFERENCE_RECORD_FIELDS: tuple[str, ...] = ("model", "experiment", "metrics")
# What minified.jsonl is (record_kind): found in a folder it is passed over without a word, since
# its blocks are read with the results file beside it.
SIDECAR_KIND = f"a minification sidecar ({SIDECAR}: the minified blocks of the results file beside it)"


@dataclass(slots=True)
class Row:
    """One experiment's final record(s), flattened; `per_iter_time` keeps the raw samples.

    `processes` records of the experiment (one per `--processes` process) make one Row:
    `process_medians` holds each process's median, `median_per_iter_time_s` is the median
    of those (each process weighs the same), quartiles come from the pooled samples.
    """

    run_id: str
    experiment_id: str
    timestamp: float | None
    suite: str | None
    model: str | None
    source: str | None
    accelerator: str | None
    accelerator_model: str | None
    xla: str | None
    xla_flags: str | None
    dynamo: str | None
    torch_xla2: str | None
    compile_options: str | None  # None: plain torch.compile (or no dynamo, or an older record)
    test: str | None
    precision: str | None
    batch_size: int | None
    repeat: int | None
    iterations_per_run: int | None
    processes: int
    status: str
    verification_code: str | None
    error_type: str | None
    error_message: str | None
    n_samples: int
    median_per_iter_time_s: float | None
    min_per_iter_time_s: float | None
    q1_per_iter_time_s: float | None
    q3_per_iter_time_s: float | None
    relative_iqr: float | None
    unstable: bool | None
    compile_time_s: float | None
    compile_time_estimated: bool | None
    warmup_estimated: bool  # a legacy record's first sample was taken as its warm-up
    peak_allocated_bytes: int | None
    peak_rss_bytes: int | None
    timed_peak_rss_bytes: int | None
    per_iter_time: tuple[float, ...]
    process_medians: tuple[float, ...]
    # other processes used more than the set share of the CPUs during some of its timed runs
    noisy_host: bool = False
    # the experiment's child.log (artifacts.log, found from the results file's folder)
    log: str | None = None
    # --speedup=paired or harness: the speedup of its pairs with the eager baseline (measurements.paired)
    paired_speedup: float | None = None
    # how those pairs were timed: "paired" (ABBA, the median ratio) or "harness" (as PyTorch's harness)
    paired_method: str | None = None
    # --speedup=paired or harness: the eager and compiled warm-ups measured as PyTorch's harness measures
    # them (measurements.harness_warmup): its compression_ratio (eager memory / compiled memory) and its
    # compilation_latency (compiled warm-up time less the eager one's, the same count of iterations each)
    harness_compression_ratio: float | None = None
    harness_compilation_latency_s: float | None = None
    # when the parent wrote the record (timings.finished_at); `timestamp` is the run's start
    finished_at: float | None = None
    # where per_iter_time comes from: "pairs" (its samples in the pairs of --speedup=paired/harness) or
    # "isolated" (its own timed runs; also every record that does not say)
    samples_from: str = "isolated"
    # the record's timings that are numbers (phases, child_s, wall_s), summed over its processes
    timings: dict[str, float] = field(default_factory=dict)
    # a red compiled experiment's minification (its `minified` block, from minified.jsonl beside the
    # results file): what it found in words, and its repro.py
    minified: str | None = None
    minified_repro: str | None = None

    @property
    def configuration(self) -> str:
        """The compiler setup as a short label, e.g. `xla=None dynamo=inductor`."""
        parts = [f"xla={self.xla}", f"dynamo={self.dynamo}"]
        if self.xla_flags:
            parts.append(f"XLA_FLAGS={self.xla_flags}")
        if self.torch_xla2:
            parts.append(f"torch_xla2={self.torch_xla2}")
        if self.compile_options:
            parts.append(f"compile={self.compile_options}")
        return " ".join(parts)

    @property
    def compiles(self) -> bool:
        """Whether a compiler runs (xla, dynamo or torch_xla2): an eager record's compile_time_s is
        its first iteration's overhead, not a compile, and no report calls it one."""
        return self.xla is not None or self.dynamo is not None or self.torch_xla2 is not None

    @property
    def checked(self) -> bool:
        """Whether the record carries an accuracy verdict (not a run without --verify, nor a model
        the verifier could not judge)."""
        return self.verification_code not in UNVERIFIED_CODES

    @property
    def passed(self) -> bool:
        """ok and checked PASS: the dashboard's passing model. A record never checked is no pass."""
        return self.status == "ok" and self.verification_code == "PASS"

    @property
    def usable(self) -> bool:
        """ok with no failing verdict: its timings count (a run without --verify's too, as the
        performance dashboard's), where a wrong answer's do not."""
        return self.status == "ok" and (not self.checked or self.verification_code == "PASS")


def comparison_key(row: Row) -> str:
    """What must be equal for two runs' records to be the same experiment to `compare`: the
    experiment id and where its models came from (a built-in llama and TorchBench's are
    different experiments; `compare` also refuses two batch sizes). Records of the reference
    runner name no source: its torchbench models are TorchBench's."""
    source = row.source or ("torchbenchmark" if row.suite == "torchbench" else "builtin")
    return row.experiment_id if source == "builtin" else f"{row.experiment_id} [{source}]"


# Columns of `load_dataframe`: every scalar field, the configuration label, `checked`, `passed`
# and `usable` (Row's properties).
SAMPLE_FIELDS = ("per_iter_time", "process_medians")
COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Row) if f.name not in SAMPLE_FIELDS + ("timings",)) + \
    ("configuration", "checked", "passed", "usable")


def record_kind(record: dict[str, Any]) -> str | None:
    """None for a results record (ours of any schema_version, a newer one is read with a warning, or
    the reference runner's); otherwise what the record is, in words, for a one-line refusal."""
    if "schema_version" in record:
        missing = [name for name in OWN_RECORD_FIELDS[1:] if not (isinstance(record.get(name), str) and record[name])]
        version = record["schema_version"]
        if not missing and isinstance(version, int) and not isinstance(version, bool):
            return None
        lacks = f"no {' or '.join(missing)}" if missing else "not as an integer"
        return f"a JSON-lines file of other records (its first has schema_version {version!r} but {lacks})"
    if all(isinstance(record.get(name), dict) for name in REFERENCE_RECORD_FIELDS) and "model_name" in record["model"]:
        return None
    if all(isinstance(record.get(name), dict) for name in ("benchmark", "model", "metric")):
        return "a benchmark-database export (export --format pytorch-benchmark)"
    if isinstance(record.get("minified"), dict) and "run_id" in record:
        return SIDECAR_KIND
    keys = sorted(record)
    listed = ", ".join(keys[:6]) + (", ..." if len(keys) > 6 else "")
    return (f"a JSON-lines file of other records (its first has {listed or 'no key'}; a results record has "
            f"{', '.join(OWN_RECORD_FIELDS)})")


def file_kind(path: Path) -> str | None:
    """What `path` is when it is not a results file, judged by its first record (`record_kind`);
    None for a results file, and for one with no record to judge (empty, or every line torn:
    readers say that themselves). A file that cannot be opened is ReportError, exit 3."""
    records = iter_records(path, bad_lines=[])
    try:
        first = next(records, None)
    except ResultsFileError as exc:
        raise ReportError(str(exc), EXIT_RESULTS_IO) from None
    finally:
        records.close()
    return None if first is None else record_kind(first)


def results_file(path: Path) -> Path:
    """`path`, a file named by the user, when it is a results file; else ReportError in one line
    saying what it is (exit 2), or why it cannot be read (exit 3)."""
    what = file_kind(path)
    if what is not None:
        raise ReportError(f"{path} is {what}, not a results file")
    return path


def results_files(paths: Sequence[Path]) -> list[Path]:
    """The results files under `paths`: files as given (each must be one, `results_file`), folders
    searched recursively for *.jsonl in name order (a folder per night sorts by date), where a file
    that is no results file is skipped with one line saying what it is (a sidecar silently)."""
    found: list[Path] = []
    skipped = 0
    for path in map(Path, paths):
        if path.is_dir():
            for candidate in sorted(p for p in path.rglob("*.jsonl") if p.is_file()):
                what = file_kind(candidate)
                if what is None:
                    found.append(candidate)
                    continue
                skipped += 1
                if what != SIDECAR_KIND:
                    print(f"warning: {candidate} is {what}, not a results file; skipped", file=sys.stderr)
        elif path.is_file():
            found.append(results_file(path))
        elif path.exists():
            raise ReportError(f"cannot read results file {path}: not a regular file (a FIFO, a socket or a device)",
                              EXIT_RESULTS_IO)
        else:
            raise ReportError(f"no such results file or folder: {path}", EXIT_RESULTS_IO)
    if not found:
        others = f" ({skipped} *.jsonl file(s) there are not results files)" if skipped else ""
        raise ReportError(f"no results files (*.jsonl) in {', '.join(map(str, paths))}{others}", EXIT_RESULTS_IO)
    return found


def legacy_experiment_id(suite: Any, model: Any, exp: dict[str, Any]) -> str:
    """The same shape as our experiment ids, so old and new runs of one experiment match.

    The batch size is left out (`bsdefault`): the reference records the size it used,
    while our ids only name a size given with --batch-size.
    """
    flags = "" if exp.get("xla_flags") is None else f"[{exp.get('xla_flags')}]"
    return (f"{suite}/{model}/{exp.get('accelerator')}-{exp.get('xla')}{flags}-{exp.get('dynamo')}"
            f"-{exp.get('test')}-{exp.get('precision')}-bsdefault")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _harness_warmup(block: Any) -> dict[str, float | None]:
    """Row's harness_compression_ratio and harness_compilation_latency_s from measurements.harness_warmup;
    None where the record lacks a figure (a ratio needs both memories, a latency equal counts)."""
    eager, compiled = ((block.get(side) if isinstance(block, dict) else None) or {} for side in ("eager", "compiled"))
    eager_mem, compiled_mem = _number(eager.get("peak_memory_bytes")), _number(compiled.get("peak_memory_bytes"))
    eager_s, compiled_s = _number(eager.get("latency_s")), _number(compiled.get("latency_s"))
    same_count = eager.get("iterations") is not None and eager.get("iterations") == compiled.get("iterations")
    return {"harness_compression_ratio": eager_mem / compiled_mem if eager_mem and compiled_mem else None,
            "harness_compilation_latency_s": compiled_s - eager_s if same_count and None not in (eager_s, compiled_s)
            else None}


def _compile_time(figures: dict[str, Any], median: float | None,
                  first_sample: float | None) -> tuple[float | None, bool | None]:
    """compile_time_s when recorded (a list is summed), else an estimate.

    The estimate is the first warm-up iteration (or, for a legacy record without warm-up,
    its first sample) minus the median timed iteration: the first call holds tracing and
    compilation, the median is what a call costs after.
    """
    recorded = figures.get("compile_time_s")
    if isinstance(recorded, list):
        values = [v for v in map(_number, recorded) if v is not None]
        recorded = sum(values) if values else None
    recorded = _number(recorded)
    if recorded is not None:
        return recorded, False
    warmup = figures.get("warmup_time")
    first = _number(warmup[0]) if isinstance(warmup, list) and warmup else first_sample
    if first is None or median is None:
        return None, None
    return max(first - median, 0.0), True


def _samples(raw: Any) -> tuple[float, ...]:
    """Timing samples; non-numbers and non-finite values (NaN stored as null) are dropped."""
    if not isinstance(raw, list):
        return ()
    try:
        if math.isfinite(math.fsum(raw)) and not any(isinstance(v, bool) for v in raw):
            return tuple(raw)  # the common case, checked at C speed
    except (TypeError, OverflowError):
        pass
    return tuple(v for v in map(_number, raw) if v is not None)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def flatten(record: dict[str, Any], file_name: str, folder: Path | None = None) -> Row:
    """One record as a Row; missing or mistyped fields become None instead of errors."""
    model = record.get("model") if isinstance(record.get("model"), dict) else {}
    exp = record.get("experiment") if isinstance(record.get("experiment"), dict) else {}
    metrics = record.get("metrics") if isinstance(record.get("metrics"), dict) else {}
    measurements = record.get("measurements") if isinstance(record.get("measurements"), dict) else {}
    figures = {**metrics, **measurements}
    pairs = figures.get("paired") if isinstance(figures.get("paired"), dict) else None
    samples = _samples(metrics.get("per_iter_time"))
    run_id = record.get("run_id")
    legacy = not isinstance(run_id, str)
    first_sample = None
    if legacy and samples and "warmup_time" not in figures:
        first_sample, samples = samples[0], samples[1:]
    stats = summarize(samples) or {}
    median = _number(stats.get("median"))
    compile_time, estimated = _compile_time(figures, median, first_sample)
    error = record.get("error") if isinstance(record.get("error"), dict) else {}
    status = record.get("status")
    if not isinstance(status, str):
        status = "ok" if (samples or first_sample is not None) and "error" not in metrics else "error"
    if not error and "error" in metrics:
        error = {"type": None, "message": metrics.get("error")}
    suite, model_name = _str(model.get("suite_name")), _str(model.get("model_name"))
    experiment_id = record.get("experiment_id")
    if not isinstance(experiment_id, str):
        experiment_id = legacy_experiment_id(suite, model_name, exp)
    return Row(
        run_id=legacy_run_id(file_name, record.get("timestamp")) if legacy else run_id,
        experiment_id=experiment_id,
        timestamp=_number(record.get("timestamp")),
        suite=suite,
        model=model_name,
        source=_str(model.get("source")),
        accelerator=_str(exp.get("accelerator")),
        accelerator_model=_str(exp.get("accelerator_model")),
        xla=_str(exp.get("xla")),
        xla_flags=_str(exp.get("xla_flags")),
        dynamo=_str(exp.get("dynamo")),
        torch_xla2=_str(exp.get("torch_xla2")),
        compile_options=None if exp.get("compile_options") in (None, "default") else _str(exp.get("compile_options")),
        test=_str(exp.get("test")),
        precision=_str(exp.get("precision")),
        batch_size=_int(exp.get("batch_size")),
        repeat=_int(record.get("repeat")),
        iterations_per_run=_int(record.get("iterations_per_run")),
        processes=1,
        status=status,
        verification_code=_str(record.get("verification_code")),
        error_type=_str(error.get("type")),
        error_message=_str(error.get("message")),
        n_samples=len(samples),
        median_per_iter_time_s=median,
        min_per_iter_time_s=_number(stats.get("min")),
        q1_per_iter_time_s=_number(stats.get("q1")),
        q3_per_iter_time_s=_number(stats.get("q3")),
        relative_iqr=_number(stats.get("relative_iqr")),
        unstable=stats.get("unstable") if isinstance(stats.get("unstable"), bool) else None,
        compile_time_s=compile_time,
        compile_time_estimated=estimated,
        warmup_estimated=first_sample is not None,
        peak_allocated_bytes=_int(figures.get("peak_allocated_bytes")),
        # the child's lifetime peak (records before the rename call it peak_rss_bytes), and the timed runs'
        peak_rss_bytes=_int(figures.get("lifetime_peak_rss_bytes", figures.get("peak_rss_bytes"))),
        timed_peak_rss_bytes=_int(figures.get("timed_peak_rss_bytes")),
        per_iter_time=samples,
        process_medians=() if median is None else (median,),
        noisy_host=figures.get("noisy_host") is True,
        log=_log_path(record, folder),
        paired_speedup=_number(pairs.get("speedup")) if pairs is not None else None,
        paired_method=None if pairs is None else "harness" if "baseline_batch_rule" in pairs else "paired",
        **_harness_warmup(figures.get("harness_warmup")),
        finished_at=_number(record["timings"].get("finished_at")) if isinstance(record.get("timings"), dict) else None,
        samples_from=_str(figures.get("samples_from")) or "isolated",
        timings=_timings(record.get("timings")),
        minified=_minified_said(record.get("minified")),
        minified_repro=_minified_repro(record.get("minified"), folder),
    )


def _minified_said(block: Any) -> str | None:
    """A `minified` block in words: `reproduced, 4 of 15 nodes kept`, or for a minification killed at
    its budget what its last checkpoint showed: `timeout, checkpoint reproduces, 90 of 1091 nodes kept`."""
    if not isinstance(block, dict):
        return None
    nodes = (f", {block['nodes_after']} of {block['nodes_before']} nodes kept"
             if isinstance(block.get("nodes_before"), int) and isinstance(block.get("nodes_after"), int) else "")
    checkpoint = ({True: ", checkpoint reproduces", False: ", checkpoint does not reproduce"}
                  .get(block.get("reproduces"), "") if block.get("status") == "timeout" else "")
    return f"{block.get('status')}{checkpoint}{nodes}"


def _minified_repro(block: Any, folder: Path | None) -> str | None:
    """The repro.py of a `minified` block, found from the results file's folder as the log is."""
    repro = block.get("repro") if isinstance(block, dict) else None
    if not isinstance(repro, str):
        return None
    return str(folder / repro) if folder is not None else repro


def _timings(raw: Any) -> dict[str, float]:
    """The record's timings in seconds (finished_at, a moment, is not one)."""
    if not isinstance(raw, dict):
        return {}
    return {key: seconds for key, value in raw.items()
            if key != "finished_at" and (seconds := _number(value)) is not None}


def summed_timings(rows: Iterable[Row]) -> dict[str, float]:
    """Each timings key summed over the rows that have it."""
    total: dict[str, float] = {}
    for row in rows:
        for key, seconds in row.timings.items():
            total[key] = total.get(key, 0.0) + seconds
    return total


def _log_path(record: dict[str, Any], folder: Path | None) -> str | None:
    """Where the record's child.log is: artifacts.log is relative to the output folder, which
    holds the results file (unless --output-basename put it elsewhere)."""
    artifacts = record.get("artifacts")
    log = artifacts.get("log") if isinstance(artifacts, dict) else None
    if not isinstance(log, str):
        return None
    return str(folder / log) if folder is not None else log


def combine(processes: Sequence[Row]) -> Row:
    """The Row of one experiment measured in several processes (in process order).

    Any process not ok makes the experiment not ok: the first such process's Row is the
    experiment's. Otherwise the samples are pooled for the quartiles, the median is the
    median of the per-process medians, and compile time, memory and verification are the
    first process's, so a run with `--processes` reads like one without.
    """
    if len(processes) == 1:
        return processes[0]
    failed = next((r for r in processes if r.status != "ok"), None)
    if failed is not None:
        return replace(failed, processes=len(processes))
    first = processes[0]
    pooled = tuple(v for r in processes for v in r.per_iter_time)
    medians = tuple(m for r in processes for m in r.process_medians)
    stats = summarize(pooled) or {}
    median = statistics.median(medians) if medians else None
    return replace(
        first, processes=len(processes), timestamp=max((r.timestamp for r in processes if r.timestamp is not None),
                                                       default=None),
        finished_at=max((r.finished_at for r in processes if r.finished_at is not None), default=None),
        n_samples=len(pooled), median_per_iter_time_s=median, min_per_iter_time_s=stats.get("min"),
        q1_per_iter_time_s=stats.get("q1"), q3_per_iter_time_s=stats.get("q3"),
        relative_iqr=stats.get("relative_iqr"), unstable=stats.get("unstable"),
        per_iter_time=pooled, process_medians=medians, noisy_host=any(r.noisy_host for r in processes),
        paired_speedup=statistics.median(paired) if (paired := [r.paired_speedup for r in processes
                                                                 if r.paired_speedup is not None]) else None,
        timings=summed_timings(processes))


def iter_rows(paths: Sequence[Path], bad_lines: dict[Path, list[BadLine]] | None = None) -> Iterator[Row]:
    """Every record of every file as a Row, in file order; torn lines go to `bad_lines`."""
    return (row for row, _ in _indexed_rows(paths, bad_lines))


def _indexed_rows(paths: Sequence[Path], bad_lines: dict[Path, list[BadLine]] | None = None,
                  runs_in: dict[Path, set[str]] | None = None) -> Iterator[tuple[Row, int]]:
    """iter_rows with each record's process index, for `final_rows`; `runs_in` collects each
    file's run ids, so a command reading a folder can say which file its run came from."""
    for path in paths:
        path = Path(path)
        sink = None if bad_lines is None else bad_lines.setdefault(path, [])
        seen = set() if runs_in is None else runs_in.setdefault(path, set())
        minified = read_minified(sidecar_path(path))
        for record in iter_records(path, bad_lines=sink):
            block = block_for(minified, record) if minified else None
            row = flatten(record if block is None else {**record, "minified": block}, path.name, path.parent)
            seen.add(row.run_id)
            yield row, process_index(record)


def speedup_method(paired: int, counted: int, harness: int = 0) -> str | None:
    """How a geomean of `counted` speedups was measured when `paired` of them came from
    --speedup=paired's pairs and `harness` from --speedup=harness's (Row.paired_method): paired,
    harness, isolated, mixed, or None without speedups. Readers that cannot tell the two kinds of
    pairs apart (history's columns) count both as `paired`."""
    if not counted:
        return None
    if harness == counted:
        return "harness"
    if paired == counted:
        return "paired"
    return "isolated" if not paired and not harness else "mixed"


def run_records(paths: Sequence[Path], run_id: str) -> dict[str, dict[str, Any]]:
    """Whole records of one run by experiment id, the last of each (a retry supersedes its
    failure), for what rows leave out: environment, dynamo accounting, measurements."""
    found: dict[str, dict[str, Any]] = {}
    for path in paths:
        for record in iter_records(Path(path), bad_lines=[]):
            if isinstance(record, dict) and record.get("run_id") == run_id:
                found[str(record.get("experiment_id"))] = record
    return found


def final_rows(rows: Iterable[tuple[Row, int]]) -> list[Row]:
    """One Row per (run, experiment): the last record of each of its processes, through
    `results.final_records` (a retry supersedes its failure), then `combine`d."""
    latest = final_records({"run_id": r.run_id, "experiment_id": r.experiment_id, "process": {"index": i}, "row": r}
                           for r, i in rows)
    grouped: dict[tuple[str, str], list[tuple[int, Row]]] = {}
    for (run_id, experiment_id, index), entry in latest.items():
        grouped.setdefault((run_id, experiment_id), []).append((index, entry["row"]))
    return [combine([row for _, row in sorted(members, key=lambda m: m[0])]) for members in grouped.values()]


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    timestamp: float | None  # the run's time (its records' latest), for "latest" and plots over time
    experiments: int
    # when its last record was written (timings.finished_at; records without it: None)
    last_record: float | None = None


def runs_of(rows: Iterable[Row]) -> list[RunInfo]:
    """The runs among `rows`, oldest first: by last timestamp, then by order of appearance."""
    seen: dict[str, tuple[float | None, int, int, float | None]] = {}
    for order, row in enumerate(rows):
        stamp, _, count, finished = seen.get(row.run_id, (None, 0, 0, None))
        stamp = _later(stamp, row.timestamp)
        seen[row.run_id] = (stamp, order, count + 1, _later(finished, row.finished_at))
    ordered = sorted(seen.items(), key=lambda item: (item[1][0] is not None, item[1][0] or 0.0, item[1][1]))
    return [RunInfo(run_id, stamp, count, finished) for run_id, (stamp, _, count, finished) in ordered]


def _later(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Bulk loading makes only acyclic objects; the cycle collector would rescan every kept
    row again and again (about a fifth of the load time on 100,000 records)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def load_rows(paths: Sequence[Path], bad_lines: dict[Path, list[BadLine]] | None = None,
              runs_in: dict[Path, set[str]] | None = None) -> list[Row]:
    """The final row of every experiment of every run in `paths` (each file's run ids into `runs_in`)."""
    with _gc_paused():
        return final_rows(_indexed_rows(paths, bad_lines, runs_in))


def select_run(runs: Sequence[RunInfo], run_id: str | None) -> RunInfo:
    if not runs:
        raise ReportError("no records in the given file(s)")
    if run_id is None:
        return runs[-1]
    for run in runs:
        if run.run_id == run_id:
            return run
    known = ", ".join(r.run_id for r in runs[-10:])
    raise ReportError(f"no run {run_id!r} in the given file(s); latest runs: {known}")


def read_rows(paths: Sequence[Path], runs_in: dict[Path, set[str]] | None = None) -> list[Row]:
    """Final rows of every file; torn or corrupt lines are summarized, one warning per file."""
    bad: dict[Path, list[BadLine]] = {}
    try:
        rows = load_rows(paths, bad, runs_in)
    except ResultsFileError as exc:
        raise ReportError(str(exc), EXIT_RESULTS_IO) from None
    for path, lines in bad.items():
        if lines:
            print(f"warning: {path}: {corrupt_summary(lines)}", file=sys.stderr)
    return rows


def corrupt_summary(lines: Sequence[BadLine], shown: int = 3) -> str:
    """One line for any number of skipped lines: how many, the first few, and the first reason
    (a garbage file has as many bad lines as lines)."""
    where = ", ".join(str(line.lineno) for line in lines[:shown]) + (", ..." if len(lines) > shown else "")
    return (f"skipped {len(lines)} corrupt or torn line(s) (line {where}; "
            f"line {lines[0].lineno}: {lines[0].reason})")


def load_dataframe(paths: Sequence[str | Path] | str | Path, run_id: str | None = None,
                   samples: bool = False) -> "pandas.DataFrame":
    """One flat row per experiment (final record per run), with the columns of COLUMNS.

    run_id None keeps every run; "latest" keeps the latest one. With samples=True a
    `per_iter_time` column holds the raw timed samples as tuples, and `process_medians`
    the median of each process.
    """
    import pandas as pd

    if isinstance(paths, (str, Path)):
        paths = [paths]
    rows = load_rows(results_files([Path(p) for p in paths]), bad_lines=None)
    if run_id == "latest":
        runs = runs_of(rows)
        run_id = runs[-1].run_id if runs else None
    if run_id is not None:
        rows = [r for r in rows if r.run_id == run_id]
    columns = COLUMNS + (SAMPLE_FIELDS if samples else ())
    return pd.DataFrame([[getattr(r, c) for c in columns] for r in rows], columns=list(columns))
