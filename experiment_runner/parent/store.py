"""The results file, writer side: whole-line appends under a lock, run ids, and what
`--resume` finds already done.

The parent is the only writer. Each record is one JSON line written with a single
`os.write` under an advisory `flock`, then fsync'd, so concurrent runners never
interleave and a crash leaves at most one torn last line, which readers skip.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from experiment_runner.core.results import (
    FINAL_STATUSES,
    BadLine,
    ResultsFileError,
    encode,
    iter_records,
)


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)


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


@dataclass(frozen=True)
class ResumeState:
    run_id: str | None
    done: set[str]
    bad_lines: list[BadLine]


def resume_state(results_path: Path, retry_failed: bool) -> ResumeState:
    """The run `--resume` continues and its finished experiments.

    Corrupt lines are skipped (and reported by the caller); a non-empty file without a
    single valid record is not a results file, and appending to it would be wrong.
    """
    if not results_path.exists():
        return ResumeState(None, set(), [])
    bad: list[BadLine] = []
    run_id = latest_run_id(iter_records(results_path, bad_lines=bad))
    if run_id is None:
        if bad:
            raise ResultsFileError(f"{results_path} is not a results file: none of its lines is a JSON record "
                                   f"(line {bad[0].lineno}: {bad[0].reason}); nothing was written to it")
        return ResumeState(None, set(), [])
    return ResumeState(run_id, finished_experiments(results_path, run_id, retry_failed), bad)
