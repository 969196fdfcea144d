"""Results files as columns (numpy arrays), read by DuckDB straight from the JSONL.

`history` reads a year of nightly files (hundreds of thousands of records, a gigabyte of
JSON); parsing each record into a Python dict would take minutes. DuckDB parses only the
fields asked for, in C++, with the file order kept (`preserve_insertion_order`, its default),
so "the last record of an experiment within a run wins" holds as in `loader.py`.

A file DuckDB cannot read as a whole (a torn last line after a crash, a mistyped field) is
read again by `loader.iter_rows`, which skips bad lines with a warning naming each one;
both paths apply `loader.flatten`'s rules, which a test checks on the same files:
our figures come from `measurements`, then `metrics`; compile time is recorded or estimated
from the first warm-up iteration; records without run_id (the reference runner's) are
grouped into runs by `results.legacy_run_id`. Which fields DuckDB reads, and their SQL types,
come from the record schema (`RECORD_PATHS`, core/record.schema.json).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from experiment_runner.analysis.loader import (
    CONFIG_FIELDS,
    UNVERIFIED_CODES,
    iter_rows,
    legacy_experiment_id,
    results_files,
)
from experiment_runner.core.record_schema import SCHEMA_VERSION, field_schema, field_types
from experiment_runner.core.results import BadLine, ResultsFileError, iter_records, legacy_run_id
from experiment_runner.errors import EXIT_RESULTS_IO, ReportError

if TYPE_CHECKING:
    import pyarrow

# Our figures, read from `measurements`, then from `metrics` (files older than the split).
_FIGURES = ("warmup_time", "compile_time_s", "timed_peak_rss_bytes", "peak_allocated_bytes")
# Every record field the query below reads, as a path into the record schema.
RECORD_PATHS: tuple[str, ...] = (
    "schema_version", "run_id", "experiment_id", "timestamp", "status", "verification_code", "model.suite_name", "model.model_name",
    *(f"experiment.{name}" for name in ("accelerator", *CONFIG_FIELDS, "test", "precision", "batch_size")),
    "metrics.per_iter_time", "metrics.error", *(f"{block}.{name}" for block in ("metrics", "measurements")
                                                for name in _FIGURES),
    "measurements.paired", "measurements.noisy_host",
)
# An object is read as JSON and taken apart in the query (json_extract).
_SQL_TYPES = {"string": "VARCHAR", "number": "DOUBLE", "integer": "BIGINT", "boolean": "BOOLEAN", "object": "JSON"}


def sql_type(path: str) -> str:
    """The DuckDB type of a record field, from its JSON type in the record schema (KeyError when
    the schema does not name the field, so no column can read a field the record does not define)."""
    kinds = [kind for kind in field_types(path) if kind != "null"]
    suffix = ""
    if kinds == ["array"]:
        items = field_schema(path)["items"].get("type", ())
        kinds, suffix = [kind for kind in ([items] if isinstance(items, str) else items) if kind != "null"], "[]"
    if len(kinds) != 1 or kinds[0] not in _SQL_TYPES:
        raise ValueError(f"record field {path!r} has no single SQL type (JSON types {kinds})")
    return _SQL_TYPES[kinds[0]] + suffix


def record_columns(paths: Sequence[str]) -> dict[str, str]:
    """`read_json`'s `columns`: each top-level field read, and for a block, a STRUCT of the fields
    read from it (paths go one level down at most, as the query's do)."""
    nested: dict[str, list[str]] = {}
    for path in paths:
        top, _, rest = path.partition(".")
        nested.setdefault(top, [])
        if rest:
            nested[top].append(f'"{rest}" {sql_type(path)}')
    return {top: f"STRUCT({', '.join(fields)})" if fields else sql_type(top) for top, fields in nested.items()}


_COLUMNS = record_columns(RECORD_PATHS)
# What each column is, in SQL over the record fields above; the rules of loader.flatten.
# DuckDB rejects a field that `columns` does not declare, so every field read here is in RECORD_PATHS.
_SELECT = """
WITH raw AS (
  SELECT filename, schema_version, run_id, experiment_id, timestamp, status, verification_code,
         model.suite_name AS suite, model.model_name AS model,
         experiment.accelerator AS accelerator, experiment.xla AS xla, experiment.xla_flags AS xla_flags,
         experiment.dynamo AS dynamo, experiment.torch_xla2 AS torch_xla2,
         nullif(experiment.compile_options, 'default') AS compile_options, experiment.test AS test,
         experiment."precision" AS "precision", experiment.batch_size AS batch_size,
         list_filter(metrics.per_iter_time, lambda v: isfinite(v)) AS all_samples,
         -- a reference record without warm-up: its first, cold sample is the warm-up
         run_id IS NULL AND coalesce(measurements.warmup_time, metrics.warmup_time) IS NULL AS first_is_warmup,
         metrics.error IS NOT NULL AS metrics_error,
         coalesce(measurements.compile_time_s, metrics.compile_time_s) AS recorded_compile,
         coalesce(measurements.warmup_time, metrics.warmup_time)[1] AS warmup_first,
         coalesce(measurements.peak_allocated_bytes, metrics.peak_allocated_bytes) AS peak_allocated,
         coalesce(measurements.timed_peak_rss_bytes, metrics.timed_peak_rss_bytes) AS peak_rss,
         TRY_CAST(json_extract(measurements.paired, '$.speedup') AS DOUBLE) AS paired_speedup,
         measurements.noisy_host AS noisy
  FROM read_json($files, format='newline_delimited', columns=$columns, filename=true)
), timed AS (
  SELECT *, CASE WHEN first_is_warmup THEN all_samples[2:] ELSE all_samples END AS samples,
         coalesce(warmup_first, CASE WHEN first_is_warmup THEN all_samples[1] END) AS first_warmup
  FROM raw
), med AS (
  -- always from the samples: stored stats are never trusted
  SELECT *, list_median(samples) AS median FROM timed
)
SELECT filename, run_id, experiment_id, timestamp,
       coalesce(status, CASE WHEN len(all_samples) > 0 AND NOT metrics_error THEN 'ok' ELSE 'error' END) AS status,
       verification_code, suite, model, accelerator, xla, xla_flags, dynamo, torch_xla2, compile_options, test,
       "precision",
       batch_size, median,
       CASE WHEN recorded_compile IS NOT NULL AND isfinite(recorded_compile) THEN recorded_compile
            WHEN first_warmup IS NOT NULL AND median IS NOT NULL THEN greatest(first_warmup - median, 0.0)
       END AS compile_time_s,
       -- the timed runs' peak only, as `report` compares it: a lifetime peak (older records) holds the
       -- interpreter and compilation, and a series mixing the two would change at an upgrade
       coalesce(peak_allocated, peak_rss)::DOUBLE AS peak_memory_bytes,
       paired_speedup, coalesce(noisy, false)::DOUBLE AS noisy_host,
       -- a record of a schema this reader does not know: the tolerant reader reads the file, and says so
       coalesce(schema_version <> $version, false) AS misread
FROM med
"""
STRING_FIELDS = ("run_id", "experiment_id", "status", "verification_code", "suite", "model", "accelerator",
                 *CONFIG_FIELDS, "test", "precision")
# noisy_host: 1 where the record says other processes used the CPUs during its timed runs, else 0.
FLOAT_FIELDS = ("timestamp", "median", "compile_time_s", "peak_memory_bytes", "batch_size", "paired_speedup",
                "noisy_host")


@dataclass
class Factor:
    """A string column as codes into its distinct values (-1 where absent): what grouping needs."""

    codes: np.ndarray
    labels: list[str]

    def values(self, rows: np.ndarray) -> list[str | None]:
        return [self.labels[c] if c >= 0 else None for c in self.codes[rows].tolist()]


@dataclass
class Records:
    """One entry per record, in file order. `source` indexes `files`; `index` is the
    record's position among its file's records (what `iter_records` would count)."""

    files: list[Path]
    source: np.ndarray
    index: np.ndarray
    strings: dict[str, Factor]
    numbers: dict[str, np.ndarray]  # NaN where absent
    clean: frozenset[int]  # files DuckDB read whole: every non-blank line of them is one record

    def __len__(self) -> int:
        return len(self.source)

    def passed(self) -> np.ndarray:
        """ok and checked PASS (loader.Row.passed)."""
        return self._ok() & self._code_in(lambda label: label == "PASS", unknown=False)

    def checked(self) -> np.ndarray:
        """Records with an accuracy verdict (loader.Row.checked)."""
        return self._code_in(lambda label: label not in UNVERIFIED_CODES, unknown=False)

    def usable(self) -> np.ndarray:
        """ok with no failing verdict (loader.Row.usable)."""
        return self._ok() & self._code_in(lambda label: label in UNVERIFIED_CODES or label == "PASS", unknown=True)

    def _ok(self) -> np.ndarray:
        status = self.strings["status"]
        return np.array([label == "ok" for label in status.labels] + [False], dtype=bool)[status.codes]

    def _code_in(self, test: Callable[[str | None], bool], unknown: bool) -> np.ndarray:
        """Per record, whether its verification code passes `test`; `unknown` where it has none."""
        code = self.strings["verification_code"]
        return np.array([test(label) for label in code.labels] + [unknown], dtype=bool)[code.codes]


def _schema() -> "pyarrow.Schema":
    import pyarrow as pa

    return pa.schema([("filename", pa.string())] + [(n, pa.string()) for n in STRING_FIELDS]
                     + [(n, pa.float64()) for n in FLOAT_FIELDS])


def _duckdb(files: Sequence[Path]) -> "pyarrow.Table | None":
    """`files` through DuckDB, or None when one of them does not parse cleanly, holds a record of a
    schema_version this reader does not know, or none holds a record (DuckDB reads a file that
    claims size 0, as /proc's do, as empty): the tolerant reader then reads them, and says why."""
    import duckdb
    import pyarrow.compute as pc

    connection = duckdb.connect()
    try:
        relation = connection.sql(_SELECT, params={"files": [str(f) for f in files], "columns": _COLUMNS,
                                                   "version": SCHEMA_VERSION})
        table = relation.to_arrow_table()
        if not len(table) or pc.any(table["misread"]).as_py():
            return None
        schema = _schema()
        return table.select(schema.names).cast(schema)
    except (duckdb.InvalidInputException, duckdb.ConversionException, duckdb.IOException):  # the data, not the query
        return None
    finally:
        connection.close()


def _python(path: Path) -> "pyarrow.Table":
    """One file through loader.iter_rows: tolerant of torn lines, which become warnings naming them."""
    import pyarrow as pa

    bad: dict[Path, list[BadLine]] = {}
    try:
        rows = list(iter_rows([path], bad))
    except ResultsFileError as exc:
        raise ReportError(str(exc), EXIT_RESULTS_IO) from None
    for line in bad.get(path, []):
        print(f"warning: {path}:{line.lineno}: skipped a corrupt or torn line ({line.reason})", file=sys.stderr)
    data: dict[str, list] = {"filename": [str(path)] * len(rows)}
    for name in STRING_FIELDS + ("timestamp", "compile_time_s", "batch_size", "paired_speedup"):
        data[name] = [getattr(row, name) for row in rows]
    data["median"] = [row.median_per_iter_time_s for row in rows]
    data["peak_memory_bytes"] = [row.peak_allocated_bytes or row.timed_peak_rss_bytes for row in rows]
    data["noisy_host"] = [float(row.noisy_host) for row in rows]
    return pa.Table.from_pydict(data, schema=_schema())


def read_records(paths: Sequence[Path]) -> Records:
    """Every record of every results file under `paths`; a file DuckDB rejects goes through the tolerant reader."""
    import pyarrow as pa

    files = results_files(paths)
    table = _duckdb(files)
    clean = frozenset(range(len(files)))
    if table is None:
        parts = [_duckdb([f]) for f in files]
        clean = frozenset(i for i, part in enumerate(parts) if part is not None)
        table = pa.concat_tables([part if part is not None else _python(f) for part, f in zip(parts, files)])
    position = {str(f): i for i, f in enumerate(files)}
    names = table["filename"].combine_chunks().dictionary_encode()
    lookup = np.array([position[name] for name in names.dictionary.to_pylist()] or [0], dtype=np.int64)
    source = lookup[names.indices.to_numpy(zero_copy_only=False)] if len(table) else np.zeros(0, dtype=np.int64)
    index = np.zeros(len(source), dtype=np.int64)
    if len(source):
        starts = np.r_[0, np.flatnonzero(np.diff(source)) + 1]
        index = np.arange(len(source)) - np.repeat(starts, np.diff(np.r_[starts, len(source)]))
    strings = {name: _factor(table[name]) for name in STRING_FIELDS}
    numbers = {name: table[name].to_numpy() for name in FLOAT_FIELDS}
    records = Records(files, source, index, strings, numbers, clean)
    _fill_legacy(records)
    return records


def read_back(records: Records, wanted: dict[int, set[int]]) -> dict[tuple[int, int], dict]:
    """Whole records by (file index, record index), e.g. the few behind a change. In a clean file
    only the wanted lines are parsed; others go through the tolerant reader, which counts as it did."""
    import json

    found: dict[tuple[int, int], dict] = {}
    for f, indices in wanted.items():
        try:
            if f in records.clean:
                with open(records.files[f], "rb") as handle:
                    lines = (line for line in handle if line.strip())
                    found.update({(f, i): json.loads(line) for i, line in enumerate(lines) if i in indices})
            else:
                found.update({(f, i): record for i, record in enumerate(iter_records(records.files[f], bad_lines=[]))
                              if i in indices})
        except (OSError, ValueError) as exc:
            raise ReportError(f"cannot read back {records.files[f]}: {exc}", EXIT_RESULTS_IO) from None
    return found


def _factor(column: "pyarrow.ChunkedArray") -> Factor:
    encoded = column.combine_chunks().dictionary_encode()
    codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    return Factor(codes, encoded.dictionary.to_pylist())


def _fill_legacy(records: Records) -> None:
    """Records of the reference runner: run ids from file and timestamp, experiment ids from their fields."""
    runs, experiments = records.strings["run_id"], records.strings["experiment_id"]
    missing = np.flatnonzero((runs.codes < 0) | (experiments.codes < 0))
    if not len(missing):
        return
    run_labels = {label: i for i, label in enumerate(runs.labels)}
    exp_labels = {label: i for i, label in enumerate(experiments.labels)}
    stamps = records.numbers["timestamp"]
    for i in missing.tolist():
        if runs.codes[i] < 0:
            stamp = None if np.isnan(stamps[i]) else float(stamps[i])
            label = legacy_run_id(records.files[records.source[i]].name, stamp)
            runs.codes[i] = run_labels.setdefault(label, len(run_labels))
        if experiments.codes[i] < 0:
            value = {name: records.strings[name].values(np.array([i]))[0]
                     for name in ("suite", "model", "accelerator", *CONFIG_FIELDS, "test", "precision")}
            label = legacy_experiment_id(value.pop("suite"), value.pop("model"), value)
            experiments.codes[i] = exp_labels.setdefault(label, len(exp_labels))
    runs.labels = list(run_labels)
    experiments.labels = list(exp_labels)
