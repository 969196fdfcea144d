"""The results file, writer side: whole-line appends under a lock, run ids, and what
a resumed run (the default) finds already done.

The parent is the only writer. Each record is one JSON line written with a single
`os.write` under an advisory `flock`, then fsync'd, so concurrent runners never
interleave and a crash leaves at most one torn last line, which readers skip.

One runner per run: `lock_run` holds an exclusive lock on the run's folder for the whole
run, so a second runner resuming the same run stops instead of running every remaining
experiment a second time.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from experiment_runner.core.results import (
    FINAL_STATUSES,
    BadLine,
    ResultsFileError,
    encode,
    iter_records,
    process_index,
)
from experiment_runner.errors import UsageError


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
                if stat.S_ISREG(os.fstat(fd).st_mode):
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


class RunLocked(UsageError):
    """Another runner holds the run; the message names it."""


def lock_run(run_dir: Path) -> int:
    """Take the run's exclusive lock (held until this process exits or closes the returned fd).

    The lock file says who holds it (pid and host), for the message a second runner prints.
    OSError when the folder cannot be written; RunLocked when another runner holds it.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "runner.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        # The holder writes who it is just after taking the lock: give it a moment to.
        holder, deadline = "", time.monotonic() + 2.0
        while not holder and time.monotonic() < deadline:
            holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip()
            time.sleep(0 if holder else 0.02)
        holder = holder or "an unknown process"
        os.close(fd)
        raise RunLocked(f"run {run_dir.name} is being run by {holder} (lock {path}); "
                        "wait for it to finish, or start a new run with --no-resume") from None
    except OSError:
        os.close(fd)
        raise
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on host {socket.gethostname()}\n".encode(), 0)
    except OSError as exc:
        os.close(fd)
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    return fd


@dataclass
class _RunSeen:
    timestamp: float | None
    latest: dict[tuple[str, int], str]  # (experiment_id, process index) -> status of its last record

    def finished(self, retry_failed: bool) -> tuple[set[tuple[str, int]], set[str]]:
        """The (experiment_id, process index) pairs with a final record, and the experiments
        among them that failed (their later processes are not run).

        With retry_failed, only `ok` and `skipped` count as finished, so failures run again.
        """
        done_statuses = {"ok", "skipped"} if retry_failed else FINAL_STATUSES
        done = {key for key, status in self.latest.items() if status in done_statuses}
        failed = {eid for (eid, index), status in self.latest.items()
                  if (eid, index) in done and status not in ("ok", "skipped")}
        return done, failed


def _runs_in(path: Path, bad: list[BadLine]) -> dict[str, _RunSeen]:
    """Every run of the file in order of appearance: its timestamp and the status of the last
    record of each of its experiments' processes.

    Records without a run_id (the reference runner's) belong to no run that can be resumed.
    """
    runs: dict[str, _RunSeen] = {}
    for record in iter_records(path, bad_lines=bad):
        run_id = record.get("run_id")
        if not isinstance(run_id, str):
            continue
        stamp = record.get("timestamp")
        seen = runs.setdefault(run_id, _RunSeen(stamp if isinstance(stamp, (int, float)) else None, {}))
        runs[run_id] = runs.pop(run_id)  # keep the order of each run's latest record: the last is the latest
        seen.latest[(record.get("experiment_id"), process_index(record))] = record.get("status")
    return runs


@dataclass(frozen=True)
class ResumeState:
    run_id: str | None
    done: set[tuple[str, int]]  # (experiment_id, process index)
    failed: set[str]  # experiments with a failed process: their later processes are not run
    bad_lines: list[BadLine]
    timestamp: float | None = None


def resume_state(results_path: Path, retry_failed: bool, timestamp: float | None = None) -> ResumeState:
    """The run a resumed invocation continues and its finished experiments.

    That run is the one stamped `timestamp` when given (a nightly job passes one per
    night, so a rerun after a crash continues that night and a new night starts a new
    run), else the run of the file's last record. Corrupt lines are skipped (and
    reported by the caller); a non-empty file without a single valid record is not a
    results file, and appending to it would be wrong.
    """
    if not results_path.exists():
        return ResumeState(None, set(), set(), [])
    if not results_path.is_file() and not results_path.is_dir():
        # A device or a pipe (/dev/null to discard records; /dev/full, which reads as an endless
        # line of zeros) holds no run to resume; reading it would never end.
        return ResumeState(None, set(), set(), [])
    bad: list[BadLine] = []
    runs = _runs_in(results_path, bad)
    if not runs and bad:
        raise ResultsFileError(f"{results_path} is not a results file: none of its lines is a JSON record "
                               f"(line {bad[0].lineno}: {bad[0].reason}); nothing was written to it")
    candidates = [run_id for run_id, seen in runs.items() if timestamp is None or seen.timestamp == timestamp]
    if not candidates:
        return ResumeState(None, set(), set(), bad)
    run_id = candidates[-1]
    return ResumeState(run_id, *runs[run_id].finished(retry_failed), bad, runs[run_id].timestamp)
