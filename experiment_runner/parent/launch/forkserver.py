"""A fork server: one fresh process per experiment without paying Python's and torch's start-up each time.

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
experiment behind.

XLA experiments do not come here: torch_xla reads its environment when it is imported.
"""

from __future__ import annotations

import io
import json
import os
import queue
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from experiment_runner.launcher import (
    _INHERITED_XLA_VARS, KILL_GRACE_S, ChildOutcome, SubprocessLauncher, _parent_death_signal, read_log_tail,
)
from experiment_runner.protocol import Task, read_result

# How long the parent waits for the server to import torch before falling back.
SERVER_START_TIMEOUT_S = 300.0
# Modules worth having in memory before the fork: what every experiment imports anyway
# (torch._dynamo too: optimizers and torch.compile import it, seconds on a small machine).
PRELOAD = ("torch", "numpy", "torch._dynamo", "experiment_runner.worker")
# Environment variables that torch, its compilers or native libraries may read once, at
# import or library load, i.e. in the server rather than in the forked child. An
# experiment whose value of one of them differs from the server's runs as a plain
# subprocess instead.
IMPORT_TIME_PREFIXES = ("TORCH", "PYTORCH", "TRITON", "OMP_", "MKL_", "KMP_", "GOMP_", "LD_", "PYTHON",
                        "CUDA", "NCCL", "NVIDIA", "XLA", "PJRT", "TPU", "HF_", "TRANSFORMERS", "TIMM")
# ... except these, which are read when first used, after the fork.
READ_AT_USE = frozenset({"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "CUDA_VISIBLE_DEVICES",
                         "PYTHONUNBUFFERED", "PYTHONFAULTHANDLER"})


# ---------------------------------------------------------------- server side


def _send(fd: int, message: dict[str, Any]) -> None:
    os.write(fd, (json.dumps(message) + "\n").encode())


def _run_child(request: dict[str, Any], close_fds: list[int]) -> None:
    """In the forked child: become an experiment process, run the worker, never return."""
    code = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for fd in close_fds:
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        import tempfile

        tempfile.tempdir = None  # TMPDIR is per experiment
        log_fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null_fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null_fd, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        os.close(null_fd)
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True,
                                      errors="backslashreplace")
        if os.environ.get("PYTHONFAULTHANDLER"):
            import faulthandler

            faulthandler.enable(sys.stderr)
        os.chdir(request["cwd"])
        from experiment_runner import worker

        code = worker.main([request["task"]])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - the log must say why, and the child must not return
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve() -> int:
    """The server loop: fork on request, report pids and wait statuses, clean up on EOF."""
    requests_fd = os.dup(0)
    replies_fd = os.dup(1)
    null_fd = os.open(os.devnull, os.O_RDWR)
    os.dup2(null_fd, 0)
    os.dup2(2, 1)  # a stray print from an import must not corrupt the protocol
    os.close(null_fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    # The parent's death (PR_SET_PDEATHSIG) arrives as SIGTERM, possibly mid-import.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    # torch.cuda.is_available() through NVML, so no import below can initialize the CUDA
    # driver, which a forked child could not use.
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    for name in PRELOAD:
        __import__(name)
    if _cuda_driver_loaded():
        print("forkserver: the CUDA driver was loaded while preloading; refusing to fork", file=sys.stderr)
        return 1
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    _send(replies_fd, {"ready": os.getpid()})

    children: dict[int, int] = {}  # pid -> request id
    try:
        _serve_requests(requests_fd, replies_fd, wake_r, wake_w, children)
    finally:
        for pid in children:
            _killpg(pid, signal.SIGKILL)
    return 0


def _exit_on_sigterm(*_: Any) -> None:
    raise SystemExit(0)


def _serve_requests(requests_fd: int, replies_fd: int, wake_r: int, wake_w: int,
                    children: dict[int, int]) -> None:
    buffer = b""
    eof = False
    while not eof or children:
        try:
            readable, _, _ = select.select([wake_r] + ([] if eof else [requests_fd]), [], [],
                                           None if not eof else 0.1)
        except InterruptedError:
            readable = []
        if wake_r in readable:
            os.read(wake_r, 4096)
        if requests_fd in readable:
            data = os.read(requests_fd, 65536)
            if not data:
                eof = True
                for pid in children:
                    _killpg(pid, signal.SIGKILL)
            buffer += data
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    _run_child(request, [requests_fd, replies_fd, wake_r, wake_w])
                children[pid] = request["id"]
                _send(replies_fd, {"id": request["id"], "pid": pid})
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            request_id = children.pop(pid, None)
            if request_id is not None and not eof:
                _send(replies_fd, {"id": request_id, "status": status})


def _cuda_driver_loaded() -> bool:
    try:
        return "libcuda.so" in Path("/proc/self/maps").read_text()
    except OSError:
        return False


def forkable(env: dict[str, str], server_env: dict[str, str]) -> bool:
    """Whether a child with `env` behaves as if started fresh when forked from a server
    that imported torch under `server_env`."""
    for name in set(env) | set(server_env):
        if name.startswith(IMPORT_TIME_PREFIXES) and name not in READ_AT_USE \
                and env.get(name) != server_env.get(name):
            return False
    return True


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------- parent side


@dataclass
class Server:
    """A started fork server and the environment it imported torch under."""

    process: subprocess.Popen
    env: dict[str, str]
    stderr: IO[bytes]


_prestarted: list[Server] = []


def start_server() -> Server:
    """Start a server; it dies with this process (PR_SET_PDEATHSIG), even mid-import."""
    env = {k: v for k, v in os.environ.items() if k not in _INHERITED_XLA_VARS}
    stderr = tempfile.TemporaryFile()  # copied into the run's folder once that is known
    process = subprocess.Popen(
        [sys.executable, "-m", "experiment_runner.forkserver"], env=env, stdin=subprocess.PIPE,
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
            _killpg(pid, signal.SIGKILL)  # whatever the child left in its group
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
            _killpg(self._server.pid, signal.SIGKILL)
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
    _killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE_S
    while time.monotonic() < deadline:
        if not _group_alive(pid):
            return
        time.sleep(0.05)
    _killpg(pid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    """Whether any member of the group still runs (zombies awaiting their reaper do not count)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


if __name__ == "__main__":
    sys.exit(serve())
