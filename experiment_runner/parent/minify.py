"""Minify red experiments: after a run (--minify), or for an earlier run's records (`minify`).

Each minification is a child of its own (`python -m experiment_runner.child.minify`) in a
new session, so a process group of its own, with the experiment's environment but its own
inductor cache and temporary folder (the experiment's were removed with its scratch, and a
cache hit would skip the check the minifier needs), and a time budget: past all but
CHECK_SHARE of it, the group and every descendant carrying its attempt token are killed, as an
experiment is at its timeout, and the last checkpoint it left is checked (`--check`) in the rest.
Nothing here touches the experiment's record: the answer is a line of the sidecar
(core/minify.py explains why). A minification writes and removes only inside the output folder,
never through a symbolic link, holds its experiment's lock while it runs, and never removes a
repro that reproduced.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import json
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from experiment_runner.core.flags import declared
from experiment_runner.core.minify import (
    CHECK_RESULT_FILE,
    CHECK_SHARE,
    FOLDER,
    JOB_FILE,
    LOCK_FILE,
    LOG_FILE,
    REPRO_FILE,
    RESULT_FILE,
    WORK_FOLDER,
    minified_block,
    plan,
    repro_environment,
    sidecar_line,
    sidecar_path,
)
from experiment_runner.core.process_groups import kill_experiment
from experiment_runner.core.protocol import Task, read_result
from experiment_runner.core.results import ResultsFileError, final_records, iter_numbered_records
from experiment_runner.core.run_config import SessionConfig
from experiment_runner.errors import (
    EXIT_OK,
    EXIT_RESULTS_IO,
    EXIT_USAGE,
    ResultsIOError,
    Stopped,
    UsageError,
    stop,
)
from experiment_runner.parent.launch.env import child_environment, make_scratch, remove_leftovers
from experiment_runner.parent.launch.reaper import start_reaper, stop_reaper
from experiment_runner.parent.launch.subprocess_launcher import _parent_death_signal
from experiment_runner.parent.store import flock_holder

# The signals that stop a minification as Ctrl-C does.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Refused(Exception):
    """A minification not started; the message is the one line that says why."""


def experiment_folder(record: dict[str, Any], output_dir: Path) -> Path:
    """The record's experiment folder, where its minification may write and delete: inside
    `output_dir` (a relative artifacts.dir, no `..`), and reached through no symbolic link down
    to its minify folder, so nothing outside the output folder is ever written or removed."""
    artifacts = record.get("artifacts")
    given = artifacts.get("dir") if isinstance(artifacts, dict) else None
    if not isinstance(given, str) or not given or "\0" in given or Path(given).is_absolute() \
            or ".." in Path(given).parts:
        raise Refused(f"{record['experiment_id']}: its artifacts.dir {given!r} is no folder inside the output folder "
                      f"{output_dir}; not minified")
    folder = output_dir
    for part in (*Path(given).parts, FOLDER):
        folder = folder / part
        if folder.is_symlink():
            raise Refused(f"{record['experiment_id']}: {folder} is a symbolic link; minification writes only inside "
                          f"the output folder {output_dir}, never through a link: not minified")
    return output_dir / given


@contextmanager
def experiment_lock(record: dict[str, Any], folder: Path) -> Iterator[None]:
    """Hold the experiment's minification lock (LOCK_FILE in its folder): two minifications of
    one experiment would remove each other's files and leave two answers. Refused, naming the
    holder, while another holds it; a folder that is missing has nothing to guard."""
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except FileNotFoundError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Refused(f"{record['experiment_id']}: another minification of it is under way "
                          f"({flock_holder(fd)}); not started") from None
        yield
    finally:
        os.close(fd)


def reproducing(folder: Path) -> bool:
    """Whether `folder` holds a repro.py that reproduced: the minifier's own check, or the check
    of a killed minification's last checkpoint."""
    finished = read_result(folder / RESULT_FILE) or {}
    checked = read_result(folder / CHECK_RESULT_FILE) or {}
    return (folder / REPRO_FILE).is_file() and (finished.get("status") == "reproduced"
                                               or checked.get("reproduces") is True)


def minify_record(record: dict[str, Any], output_dir: Path, timeout_s: float) -> dict[str, Any] | None:
    """Minify one record in a child of its own; its `minified` block, or None when the record is
    not one the minifier can shrink (core.minify.plan). Refused (`experiment_folder`) where its
    folder is not safely inside `output_dir`.

    The attempt works in the experiment's minify folder, emptied first, unless that holds a repro
    that reproduced: then in a folder of its own beside it (`minify.<attempt>`), and the earlier
    repro stays, whatever this attempt finds."""
    job = plan(record)
    if job is None:
        return None
    experiment_dir = experiment_folder(record, output_dir)
    answer = experiment_dir / FOLDER

    def relative(path: Path) -> str:
        return os.path.relpath(path, output_dir.resolve())

    started = time.monotonic()
    try:
        task = Task.read(experiment_dir / "task.json")
    except (OSError, ValueError, KeyError) as exc:
        return {**minified_block(job, {"status": "failed", "message": f"cannot read the experiment's task "
                                                                      f"({exc}): no model to minify"},
                                 answer.resolve(), 0.0, timeout_s, relative), "repro": None}
    attempt = secrets.token_hex(8)
    if reproducing(answer):
        folder = (experiment_dir / f"{FOLDER}.{attempt}").resolve()
    else:
        shutil.rmtree(answer, ignore_errors=True)
        folder = answer.resolve()
    ours = Task(task.experiment, task.options, str(folder), attempt)
    ours.write()
    (folder / JOB_FILE).write_text(json.dumps(job.to_dict()))
    make_scratch(folder)
    result, checked = None, None
    killed_at_s = timeout_s * (1 - CHECK_SHARE)
    exit_code = run_child(ours, [], killed_at_s)
    if exit_code is not None:
        result = read_result(folder / RESULT_FILE) or {
            "status": "failed", "message": f"the minifier's process exited {exit_code} without an answer "
                                           f"({LOG_FILE} says why)"}
    elif (folder / WORK_FOLDER / REPRO_FILE).exists():
        # Killed at its share of the budget: its last checkpoint, checked in the rest.
        shutil.copyfile(folder / WORK_FOLDER / REPRO_FILE, folder / REPRO_FILE)
        rest = timeout_s - (time.monotonic() - started)
        exit_code = run_child(ours, ["--check"], rest)
        checked = read_result(folder / CHECK_RESULT_FILE) if exit_code is not None else {
            "message": f"its check ran past the rest of the budget ({rest:.0f} s) and was killed"}
    remove_leftovers(folder)
    return minified_block(job, result, folder, time.monotonic() - started, timeout_s, relative, killed_at_s,
                          checked)


def run_child(task: Task, options: list[str], timeout_s: float) -> int | None:
    """Run the minifier's process on `task` in a session of its own, its output appended to the
    log; its exit code, or None when it ran past `timeout_s`. However this call ends (the budget,
    SIGINT or SIGTERM raised here), its group and every process carrying its attempt token are
    killed; if this process is SIGKILLed, the parent-death signal ends the child and the run's
    reaper (which the caller starts) the descendants that left its group."""
    with open(Path(task.artifacts_dir) / LOG_FILE, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "experiment_runner.child.minify", *options,
                                 str(task.task_path)], cwd=task.artifacts_dir,
                                env=repro_environment(child_environment(task)), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_parent_death_signal(signal.SIGKILL))
        code: int | None = None
        try:
            code = proc.wait(timeout=max(timeout_s, 0.0))
        except subprocess.TimeoutExpired:
            pass
        finally:
            # A second Ctrl-C must not cut the kill short: the stop signals wait until it is done.
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            try:
                kill_experiment(proc.pid, task.attempt_id)
                proc.wait()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    return code


def minify_records(records: Iterable[dict[str, Any]], results_path: Path, output_dir: Path, timeout_s: float,
                   echo: Callable[[str], None]) -> list[dict[str, Any]]:
    """Minify the red compiled experiments among `records` one by one, each answer appended to the
    sidecar as it comes (a stopped command keeps the ones done); the blocks, in order. An
    experiment another minification holds, or whose folder is not safely inside `output_dir`, is
    said in one line and left out."""
    blocks = []
    # With --processes, one experiment has a record per process: it is minified once, from its last.
    latest = {(record["run_id"], record["experiment_id"]): record for record in records}
    candidates = [record for record in latest.values() if plan(record) is not None]
    for index, record in enumerate(candidates, start=1):
        try:
            folder = experiment_folder(record, output_dir)
            with experiment_lock(record, folder):
                echo(f"minifying [{index}/{len(candidates)}] {record['experiment_id']} (budget {timeout_s:g} s)")
                block = minify_record(record, output_dir, timeout_s)
        except Refused as exc:
            echo(f"experiment_runner minify: {exc}")
            continue
        except OSError as exc:  # a full or read-only disk: its files cannot be written
            echo(f"experiment_runner minify: {record['experiment_id']}: cannot write its minification "
                 f"({exc.filename or folder}: {exc.strerror or exc}); not minified")
            continue
        line = sidecar_line(record, block)
        try:
            append_answer(sidecar_path(results_path), line)
        except OSError as exc:
            raise ResultsIOError(f"cannot append the answer for {record['experiment_id']} to "
                                 f"{sidecar_path(results_path)} ({exc.strerror or exc}); the answer, not kept there: "
                                 f"{line.decode().strip()}") from None
        blocks.append(block)
        nodes = (f", {block['nodes_after']} of {block['nodes_before']} nodes kept"
                 if block["nodes_before"] is not None else "")
        where = f": {output_dir / block['repro']}" if block["repro"] else ""
        echo(f"  {block['status']} in {block['minify_s']:.0f} s{nodes}{where}"
             + (f" ({block['message']})" if block["message"] else ""))
    return blocks


def append_answer(sidecar: Path, line: bytes) -> None:
    """Append one answer to the sidecar, a regular file only: a FIFO there would block the
    command (or feed a reader), a link could lead anywhere (never followed), a device is no file."""
    try:
        kind = os.lstat(sidecar).st_mode
    except FileNotFoundError:
        kind = stat.S_IFREG
    if not stat.S_ISREG(kind):
        raise OSError(errno.EINVAL, "not a regular file", str(sidecar))
    fd = os.open(sidecar, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced since it was looked at
            raise OSError(errno.EINVAL, "not a regular file", str(sidecar))
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _timeout_option() -> Any:
    return next(option for option in declared(SessionConfig) if option.name == "minify_timeout")


def build_parser() -> argparse.ArgumentParser:
    timeout = _timeout_option()
    p = argparse.ArgumentParser(
        prog="experiment_runner minify",
        description="Shrink the red compiled experiments of a results file (verdict FAIL or status error) to a "
                    "repro.py each with PyTorch's minifier, as --minify does after a run, and check that each "
                    "repro fails the same way in a fresh interpreter. The answers are appended to minified.jsonl "
                    "beside the results file (the newest line of an experiment is its `minified` block); the "
                    "records are not changed.")
    p.add_argument("results", help="a results file (JSONL)")
    p.add_argument("--experiment-id", action="append", default=[], metavar="ID",
                   help="only this experiment (repeatable); default: every red compiled experiment of the file's "
                        "latest run")
    p.add_argument(timeout.long, type=timeout.flag.parse, default=timeout.default, metavar=timeout.flag.metavar,
                   help=f"{timeout.flag.help} (default: {timeout.default:g})")
    p.add_argument("--output-dirname", metavar="DIR",
                   help="the run's --output-dirname, which the records' artifact paths are relative to "
                        "(default: the results file's folder, the real file's where it is given by a link)")
    return p


# The fields minify reads, and the JSON types it can read them as (None: absent or null).
_READ_FIELDS: dict[str, tuple[type, ...]] = {
    "run_id": (str,), "experiment_id": (str,), "experiment": (dict,), "status": (str, type(None)),
    "verification_code": (str, type(None)), "error": (dict, type(None)), "artifacts": (dict, type(None)),
    "timestamp": (int, float, type(None))}


def unusable(record: dict[str, Any]) -> str | None:
    """Why minify cannot read a record (a list for an id, an experiment that is no object, a
    timestamp that is text...), or None: such a record is passed over, said in one line, as a
    traceback would stop every minification after it."""
    for name, kinds in _READ_FIELDS.items():
        value = record.get(name)
        if not isinstance(value, kinds) or isinstance(value, bool):
            return f"{name} is {type(value).__name__} {str(value)[:40]!r}"
    return None


def readable(numbered: Iterable[tuple[int, dict[str, Any]]], results: Path,
             echo: Callable[[str], None]) -> list[dict[str, Any]]:
    """The records minify can read; the others said in one line naming the first."""
    kept, passed_over = [], []
    for lineno, record in numbered:
        problem = unusable(record)
        if problem is None:
            kept.append(record)
        else:
            passed_over.append((lineno, problem))
    if passed_over:
        lineno, problem = passed_over[0]
        echo(f"experiment_runner minify: {results}:{lineno}: passed over {len(passed_over)} record(s) it cannot "
             f"read ({problem})")
    return kept


def select(records: Sequence[dict[str, Any]], ids: Sequence[str]) -> list[dict[str, Any]]:
    """The final record of each experiment (the latest process of each), of the named experiments,
    else of the file's latest run."""
    final = list({(r["run_id"], r["experiment_id"]): r for r in final_records(records).values()}.values())
    if ids:
        chosen = [r for r in final if r["experiment_id"] in ids]
        missing = sorted(set(ids) - {r["experiment_id"] for r in chosen})
        if missing:
            raise UsageError(f"no record of experiment {missing[0]!r} in the results file")
        return chosen
    latest = max((r.get("timestamp") or 0, r["run_id"]) for r in final)[1] if final else None
    return [r for r in final if r["run_id"] == latest]


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    timeout = _timeout_option()
    if timeout.flag.out_of_range(args.minify_timeout):
        print(f"experiment_runner minify: error: {timeout.long} must be {timeout.flag.wanted}", file=sys.stderr)
        return EXIT_USAGE
    results = Path(args.results)
    # Through a link, the artifacts are beside the results file itself.
    output_dir = Path(args.output_dirname) if args.output_dirname else Path(os.path.realpath(results)).parent
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731 - one echo for every line
    try:
        chosen = select(readable(iter_numbered_records(results), results, say), args.experiment_id)
    except UsageError as exc:
        print(f"experiment_runner minify: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (ResultsFileError, OSError) as exc:
        print(f"experiment_runner minify: error: cannot read {results}: {exc}", file=sys.stderr)
        return EXIT_RESULTS_IO
    red = [r for r in chosen if plan(r) is not None]
    if not red:
        print(f"experiment_runner minify: nothing to minify: none of the {len(chosen)} experiment(s) chosen is a "
              "compiled one that failed (verdict FAIL or status error)", file=sys.stderr)
        return EXIT_OK
    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS[1:]}
    start_reaper()
    try:
        blocks = minify_records(red, results, output_dir, args.minify_timeout, say)
    except ResultsIOError as exc:
        print(f"experiment_runner minify: error: {exc}", file=sys.stderr)
        return EXIT_RESULTS_IO
    except KeyboardInterrupt as exc:  # run_child has ended the minifier and all it started
        signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
        print(f"experiment_runner minify: stopped by {signal.Signals(signum).name}: the minification under way was "
              f"ended with every process it started; the answers before it are in {sidecar_path(results)}",
              file=sys.stderr)
        return 128 + signum
    finally:
        stop_reaper()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return EXIT_OK if len(blocks) == len(red) else EXIT_USAGE
