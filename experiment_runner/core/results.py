"""The results store: record schema, whole-line appends under a lock, tolerant reads, resume.

The parent is the only writer. Each record is one JSON line written with a single
`os.write` under an advisory `flock`, then fsync'd, so concurrent runners never
interleave and a crash leaves at most one torn last line, which readers skip.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import secrets
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

SCHEMA_VERSION = 1

STATUSES = ("ok", "error", "oom", "timeout", "crashed", "skipped", "interrupted")
# A record with one of these statuses ends its experiment for `--resume`; an interrupted
# experiment is run again.
FINAL_STATUSES = frozenset(STATUSES) - {"interrupted"}

VERIFICATION_CODES = (
    "PASS", "FAIL", "EAGER_FAILED", "EXCEPTION_RAISED",
    "NONDETERMINISTIC_EAGER_RUN", "VERIFIER_SKIPPED", "VERIFIER_DIDNT_RUN",
)


class ResultsFileError(OSError):
    """The results file cannot be read or written; the message says which and why."""


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)


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


def append_record(path: Path, record: dict) -> None:
    """Append one record as one whole line: lock, single write, flush, fsync, unlock."""
    line = encode(record)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ResultsFileError(f"cannot open results file {path} for appending: {exc.strerror or exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            size = os.fstat(fd).st_size
            if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line  # a torn last line stays alone on its line
            try:
                written = os.write(fd, line)
                if written != len(line):
                    raise ResultsFileError(f"short write to {path}: {written} of {len(line)} bytes")
                os.fsync(fd)
            except OSError:
                os.ftruncate(fd, size)  # leave no partial line behind a failed write
                raise
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    except OSError as exc:
        if isinstance(exc, ResultsFileError):
            raise
        raise ResultsFileError(f"cannot write results file {path}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


@dataclass(frozen=True)
class BadLine:
    lineno: int
    reason: str


def iter_records(path: Path, bad_lines: list[BadLine] | None = None) -> Iterator[dict]:
    """Yield the records of a results file, streaming; corrupt or torn lines are skipped.

    Skipped lines go to `bad_lines` when given, else each becomes a warning naming its
    line number.
    """
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise ResultsFileError(f"cannot read results file {path}: {exc.strerror or exc}") from exc
    with handle:
        for lineno, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
                if not isinstance(record, dict):
                    raise ValueError("not a JSON object")
            except (ValueError, UnicodeDecodeError) as exc:
                bad = BadLine(lineno, f"{type(exc).__name__}: {exc}"[:200])
                if bad_lines is not None:
                    bad_lines.append(bad)
                else:
                    warnings.warn(f"{path}:{lineno}: skipped a corrupt or torn line ({bad.reason})", stacklevel=2)
                continue
            yield record


def latest_run_id(records: Iterable[dict]) -> str | None:
    """The run of the last record in file order (the run `--resume` continues)."""
    run_id = None
    for record in records:
        run_id = record.get("run_id", run_id)
    return run_id


def finished_experiments(path: Path, run_id: str, retry_failed: bool = False) -> set[str]:
    """experiment_ids that already have a final record in `run_id`.

    With retry_failed, only `ok` and `skipped` count as finished, so failures run again.
    """
    done_statuses = {"ok", "skipped"} if retry_failed else FINAL_STATUSES
    done: set[str] = set()
    for record in iter_records(path, bad_lines=[]):
        if record.get("run_id") == run_id and record.get("status") in done_statuses:
            done.add(record.get("experiment_id"))
    return done


def final_records(records: Iterable[dict]) -> dict[tuple[str, str], dict]:
    """The last record per (run_id, experiment_id): a retried experiment supersedes its failure."""
    latest: dict[tuple[str, str], dict] = {}
    for record in records:
        latest[(record.get("run_id", ""), record.get("experiment_id", ""))] = record
    return latest
