"""The results file, shared side: statuses, verification codes, JSON encoding, tolerant reads.

What a record holds, and its version, is the schema's (`record_schema.py`).

Writing (whole-line appends under a lock) is the parent's (`parent/store.py`); reading is
everyone's: the parent resumes from it, `analysis` reports on it.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import warnings
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Mapping

from experiment_runner.core.record_schema import SCHEMA_VERSION, field_types, record_schema

STATUSES = ("ok", "error", "oom", "timeout", "crashed", "skipped", "interrupted")
# A record with one of these statuses ends its experiment for `--resume`; an interrupted
# experiment is run again.
FINAL_STATUSES = frozenset(STATUSES) - {"interrupted"}
# The lock a runner holds on a results file is this file beside it (`results.jsonl.lock`).
LOCK_SUFFIX = ".lock"

VERIFICATION_CODES = (
    "PASS", "FAIL", "EAGER_FAILED", "EXCEPTION_RAISED",
    "NONDETERMINISTIC_EAGER_RUN", "VERIFIER_SKIPPED", "VERIFIER_DIDNT_RUN",
)


def verification_code(verify: bool, status: str, verification: Mapping[str, Any] | None) -> str:
    """A record's `verification_code`; the child (its result) and the record builder both ask here.

    The verifier's own code when it returned a `verification` block; VERIFIER_SKIPPED when
    nothing was to be verified (no --verify, or a skipped experiment); otherwise
    VERIFIER_DIDNT_RUN: the experiment failed before verification, or its child died (or,
    in an interim result, has not yet finished) verifying.
    """
    if verification is not None:
        code = verification["code"]
    elif not verify or status == "skipped":
        code = "VERIFIER_SKIPPED"
    else:
        code = "VERIFIER_DIDNT_RUN"
    if code not in VERIFICATION_CODES:
        raise ValueError(f"unknown verification code {code!r}")
    return code


class ResultsFileError(OSError):
    """The results file cannot be read or written; the message says which and why."""


class RecordWarning(UserWarning):
    """Records were read that this reader may misread (a newer schema_version, a field of the
    wrong type); the CLI prints it as one line."""


# A top-level field's JSON type, as Python sees it after json.loads.
_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool), "null": lambda v: v is None,
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list),
}


def record_problem(record: dict) -> str | None:
    """Why a parsed record may be misread, or None: a schema_version this reader does not know,
    or a top-level field whose JSON type the schema does not allow. Records without a
    schema_version are the reference runner's and are not held to our schema."""
    if "schema_version" not in record:
        return None
    version = record["schema_version"]
    if version != SCHEMA_VERSION or isinstance(version, bool):
        return f"schema_version {version!r}, this reader knows {SCHEMA_VERSION}"
    allowed = _top_level_types()
    for name, value in record.items():
        kinds = allowed.get(name, ())
        if kinds and not any(_JSON_TYPES[kind](value) for kind in kinds if kind in _JSON_TYPES):
            return f"{name} is {type(value).__name__} {str(value)[:40]!r}, the schema says {' or '.join(kinds)}"
    return None


@cache
def _top_level_types() -> dict[str, tuple[str, ...]]:
    return {name: field_types(name) for name in record_schema()["properties"]}


def jsonable(value: Any) -> Any:
    """Make a value strict-JSON safe: NaN and infinities become null (jq rejects them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


def encode(record: dict) -> bytes:
    return (json.dumps(jsonable(record), allow_nan=False, separators=(", ", ": ")) + "\n").encode()


@dataclass(frozen=True)
class BadLine:
    lineno: int
    reason: str


# A line longer than this is no record of this runner's (the largest, with per-op profiles, are
# well under a MiB): it is skipped as a bad line, streaming, so /dev/zero-like input cannot
# exhaust memory.
MAX_LINE_BYTES = 64 * 2**20


def open_results(path: Path) -> BinaryIO:
    """Open a results file for reading: a regular file only (a FIFO would block the reader, a
    device like /dev/zero never ends)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise ResultsFileError(f"cannot read results file {path}: {exc.strerror or exc}") from exc
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        why = os.strerror(errno.EISDIR) if stat.S_ISDIR(mode) else "not a regular file (a FIFO, a socket or a device)"
        raise ResultsFileError(f"cannot read results file {path}: {why}")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _read_line(handle: BinaryIO, path: Path, limit: int) -> bytes:
    """One line; a read that fails (EIO from a failing disk) is the file's error, one line for the user."""
    try:
        return handle.readline(limit)
    except OSError as exc:
        raise ResultsFileError(f"cannot read results file {path}: {exc.strerror or exc}") from exc


def iter_records(path: Path, bad_lines: list[BadLine] | None = None) -> Iterator[dict]:
    """Yield the records of a results file, streaming; corrupt, torn, overlong or too deeply
    nested lines are skipped.

    Skipped lines go to `bad_lines` when given, else each becomes a warning naming its
    line number. Records read that may be misread (`record_problem`) are yielded, and said once
    per file as a RecordWarning when the file has been read to its end.
    """
    return (record for _, record in iter_numbered_records(path, bad_lines))


def iter_numbered_records(path: Path, bad_lines: list[BadLine] | None = None) -> Iterator[tuple[int, dict]]:
    """iter_records with each record's line number, for readers that check more than JSON (the
    minification sidecar) and must name the line they pass over."""
    def skip(lineno: int, reason: str) -> None:
        bad = BadLine(lineno, reason[:200])
        if bad_lines is not None:
            bad_lines.append(bad)
        else:
            warnings.warn(f"{path}:{lineno}: skipped a corrupt or torn line ({bad.reason})", stacklevel=3)

    odd: list[BadLine] = []
    with open_results(path) as handle:
        lineno = 0
        while raw := _read_line(handle, path, MAX_LINE_BYTES + 1):
            lineno += 1
            if len(raw) > MAX_LINE_BYTES:
                while (rest := _read_line(handle, path, MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                    pass
                skip(lineno, f"a line longer than {MAX_LINE_BYTES} bytes")
                continue
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
                if not isinstance(record, dict):
                    raise ValueError("not a JSON object")
            except (ValueError, UnicodeDecodeError) as exc:
                skip(lineno, f"{type(exc).__name__}: {exc}")
                continue
            except RecursionError:
                skip(lineno, "JSON nested too deeply")
                continue
            if (problem := record_problem(record)) is not None:
                odd.append(BadLine(lineno, problem))
            yield lineno, record
    if odd:
        warnings.warn(f"{path}: read {len(odd)} record(s) this reader may misread (line {odd[0].lineno}: "
                      f"{odd[0].reason})", RecordWarning, stacklevel=2)


def legacy_run_id(file_name: str, timestamp: Any) -> str:
    """The run of a record without run_id (the reference runner's): its file and timestamp.

    The reference runner gives every record of one invocation the same `--timestamp`
    (nightly.sh passes one per night), so one timestamp is one run. Every reader that
    groups records into runs (report, compare, history) calls this one function.
    """
    if isinstance(timestamp, bool) or not isinstance(timestamp, (int, float)) or not math.isfinite(timestamp):
        return f"legacy:{file_name}"
    return f"legacy:{file_name}@{timestamp:.6f}".rstrip("0").rstrip(".")


def process_index(record: dict) -> int:
    """Which of the experiment's `--processes` this record measured (0 for older records)."""
    process = record.get("process")
    index = process.get("index") if isinstance(process, dict) else None
    return index if isinstance(index, int) and not isinstance(index, bool) and index >= 0 else 0


def final_records(records: Iterable[dict]) -> dict[tuple[str, str, int], dict]:
    """The last record per (run_id, experiment_id, process index): a retry supersedes its failure."""
    latest: dict[tuple[str, str, int], dict] = {}
    for record in records:
        latest[(record.get("run_id", ""), record.get("experiment_id", ""), process_index(record))] = record
    return latest
