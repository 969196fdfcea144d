"""The plain launcher: one fresh interpreter per experiment (`python -m experiment_runner.child`).

The child runs in its own session (process group) with its own environment and a log
file for its output. On timeout the whole group is killed, grandchildren included, and so
is every descendant that left the group (core.process_groups.kill_experiment); after every
child, whatever is left of it is killed too. What happened comes back as a `ChildOutcome`,
from which `core.record.build_record` makes the one record: built only from a result this
attempt wrote (core.protocol).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Callable, Iterator

from experiment_runner.core.logs import read_log_tail
from experiment_runner.core.process_groups import kill_experiment, oom_kill_count
from experiment_runner.core.protocol import Task, read_attempt_result
from experiment_runner.core.record import ChildOutcome
from experiment_runner.parent.launch.env import child_environment, make_scratch

# SIGTERM first so a child can flush; SIGKILL after this grace period.
KILL_GRACE_S = 2.0
# The launching thread waits in slices this long. Ray cancels a task by scheduling a
# KeyboardInterrupt in its worker's main thread (no signal is sent), which Python raises only
# between bytecodes: a thread blocked in one long lock or waitpid call would not see it before
# the experiment ended, and the worker would be force-killed instead of cleaning up.
WAIT_SLICE_S = 0.2


def wait_slices(timeout_s: float | None) -> Iterator[float]:
    """Timeouts of successive short waits that together last `timeout_s` (None: forever)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        left = WAIT_SLICE_S if deadline is None else deadline - time.monotonic()
        if left <= 0:
            return
        yield min(WAIT_SLICE_S, left)


def wait_process(proc: subprocess.Popen, timeout_s: float | None) -> bool:
    """Wait for `proc` in slices (see WAIT_SLICE_S); False when it outlived `timeout_s`."""
    for slice_s in wait_slices(timeout_s):
        try:
            proc.wait(timeout=slice_s)
            return True
        except subprocess.TimeoutExpired:
            continue
    return proc.poll() is not None


def _tee(pipe: IO[bytes], log: IO[bytes], stream: IO[str]) -> None:
    for chunk in iter(lambda: pipe.read1(65536), b""):  # type: ignore[attr-defined]
        log.write(chunk)
        stream.write(chunk.decode("utf-8", "replace"))
        stream.flush()


class LogFollower:
    """Streams a growing log file to our stdout (--print-subprocess for children that write
    straight into their log file)."""

    def __init__(self, path: Path, stream: IO[str]) -> None:
        self.path = path
        self.stream = stream
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"follow-{path.parent.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        position = 0
        while True:
            stopping = self._stop.wait(0.1)
            try:
                with open(self.path, "rb") as handle:
                    handle.seek(position)
                    data = handle.read()
            except OSError:
                data = b""
            if data:
                position += len(data)
                self.stream.write(data.decode("utf-8", "replace"))
                self.stream.flush()
            if stopping:
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _parent_death_signal(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A preexec function asking Linux to send `sig` to the child when the runner dies, so
    a runner killed with SIGKILL does not leave its current experiment running."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1
    return lambda: prctl(pr_set_pdeathsig, sig)


class SubprocessLauncher:
    """Starts each experiment as `python -m experiment_runner.child` in a new session.

    Thread-safe: with --max-parallel several threads call `launch` at once; `interrupt`
    (from the SIGINT handler) kills every running child's group.
    """

    name = "subprocess"

    def __init__(self, timeout_s: float | None = None, print_subprocess: bool = False,
                 extra_env: dict[str, str] | None = None) -> None:
        self.timeout_s = timeout_s
        self.print_subprocess = print_subprocess
        self.extra_env = extra_env or {}
        self.interrupt_requested = False
        self._lock = threading.Lock()
        self._running: set[int] = set()
        self._interrupted: set[int] = set()
        self._preexec = _parent_death_signal()

    def register(self, pid: int) -> None:
        """Track a running child (its pid is its process group) so `interrupt` can kill it."""
        with self._lock:
            self._running.add(pid)
            if not self.interrupt_requested:
                return
        self._kill_for_interrupt(pid)

    def unregister(self, pid: int) -> bool:
        """Forget a finished child; True when it was killed by an interrupt."""
        with self._lock:
            self._running.discard(pid)
            interrupted = pid in self._interrupted
            self._interrupted.discard(pid)
        return interrupted

    def interrupt(self) -> None:
        """Kill every running child's whole group now (called from the SIGINT handler); their
        records say `interrupted` and the run stops after writing them."""
        self.interrupt_requested = True
        for pid in list(self._running):
            self._kill_for_interrupt(pid)

    def _kill_for_interrupt(self, pid: int) -> None:
        self._interrupted.add(pid)
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def command(self, task_path: Path) -> list[str]:
        return [sys.executable, "-m", "experiment_runner.child", str(task_path)]

    def prepare(self, task: Task, extra_env: dict[str, str] | None = None) -> tuple[Path, dict[str, str]]:
        """Remove earlier attempts' results; write the task file; build the child's environment
        and scratch folders."""
        task.clear_results()
        task_path = task.write()
        env = child_environment(task, extra={**self.extra_env, **(extra_env or {})})
        make_scratch(task.artifacts_dir)
        return task_path, env

    def follow(self, log_path: Path) -> LogFollower | None:
        return LogFollower(log_path, sys.stdout) if self.print_subprocess else None

    def launch(self, task: Task, log_path: Path, extra_env: dict[str, str] | None = None) -> ChildOutcome:
        task_path, env = self.prepare(task, extra_env)
        oom_before, _ = oom_kill_count()
        start = time.monotonic()
        timed_out = False
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                self.command(task_path), env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if self.print_subprocess else log,
                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=self._preexec,
            )
            tee = None
            try:
                self.register(proc.pid)
                if self.print_subprocess:
                    tee = threading.Thread(target=_tee, args=(proc.stdout, log, sys.stdout), daemon=True)
                    tee.start()
                timed_out = not wait_process(proc, self.timeout_s)
            finally:
                kill_experiment(proc.pid, task.attempt_id, grace_s=KILL_GRACE_S if timed_out else 0.0)
                proc.wait()
                interrupted = self.unregister(proc.pid)
            if tee is not None:
                tee.join(timeout=5)
        wall = time.monotonic() - start
        return self.outcome(task, log_path, proc.returncode, timed_out, interrupted, wall, oom_before, extra_env,
                            launcher=SubprocessLauncher.name)

    def outcome(self, task: Task, log_path: Path, returncode: int | None, timed_out: bool, interrupted: bool,
                wall_s: float, oom_before: int | None, extra_env: dict[str, str] | None,
                launcher: str) -> ChildOutcome:
        """What happened to one attempt: its own result if it wrote one (build_record decides
        what of it counts), its log's tail, and the kernel's OOM-kill count while it ran."""
        oom_after, counter = oom_kill_count()
        oom_kills = oom_after - oom_before if oom_after is not None and oom_before is not None else None
        return ChildOutcome(result=read_attempt_result(task), returncode=returncode, timed_out=timed_out,
                            interrupted=interrupted, wall_s=wall_s, log_tail=read_log_tail(log_path),
                            launcher=launcher, cuda_visible_devices=(extra_env or {}).get("CUDA_VISIBLE_DEVICES"),
                            oom_kills=oom_kills, oom_counter=counter)

    def close(self) -> None:
        """Release what the launcher holds (nothing for plain subprocesses)."""
