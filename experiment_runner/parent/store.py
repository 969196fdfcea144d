"""The results file, writer side: whole-line appends under a lock, run ids, and what
a resumed run (the default) finds already done.

The parent is the only writer. Each record is one JSON line written with a single
`os.write` under an advisory `flock`, then fsync'd, so concurrent runners never
interleave and a crash leaves at most one torn last line, which readers skip.

One runner per results file: `lock_results` holds an exclusive lock keyed by the file's real
location (symlinks resolved) for the whole run, so a second runner on the same file, whatever
path leads to it, stops (or waits) instead of running experiments a second time.

A run exists from its start: `register_run` writes `runs/<run_id>/run.json` (what it plans, as
a fingerprint, and its command line) before any experiment starts, and `resume_state` counts
registered runs too, so a run killed before its first record is continued, not started anew.
A rerun continues its own command's run: runs with another fingerprint are not resumed. Each
record carries its command's fingerprint too, and the records' word comes first: a registry
deleted, damaged or left behind (a results file copied alone) never hands a run to another command.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import re
import secrets
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from experiment_runner.core.results import (
    FINAL_STATUSES,
    LOCK_SUFFIX,
    BadLine,
    ResultsFileError,
    encode,
    iter_records,
    process_index,
)
from experiment_runner.errors import UsageError


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)


# How long a record waits for a results file that another program (not a runner: those take
# lock_results first) holds flock'd, a backup or a reader of its own; then exit 3, one line.
APPEND_LOCK_WAIT_S = 300.0


def append_record(path: Path, record: dict, stopping: Callable[[], bool] = lambda: False,
                  warn: Callable[[str], None] = lambda line: None) -> None:
    """Append one record as one whole line: lock, single write, flush, fsync, unlock.

    The lock is taken by polling, so a foreign holder is said at once (`warn`), waited for at
    most APPEND_LOCK_WAIT_S, and given up on as soon as the run is stopping (SIGTERM), never
    blocking the runner in a system call that signals cannot end."""
    line = encode(record)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ResultsFileError(f"cannot open results file {path} for appending: {exc.strerror or exc}") from exc
    try:
        _flock_polling(fd, path, stopping, warn)
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


def _flock_polling(fd: int, path: Path, stopping: Callable[[], bool], warn: Callable[[str], None]) -> None:
    deadline = time.monotonic() + APPEND_LOCK_WAIT_S
    warned = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            holder = flock_holder(fd)
            if stopping():
                raise ResultsFileError(f"the run was stopped while {path} was locked by {holder}") from None
            if time.monotonic() >= deadline:
                raise ResultsFileError(f"{path} stayed locked by {holder} for {APPEND_LOCK_WAIT_S:g} s") from None
            if not warned:
                warn(f"{path} is locked by {holder}; waiting up to {APPEND_LOCK_WAIT_S:g} s to write the next "
                     "record")
                warned = True
            time.sleep(LOCK_POLL_S)


def flock_holder(fd: int) -> str:
    """The process holding a flock on fd's file, from /proc/locks: "pid N (command)"."""
    inode = os.fstat(fd).st_ino
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        fields = line.split()
        if "->" in fields or len(fields) < 6 or fields[1] != "FLOCK":
            continue
        if fields[5].rsplit(":", 1)[-1] == str(inode) and fields[4].isdigit() and int(fields[4]) != os.getpid():
            try:
                command = Path(f"/proc/{fields[4]}/cmdline").read_bytes().replace(b"\0", b" ").decode(
                    "utf-8", "replace").strip()
            except OSError:
                command = ""
            return f"pid {fields[4]}" + (f" ({command[:80]})" if command else "")
    return "another process"


class RunLocked(UsageError):
    """Another runner holds the results file; the message names it."""


# How often a runner asked to --wait-for-lock tries the lock again.
LOCK_POLL_S = 0.2


def lock_results(results_path: Path, wait_s: float = 0.0) -> int:
    """Take the exclusive lock of the results file's real location (held until this process
    exits or closes the returned fd). Anything but a regular file is refused before any
    experiment runs: a FIFO would block, a device (/dev/null, /dev/full) fails or loses records.

    The lock is a file beside the real results file (`results.jsonl.lock`) that says who holds
    it (pid and host), for the message a second runner prints. OSError when it cannot be
    written; RunLocked when another runner still holds it after `wait_s` seconds.
    """
    real = Path(os.path.realpath(results_path))
    if real.is_dir():
        raise ResultsFileError(f"cannot read results file {results_path}: Is a directory")
    if real.exists() and not real.is_file():
        if not (real.is_char_device() or real.is_block_device()):
            raise UsageError(f"the results file {results_path} is not a regular file (a FIFO or a socket); "
                             "a runner would block on it or fail at its first record")
        raise ResultsFileError(f"cannot write results file {results_path}: {real} is a device, not a regular file "
                               "(its records would fail or be lost); give a file")
    real.parent.mkdir(parents=True, exist_ok=True)
    path = real.with_name(real.name + LOCK_SUFFIX)
    try:
        fd = take_lock(path, wait_s, 0o644)
    except LockHeld as held:
        raise RunLocked(f"{results_path} is being written by {held.holder}{held.waited} (lock {path}); wait for "
                        "it (--wait-for-lock=SECONDS), or write to another file (--output-basename)") from None
    try:
        _refuse_what_is_not_a_lock(fd, path, results_path)
        write_holder(fd)
    except OSError as exc:
        os.close(fd)
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    return fd


class LockHeld(Exception):
    """Another process still held a lock after the wait; who, as its lock file says."""

    def __init__(self, holder: str, wait_s: float) -> None:
        super().__init__(holder)
        self.holder = holder
        self.waited = f" after waiting {wait_s:g} s" if wait_s else ""


def take_lock(path: Path, wait_s: float, mode: int) -> int:
    """Open (creating with `mode`) and exclusively flock `path`, trying again every LOCK_POLL_S for
    up to `wait_s` seconds; the fd holds it until closed or this process exits. LockHeld when
    another process still holds it then."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, mode)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() < deadline:
                time.sleep(LOCK_POLL_S)
                continue
            holder = _holder(fd)
            os.close(fd)
            raise LockHeld(holder, wait_s) from None
        except OSError:
            os.close(fd)
            raise


def write_holder(fd: int, what: str = "") -> None:
    """Say in the held lock file who holds it (pid and host, then `what`), for the line a second
    process prints."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on host {socket.gethostname()}{what}\n".encode(), 0)


# What a runner writes into the lock file it holds; anything else there is not ours to truncate.
_LOCK_LINE = re.compile(rb"pid \d+ on host [^\n]*\n?")


def _refuse_what_is_not_a_lock(fd: int, path: Path, results_path: Path) -> None:
    """The lock file is truncated for its holder's line: refuse one holding anything else
    (records written under that name by a runner that did not refuse it), keeping it as it is."""
    size = os.fstat(fd).st_size
    if size and (size > 4096 or not _LOCK_LINE.fullmatch(os.pread(fd, size, 0))):
        os.close(fd)
        raise UsageError(f"{path}, the lock of {results_path}, holds {size} bytes that are not a runner's lock "
                         "(a results file written under that name?); it was left as it is: move it aside, or "
                         "write to another file (--output-basename)")


def _holder(fd: int) -> str:
    """Who holds the lock, as its file says; the holder writes it just after taking the lock,
    so give it a moment to."""
    holder, deadline = "", time.monotonic() + 2.0
    while not holder and time.monotonic() < deadline:
        holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip()
        time.sleep(0 if holder else 0.02)
    return holder or "an unknown process"


@dataclass(frozen=True)
class RunEntry:
    """A run as registered in its folder when it starts (runs/<run_id>/run.json)."""

    run_id: str
    fingerprint: str
    timestamp: float
    results: str  # the real path of the results file it appends to
    command: list[str]
    last_started: float  # when a runner last started (or resumed) it
    # The RunOptions (how each experiment is measured) of the command that last started it, so a
    # rerun that measures otherwise can be told what differs; None in entries written before.
    options: dict[str, Any] | None = None


def register_run(output_dir: Path, entry: RunEntry) -> None:
    """Write the run's entry before any of its experiments starts (atomically)."""
    folder = output_dir / "runs" / entry.run_id
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / "run.json.tmp"
    try:
        tmp.write_text(json.dumps(dataclasses.asdict(entry)))
    except OSError as exc:  # a failed write() names no file: say which one, not the results file
        raise OSError(exc.errno, exc.strerror, str(tmp)) from None
    os.replace(tmp, folder / "run.json")


def registered_runs(output_dir: Path, results_path: Path) -> tuple[dict[str, RunEntry], list[tuple[Path, str]]]:
    """The runs registered in this output folder for this results file (by its real path), and
    the entries that cannot be read as one (truncated, corrupt, unreadable), with why."""
    real, found, damaged = os.path.realpath(results_path), {}, []
    for path in sorted((output_dir / "runs").glob("*/run.json")) if (output_dir / "runs").is_dir() else []:
        try:
            entry = RunEntry(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError) as exc:
            damaged.append((path, getattr(exc, "strerror", None) or type(exc).__name__))
            continue
        if entry.results == real:
            found[entry.run_id] = entry
    return found, damaged


@dataclass
class _RunSeen:
    timestamp: float | None
    latest: dict[tuple[str, int], str]  # (experiment_id, process index) -> status of its last record
    fingerprint: str | None = None  # its records' (RunConfig.fingerprint); None where none carries a valid one

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
        if isinstance(record.get("fingerprint"), str) and record["fingerprint"]:
            seen.fingerprint = record["fingerprint"]
    return runs


@dataclass(frozen=True)
class ResumeState:
    run_id: str | None
    done: set[tuple[str, int]]  # (experiment_id, process index)
    failed: set[str]  # experiments with a failed process: their later processes are not run
    bad_lines: list[BadLine]
    timestamp: float | None = None
    # runs with records in the file left alone: another command's, or no command's known (a run
    # registered without a record holds nothing to leave alone, and is not counted)
    other_runs: int = 0
    failed_final: int = 0  # experiments of the run whose final record is a failure


def resume_state(results_path: Path, retry_failed: bool, timestamp: float | None = None,
                 fingerprint: str | None = None, registered: dict[str, RunEntry] | None = None) -> ResumeState:
    """The run a resumed invocation continues and its finished experiments.

    Candidates are the file's runs and the runs registered for it (`registered`: a run killed
    before its first record is one too) that are this command's: their records carry its
    `fingerprint`, or, where none carries a valid one (a non-empty string), their registry entry
    does. A run that says neither (records without a valid fingerprint, its entry deleted or
    lost) is continued by no command: nothing can tell whose it is, and continuing another
    command's run mixes two plans in one run. `fingerprint` None (no command) takes any run.
    Of those, the one stamped `timestamp` when given (a nightly job passes one per night, so a
    rerun after a crash continues that night and a new night starts a new run), else the
    latest: unregistered runs in the order of their last record, then registered ones in the
    order they last started. Corrupt lines are skipped (and reported by the caller); a
    non-empty file without a single valid record is not a results file, and appending to it
    would be wrong.
    """
    registered = registered or {}
    runs: dict[str, _RunSeen] = {}
    bad: list[BadLine] = []
    in_file: set[str] = set()
    if results_path.is_file():  # a device or a pipe (/dev/null, /dev/full) holds no run; reading it never ends
        runs = _runs_in(results_path, bad)
        in_file = set(runs)
        if not runs and bad:
            raise ResultsFileError(f"{results_path} is not a results file: none of its lines is a JSON record "
                                   f"(line {bad[0].lineno}: {bad[0].reason}); nothing was written to it")
    for run_id, entry in registered.items():
        runs.setdefault(run_id, _RunSeen(entry.timestamp, {}))
    ordered = sorted(runs, key=lambda run_id: (run_id in registered,
                                               registered[run_id].last_started if run_id in registered else 0.0))
    def owner(run_id: str) -> str | None:
        entry = registered.get(run_id)
        return runs[run_id].fingerprint or (entry.fingerprint if entry is not None else None)

    mine = [run_id for run_id in ordered if fingerprint is None or owner(run_id) == fingerprint]
    candidates = [run_id for run_id in mine if timestamp is None or runs[run_id].timestamp == timestamp]
    others = len(in_file - set(mine))
    if not candidates:
        return ResumeState(None, set(), set(), bad, other_runs=others)
    run_id = candidates[-1]
    done, failed = runs[run_id].finished(retry_failed)
    failed_final = len({eid for (eid, _), status in runs[run_id].latest.items()
                        if status in FINAL_STATUSES and status not in ("ok", "skipped")})
    return ResumeState(run_id, done, failed, bad, runs[run_id].timestamp, others, failed_final)
