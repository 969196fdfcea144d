"""The fork server's client: one fresh process per experiment without paying Python's and torch's start-up each time.

Importing torch costs 1.5-2 s on a small machine (torch_xla another second), which
dwarfs a quick experiment. A server imports torch (and, for XLA experiments, torch_xla)
and the worker once, initializes no device (so nothing device-side is shared), and forks
one child per experiment. Each child is still a process of its own: new session, its own
environment, its own log file, and it ends with os._exit(), so nothing it did survives it.

Which server serves an experiment: environment variables that torch, torch_xla or native
libraries read at import or library load are fixed in a server; those read at first use
are the child's own. Experiments are grouped by the import-time settings they ask for
(`ServerKind`): one server per kind, started on first need (the common kinds are
started early, by `prestart`, so their imports overlap with the parent's planning).

Protocol (JSON lines): the parent writes `{"id", "task", "log", "env", "cwd"}` to the
server's stdin; the server answers `{"ready": pid}` once at start, then `{"id", "pid"}`
when a child is forked and `{"id", "status"}` (the raw wait status) when it is reaped.
The parent keeps enforcing timeouts (killpg on the child's pid, which is also its
process group, plus its descendants: core.process_groups.kill_experiment) and keeps writing
every record. When the parent goes away (EOF on stdin) the server kills every child's
process group and exits, and the run's reaper kills whatever is left, so a killed runner
leaves no experiment behind. The server itself is `experiment_runner.child.forkserver`.

If a server dies, the experiments it was running die with it (their parent-death signal);
their records say so (error.type LauncherDied), one warning is printed, and the next
experiment of its kind starts a new server. After MAX_SERVER_DEATHS deaths in a run,
experiments run as plain subprocesses, and their records say `placement.launcher:
subprocess`.
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
from typing import Any, Callable, Sequence

from experiment_runner.core.process_groups import RUN_TOKEN_ENV, kill_experiment, oom_kill_count, signal_group
from experiment_runner.core.protocol import Task
from experiment_runner.core.record import ChildOutcome
from experiment_runner.parent.launch.env import INHERITED_XLA_VARS
from experiment_runner.parent.launch.reaper import RUN_TOKEN
from experiment_runner.parent.launch.subprocess_launcher import (
    KILL_GRACE_S,
    SubprocessLauncher,
    _parent_death_signal,
    wait_slices,
)

# How long the parent waits for a server to import torch before falling back.
SERVER_START_TIMEOUT_S = 300.0
# How long a launch interrupted before it saw its child's pid waits for it, to kill that child.
LATE_PID_S = 5.0
# How long a server may stay silent when it owes a reply (a requested fork; the status of a child
# the parent killed). A server silent for longer, or stopped (SIGSTOP, a debugger), is wedged:
# it is killed and replaced, so a stopped server cannot hold a run beyond its timeouts.
SERVER_REPLY_S = 10.0
# After this many server deaths in one run, experiments run as plain subprocesses.
MAX_SERVER_DEATHS = 3
# Environment variables that torch, torch_xla, their compilers or native libraries may read
# once, at import or library load, i.e. in the server rather than in the forked child.
IMPORT_TIME_PREFIXES = ("TORCH", "PYTORCH", "TRITON", "OMP_", "MKL_", "KMP_", "GOMP_", "LD_", "PYTHON",
                        "CUDA", "NCCL", "NVIDIA", "XLA", "PJRT", "TPU", "LIBTPU", "PT_XLA", "TF_", "GRPC_",
                        "NEURON", "HF_", "TRANSFORMERS", "TIMM")
# ... except these, which are read when first used, after the fork.
READ_AT_USE = frozenset({"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "CUDA_VISIBLE_DEVICES",
                         "PYTHONUNBUFFERED", "PYTHONFAULTHANDLER"})
# ... and in a server that imported torch_xla 2.9, these too: the PJRT device and XLA_FLAGS
# are read when the runtime starts (the first device use), the dump, dtype and
# functionalization variables when first consulted (tests/child/test_xla_forkserver.py proves each).
# torch_xla's import adds defaults to XLA_FLAGS (and TF_CPP_MIN_LOG_LEVEL); the child redoes
# that over its own values (child/forkserver.py).
# PT_XLA_DEBUG makes torch_xla's import create a trace file of the process's own: such
# experiments start fresh.
FRESH_ONLY = ("PT_XLA_DEBUG",)
XLA_READ_AT_USE = READ_AT_USE | {"PJRT_DEVICE", "XLA_FLAGS", "XLA_SAVE_TENSORS_FMT", "XLA_SAVE_TENSORS_FILE",
                                 "XLA_DISABLE_FUNCTIONALIZATION", "XLA_USE_BF16", "XLA_DOWNCAST_BF16"}


@dataclass(frozen=True)
class ServerKind:
    """What a server preloads, and the import-time settings it imports them under."""

    xla: bool
    settings: tuple[tuple[str, str], ...]
    dynamo: bool = True  # torch._dynamo too (see children_import_dynamo)

    @property
    def label(self) -> str:
        return "xla" if self.xla else "torch"


def import_time_settings(env: dict[str, str], xla: bool) -> tuple[tuple[str, str], ...]:
    """The variables of `env` that a server with (xla) or without torch_xla fixes at import."""
    read_at_use = XLA_READ_AT_USE if xla else READ_AT_USE
    return tuple(sorted((k, v) for k, v in env.items()
                        if k.startswith(IMPORT_TIME_PREFIXES) and k not in read_at_use))


def children_import_dynamo(backends: Sequence[str | None] | None, tests: Sequence[str] | None) -> bool:
    """Whether a run's children import torch._dynamo, so that its servers preload it: compiled
    experiments do, and training ones (the optimizers, the loss); eager inference never does.
    From the --dynamo and --test choices (None: the default, which has both)."""
    return backends is None or tests is None or any(b is not None for b in backends) or "train" in tests


def _kind(env: dict[str, str], xla: bool, dynamo: bool) -> ServerKind:
    """`dynamo`: whether the run's servers preload torch._dynamo; an XLA server always does (its
    dynamo bridge imports torch._inductor, which imports it)."""
    return ServerKind(xla, import_time_settings(env, xla), dynamo or xla)


def server_kind(task: Task, env: dict[str, str], dynamo: bool = True) -> ServerKind:
    """The server an experiment with environment `env` behaves in as if started fresh."""
    return _kind(env, task.experiment.config.xla is not None, dynamo)


def server_environment(kind: ServerKind, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a server of `kind` starts with: the parent's, its import-time
    variables replaced by the kind's."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if not k.startswith(IMPORT_TIME_PREFIXES)}
    env.update(kind.settings)
    return env


class ServerGone(RuntimeError):
    """The fork server died or never became ready."""


@dataclass
class _Pending:
    """One request's replies, and its child's pid as soon as the reader sees it (so a launch
    interrupted anywhere, even inside Queue.get after it took the pid, can still kill it)."""

    replies: queue.Queue[dict[str, Any]] = field(default_factory=queue.Queue)
    pid: int | None = None
    forked: threading.Event = field(default_factory=threading.Event)

    def next_reply(self, timeout_s: float | None = None,
                   stalled: Callable[[], bool] = lambda: False) -> dict[str, Any]:
        """The next reply, waited for in slices (see subprocess.WAIT_SLICE_S); queue.Empty after
        timeout_s, or as soon as `stalled()` says no reply can come."""
        for slice_s in wait_slices(timeout_s):
            try:
                return self.replies.get(timeout=slice_s)
            except queue.Empty:
                if stalled():
                    break
        return self.replies.get_nowait()


class Server:
    """One started fork server: its process, the replies it sends, the requests in flight."""

    def __init__(self, kind: ServerKind) -> None:
        """Start it; it dies with this process (PR_SET_PDEATHSIG), even mid-import. It carries
        the run's token, so the run's reaper finds it and its children too."""
        self.kind = kind
        self.stderr = tempfile.TemporaryFile()  # copied into the run's folder once that is known
        self.process = subprocess.Popen(
            [sys.executable, "-m", "experiment_runner.child.forkserver", *(["--dynamo"] if kind.dynamo else []),
             *(["--xla"] if kind.xla else [])],
            env={**server_environment(kind), RUN_TOKEN_ENV: RUN_TOKEN}, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
            start_new_session=True, close_fds=True, preexec_fn=_parent_death_signal(signal.SIGTERM),
        )
        self.ready = threading.Event()
        self.gone = False
        self.wedged: str | None = None  # why the launcher killed it, if it did
        self._write_lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._next_id = 0
        self._reader = threading.Thread(target=self._read_replies, name=f"forkserver-{kind.label}-replies",
                                        daemon=True)
        self._reader.start()

    def _read_replies(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            message = json.loads(line)
            if "ready" in message:
                self.ready.set()
                continue
            pending = self._pending.get(message["id"])
            if pending is not None:
                if "pid" in message:
                    pending.pid = message["pid"]
                    pending.forked.set()
                pending.replies.put(message)
        self.gone = True
        self.ready.set()
        for pending in list(self._pending.values()):
            pending.replies.put({"gone": True})

    def request(self, payload: dict[str, Any]) -> tuple[int, _Pending]:
        with self._write_lock:
            request_id = self._next_id
            self._next_id += 1
            pending = self._pending[request_id] = _Pending()
            assert self.process.stdin is not None
            try:
                self.process.stdin.write((json.dumps({**payload, "id": request_id}) + "\n").encode())
                self.process.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                self._pending.pop(request_id, None)
                raise ServerGone(f"the fork server is gone: {exc}") from exc
            if self.gone:  # its reader may have finished before this request was registered
                pending.replies.put({"gone": True})
        return request_id, pending

    def stopped(self) -> bool:
        """Whether the server is stopped (SIGSTOP, a debugger): it can neither fork nor reap."""
        try:
            state = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state in ("T", "t")

    def await_reply(self, pending: _Pending, owed: str) -> dict[str, Any]:
        """The reply the server owes now (`owed`, in words); if it is stopped or silent for
        SERVER_REPLY_S, it is killed (its forked children die with it) and {"gone": True} returned."""
        try:
            return pending.next_reply(SERVER_REPLY_S, stalled=self.stopped)
        except queue.Empty:
            how = "was stopped" if self.stopped() else f"was silent for {SERVER_REPLY_S:g} s"
            self.wedged = f"{how} when it owed {owed}; the runner killed it"
            signal_group(self.process.pid, signal.SIGKILL)
            return {"gone": True}

    def death(self) -> str:
        """How the server ended, in words (once it is gone: its stdout closed)."""
        if self.wedged is not None:
            return self.wedged
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "stopped replying"
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
            return f"was killed by {name}"
        return f"exited with status {code}"

    def wait_ready(self) -> bool:
        """Wait for its imports, in slices (see subprocess.WAIT_SLICE_S); False after SERVER_START_TIMEOUT_S."""
        return any(self.ready.wait(slice_s) for slice_s in wait_slices(SERVER_START_TIMEOUT_S)) or self.ready.is_set()

    def forget(self, request_id: int) -> None:
        self._pending.pop(request_id, None)

    def close(self, log: Path | None) -> str | None:
        """Stop it (it kills whatever children are left and exits); append its stderr to `log`.
        That copy is diagnostics: when it cannot be written (a full disk), the reason is
        returned, never raised over the run's own first error."""
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            signal_group(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self._reader.join(timeout=5)
        try:
            if log is not None:
                self.stderr.seek(0)
                with open(log, "ab") as handle:
                    handle.write(f"--- fork server ({self.kind.label}) ---\n".encode())
                    shutil.copyfileobj(self.stderr, handle)
        except OSError as exc:
            return f"the fork server's output was not saved to {log}: {exc.strerror or exc}"
        finally:
            self.stderr.close()
        return None


_prestarted: dict[ServerKind, Server] = {}


def default_kind(xla: bool, dynamo: bool = True) -> ServerKind:
    """The kind most experiments of a run need: the parent's own import-time settings
    (child_environment drops the XLA variables a shell may carry)."""
    return _kind({k: v for k, v in os.environ.items() if k not in INHERITED_XLA_VARS}, xla, dynamo)


def prestart(torch: bool = True, xla: bool = False, dynamo: bool = True) -> None:
    """Start the default server and/or the XLA one now, so that their imports overlap with the
    parent's own start-up; a kind no experiment asks for is stopped unused at the end."""
    for kind in [default_kind(False, dynamo)] * torch + [default_kind(True)] * xla:
        if kind not in _prestarted:
            try:
                _prestarted[kind] = Server(kind)
            except OSError:  # no temporary file for its stderr: the launcher tries again and says where
                return


class ForkServerLauncher(SubprocessLauncher):
    """Launches each experiment as a child of the fork server of its kind.

    Same contract as SubprocessLauncher: `launch` blocks until the experiment is over and
    returns its ChildOutcome; the timeout kills the child's whole process group. An
    experiment whose server cannot serve it (never became ready; died too often) runs as
    a plain subprocess, and its record says so.
    """

    name = "forkserver"

    def __init__(self, timeout_s: float | None = None, print_subprocess: bool = False,
                 extra_env: dict[str, str] | None = None, server_log: Path | None = None,
                 warn: Callable[[str], None] | None = None, preload_dynamo: bool = True) -> None:
        super().__init__(timeout_s, print_subprocess, extra_env)
        self.preload_dynamo = preload_dynamo
        self._server_log = server_log
        self._warn = warn or (lambda line: print(f"experiment_runner: warning: {line}", file=sys.stderr, flush=True))
        self._servers_lock = threading.Lock()
        self._servers: dict[ServerKind, Server] = dict(_prestarted)
        self._prestarted = list(_prestarted.values())
        self._deaths = 0
        _prestarted.clear()

    def server_for(self, kind: ServerKind) -> Server | None:
        """The server of `kind`, started now if none is yet or it died; None once servers
        died MAX_SERVER_DEATHS times in this run. Each death is one warning."""
        with self._servers_lock:
            server = self._servers.get(kind)
            if server is not None and (server.gone or server.wedged is not None):
                self._deaths += 1
                death = server.death()
                self._warn_unsaved(server.close(self._server_log))
                del self._servers[kind]
                if self._deaths >= MAX_SERVER_DEATHS:
                    self._warn(f"the fork server ({kind.label}) {death}, the {self._deaths}th server death in "
                               "this run; the remaining experiments run as plain subprocesses")
                else:
                    self._warn(f"the fork server ({kind.label}) {death}; the records of the experiments it "
                               "was running say so; starting a new one")
            if self._deaths >= MAX_SERVER_DEATHS:
                return None
            if kind not in self._servers:
                self._servers[kind] = Server(kind)
            return self._servers[kind]

    @property
    def servers(self) -> dict[ServerKind, Server]:
        return dict(self._servers)

    def launch(self, task: Task, log_path: Path, extra_env: dict[str, str] | None = None) -> ChildOutcome:
        # No experiment runs while a prestarted server is still importing: on a small host those
        # imports would take CPU from its timings and its compilation.
        for server in self._prestarted:
            server.wait_ready()
        task_path, env = self.prepare(task, extra_env)
        if task.experiment.config.xla is not None and any(env.get(name, "0") != "0" for name in FRESH_ONLY):
            return super().launch(task, log_path, extra_env)
        server = self.server_for(server_kind(task, env, self.preload_dynamo))
        if server is None:
            return super().launch(task, log_path, extra_env)
        # Waiting for the server's imports is the run's start-up, not the experiment's time.
        if not server.wait_ready():
            return super().launch(task, log_path, extra_env)
        if server.gone:  # it died starting or between experiments: a new one (or none) serves
            return self.launch(task, log_path, extra_env)
        oom_before, _ = oom_kill_count()
        start = time.monotonic()
        try:
            request_id, pending = server.request({"task": str(task_path), "log": str(log_path),
                                                  "env": env, "cwd": os.getcwd()})
        except ServerGone:
            return self.launch(task, log_path, extra_env)
        try:
            reply = server.await_reply(pending, "the fork of an experiment")
            if "pid" in reply:
                returncode, timed_out, interrupted, note = self._wait(reply["pid"], task, pending, log_path, server)
        except KeyboardInterrupt:  # cancelled (Ray), wherever it landed: the child must not outlive the launch
            if pending.forked.wait(LATE_PID_S) and pending.pid is not None:
                kill_experiment(pending.pid, task.attempt_id)
            raise
        finally:
            server.forget(request_id)
        if "pid" not in reply:  # the server died before forking this experiment
            return self.launch(task, log_path, extra_env)
        outcome = self.outcome(task, log_path, returncode, timed_out, interrupted, time.monotonic() - start,
                               oom_before, extra_env, launcher=self.name)
        outcome.launcher_note = note
        return outcome

    def _wait(self, pid: int, task: Task, pending: _Pending, log_path: Path,
              server: Server) -> tuple[int | None, bool, bool, str | None]:
        """Wait for the forked child: (returncode, timed_out, interrupted, what its server did)."""
        follower = None
        timed_out = False
        try:
            self.register(pid)
            follower = self.follow(log_path)
            try:
                reply = pending.next_reply(self.timeout_s)
            except queue.Empty:
                timed_out = True
                kill_experiment(pid, task.attempt_id, grace_s=KILL_GRACE_S)
                reply = server.await_reply(pending, "the status of the experiment it had timed out")
        finally:
            kill_experiment(pid, task.attempt_id)  # whatever the child left, in its group or not
            interrupted = self.unregister(pid)
            if follower is not None:
                follower.stop()
        if "status" in reply:
            return os.waitstatus_to_exitcode(reply["status"]), timed_out, interrupted, None
        if server.wedged is not None:
            return None, timed_out, interrupted, f"the fork server {server.wedged}"
        # The server died; the child died with it (its parent-death signal).
        return None, timed_out, interrupted, (f"the fork server {server.death()} while this experiment ran; "
                                              "the experiment was killed with it")

    def close(self) -> None:
        """Stop every server: each kills whatever children it has left and exits."""
        with self._servers_lock:
            servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            if server.gone:  # died after its last experiment began: not warned about yet
                self._warn(f"the fork server ({server.kind.label}) {server.death()}; the records of the "
                           "experiments it was running say so")
            self._warn_unsaved(server.close(self._server_log))
        super().close()

    def _warn_unsaved(self, problem: str | None) -> None:
        if problem is not None:
            self._warn(problem)

