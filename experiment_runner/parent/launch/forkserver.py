"""The fork server's client: one fresh process per experiment without paying Python's and torch's start-up each time.

Importing torch costs 1.5-2 s on a small machine, which dwarfs a quick experiment. The
server is started once per run, imports torch and the worker (but initializes no device,
so nothing device-side is shared), and forks one child per experiment. Each child is
still a process of its own: new session, its own environment, its own log file, and it
ends with os._exit(), so nothing it did survives it.

Protocol (JSON lines): the parent writes `{"id", "task", "log", "env", "cwd"}` to the
server's stdin; the server answers `{"ready": pid}` once at start, then `{"id", "pid"}`
when a child is forked and `{"id", "status"}` (the raw wait status) when it is reaped.
The parent keeps enforcing timeouts (killpg on the child's pid, which is also its
process group) and keeps writing every record. When the parent goes away (EOF on stdin)
the server kills every child's process group and exits, so a killed runner leaves no
experiment behind. The server itself is `experiment_runner.child.forkserver`.

XLA experiments do not come here: torch_xla reads its environment when it is imported.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from experiment_runner.core.logs import read_log_tail
from experiment_runner.core.processes import group_alive, signal_group
from experiment_runner.core.protocol import Task, read_result
from experiment_runner.core.record import ChildOutcome
from experiment_runner.parent.launch.env import INHERITED_XLA_VARS
from experiment_runner.parent.launch.subprocess import (
    KILL_GRACE_S,
    SubprocessLauncher,
    _parent_death_signal,
)

# How long the parent waits for the server to import torch before falling back.
SERVER_START_TIMEOUT_S = 300.0
# Environment variables that torch, its compilers or native libraries may read once, at
# import or library load, i.e. in the server rather than in the forked child. An
# experiment whose value of one of them differs from the server's runs as a plain
# subprocess instead.
IMPORT_TIME_PREFIXES = ("TORCH", "PYTORCH", "TRITON", "OMP_", "MKL_", "KMP_", "GOMP_", "LD_", "PYTHON",
                        "CUDA", "NCCL", "NVIDIA", "XLA", "PJRT", "TPU", "HF_", "TRANSFORMERS", "TIMM")
# ... except these, which are read when first used, after the fork.
READ_AT_USE = frozenset({"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "CUDA_VISIBLE_DEVICES",
                         "PYTHONUNBUFFERED", "PYTHONFAULTHANDLER"})


def forkable(env: dict[str, str], server_env: dict[str, str]) -> bool:
    """Whether a child with `env` behaves as if started fresh when forked from a server
    that imported torch under `server_env`."""
    for name in set(env) | set(server_env):
        if name.startswith(IMPORT_TIME_PREFIXES) and name not in READ_AT_USE \
                and env.get(name) != server_env.get(name):
            return False
    return True


@dataclass
class Server:
    """A started fork server and the environment it imported torch under."""

    process: subprocess.Popen
    env: dict[str, str]
    stderr: IO[bytes]


_prestarted: list[Server] = []


def start_server() -> Server:
    """Start a server; it dies with this process (PR_SET_PDEATHSIG), even mid-import."""
    env = {k: v for k, v in os.environ.items() if k not in INHERITED_XLA_VARS}
    stderr = tempfile.TemporaryFile()  # copied into the run's folder once that is known
    process = subprocess.Popen(
        [sys.executable, "-m", "experiment_runner.child.forkserver"], env=env, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=stderr, start_new_session=True, close_fds=True,
        preexec_fn=_parent_death_signal(signal.SIGTERM),
    )
    return Server(process, env, stderr)


def prestart() -> None:
    """Start the server now, so that its imports overlap with the parent's own start-up."""
    if not _prestarted:
        _prestarted.append(start_server())


@dataclass
class _Pending:
    replies: "queue.Queue[dict[str, Any]]" = field(default_factory=queue.Queue)


class ServerGone(RuntimeError):
    """The fork server died or never became ready."""


class ForkServerLauncher(SubprocessLauncher):
    """Launches experiments as children of a fork server; XLA experiments as plain subprocesses.

    Same contract as SubprocessLauncher: `launch` blocks until the experiment is over and
    returns its ChildOutcome; the timeout kills the child's whole process group.
    """

    name = "forkserver"

    def __init__(self, timeout_s: float | None = None, print_subprocess: bool = False,
                 extra_env: dict[str, str] | None = None, server_log: Path | None = None) -> None:
        super().__init__(timeout_s, print_subprocess, extra_env)
        self._write_lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._next_id = 0
        self._ready = threading.Event()
        self._gone = False
        self._server_log = server_log
        server = _prestarted.pop() if _prestarted else start_server()
        self._server, self._server_env, self._server_stderr = server.process, server.env, server.stderr
        self._reader = threading.Thread(target=self._read_replies, name="forkserver-replies", daemon=True)
        self._reader.start()

    def _read_replies(self) -> None:
        assert self._server.stdout is not None
        for line in self._server.stdout:
            message = json.loads(line)
            if "ready" in message:
                self._ready.set()
                continue
            pending = self._pending.get(message["id"])
            if pending is not None:
                pending.replies.put(message)
        self._gone = True
        self._ready.set()
        for pending in list(self._pending.values()):
            pending.replies.put({"gone": True})

    def _request(self, payload: dict[str, Any]) -> tuple[int, _Pending]:
        with self._write_lock:
            request_id = self._next_id
            self._next_id += 1
            pending = self._pending[request_id] = _Pending()
            assert self._server.stdin is not None
            try:
                self._server.stdin.write((json.dumps({**payload, "id": request_id}) + "\n").encode())
                self._server.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                self._pending.pop(request_id, None)
                raise ServerGone(f"the fork server is gone: {exc}") from exc
        return request_id, pending

    def launch(self, task: Task, log_path: Path, extra_env: dict[str, str] | None = None) -> ChildOutcome:
        if task.experiment.config.xla is not None or self._gone:
            return super().launch(task, log_path, extra_env)
        task_path, env = self.prepare(task, extra_env)
        # Waiting for the server's imports is the run's start-up, not the experiment's time.
        if not forkable(env, self._server_env) or not self._ready.wait(SERVER_START_TIMEOUT_S) or self._gone:
            return super().launch(task, log_path, extra_env)
        start = time.monotonic()
        try:
            request_id, pending = self._request({"task": str(task_path), "log": str(log_path),
                                                 "env": env, "cwd": os.getcwd()})
        except ServerGone:
            return super().launch(task, log_path, extra_env)
        try:
            reply = pending.replies.get()
            if "pid" not in reply:
                return super().launch(task, log_path, extra_env)
            outcome = self._wait(reply["pid"], pending, start, log_path)
            outcome.cuda_visible_devices = (extra_env or {}).get("CUDA_VISIBLE_DEVICES")
        finally:
            self._pending.pop(request_id, None)
        outcome.result = None if (outcome.timed_out or outcome.interrupted) else read_result(task.result_path)
        outcome.log_tail = read_log_tail(log_path)
        return outcome

    def _wait(self, pid: int, pending: _Pending, start: float, log_path: Path) -> ChildOutcome:
        self.register(pid)
        follower = self.follow(log_path)
        timed_out = False
        try:
            try:
                reply = pending.replies.get(timeout=self.timeout_s)
            except queue.Empty:
                timed_out = True
                kill_after_grace(pid)
                reply = pending.replies.get()
        finally:
            signal_group(pid, signal.SIGKILL)  # whatever the child left in its group
            interrupted = self.unregister(pid)
            if follower is not None:
                follower.stop()
        if "status" in reply:
            returncode = os.waitstatus_to_exitcode(reply["status"])
        else:
            returncode = None  # the server died with the child; the child's group is gone too
        return ChildOutcome(result=None, returncode=returncode, timed_out=timed_out,
                            interrupted=interrupted, wall_s=time.monotonic() - start, launcher=self.name)

    def close(self) -> None:
        """Stop the server: it kills whatever children are left and exits."""
        try:
            if self._server.stdin is not None:
                self._server.stdin.close()
        except OSError:
            pass
        try:
            self._server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            signal_group(self._server.pid, signal.SIGKILL)
            self._server.wait()
        self._reader.join(timeout=5)
        if self._server_log is not None:
            self._server_stderr.seek(0)
            with open(self._server_log, "ab") as log:
                shutil.copyfileobj(self._server_stderr, log)
        self._server_stderr.close()
        super().close()


def kill_after_grace(pid: int) -> None:
    """SIGTERM the group, SIGKILL it after the grace period; the server reaps the leader."""
    signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE_S
    while time.monotonic() < deadline:
        if not group_alive(pid):
            return
        time.sleep(0.05)
    signal_group(pid, signal.SIGKILL)
