"""The launcher: one fresh child process per experiment, and exactly one record for it.

The child runs in its own session (process group) with its own environment and a log
file for its output. On timeout the whole group is killed, grandchildren included; after
every child, whatever is left of its group is killed too. The record is built here from
the child's result file, or, when the child died without one, from its exit status and
the tail of its log.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable

from experiment_runner.matrix import Experiment
from experiment_runner.protocol import RunOptions, Task, read_result
from experiment_runner.results import SCHEMA_VERSION, VERIFICATION_CODES
from experiment_runner.stats import summarize

# SIGTERM first so a child can flush; SIGKILL after this grace period.
KILL_GRACE_S = 2.0
LOG_TAIL_LINES = 15
# Lines that identify a memory exhaustion in a log when the child died without a result.
_OOM_MARKERS = ("MemoryError", "out of memory", "OutOfMemoryError", "Cannot allocate memory")

# Variables a parent shell may carry that would silently change an experiment.
_INHERITED_XLA_VARS = ("XLA_FLAGS", "PJRT_DEVICE", "XLA_USE_BF16", "XLA_USE_FP16", "XLA_DOWNCAST_BF16",
                       "XLA_SAVE_TENSORS_FMT", "XLA_SAVE_TENSORS_FILE", "XLA_DISABLE_FUNCTIONALIZATION")


@dataclass
class ChildOutcome:
    """What happened to one child, seen from the parent."""

    result: dict[str, Any] | None
    returncode: int | None
    timed_out: bool = False
    interrupted: bool = False
    wall_s: float = 0.0
    log_tail: str = ""
    launcher: str = "subprocess"
    cuda_visible_devices: str | None = None  # the GPU the child was pinned to, if any


def child_environment(task: Task, base: dict[str, str] | None = None,
                      extra: dict[str, str] | None = None) -> dict[str, str]:
    """The experiment's environment: inherited XLA settings cleaned, then set per experiment.

    Compiler caches and temporary files go to the experiment's own scratch folder, so
    every experiment compiles cold and leaves nothing behind in the user's home.
    """
    env = dict(os.environ if base is None else base)
    for name in _INHERITED_XLA_VARS:
        env.pop(name, None)
    config = task.experiment.config
    scratch = Path(task.artifacts_dir) / "scratch"
    env.update({
        "PYTHONUNBUFFERED": "1",
        "PYTHONFAULTHANDLER": "1",  # a segfault leaves the Python stack in the log
        "TORCHINDUCTOR_CACHE_DIR": str(scratch / "inductor"),
        "TRITON_CACHE_DIR": str(scratch / "triton"),
        "TMPDIR": str(scratch / "tmp"),
    })
    if config.xla is not None:
        from experiment_runner.environment import PJRT_DEVICE

        env["PJRT_DEVICE"] = PJRT_DEVICE[config.accelerator]
        if config.xla_flags:
            env["XLA_FLAGS"] = config.xla_flags
        from experiment_runner.xla import artifact_environment

        env.update(artifact_environment(task.options, task.artifacts_dir, env.get("XLA_FLAGS")))
    env.update(extra or {})
    return env


def kill_process_group(pgid: int, grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM the group, then SIGKILL whatever is still there after grace_s."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def read_log_tail(path: Path, lines: int = LOG_TAIL_LINES, max_bytes: int = 16384) -> str:
    """The last lines of a log, reading only its end (a child may have written gigabytes)."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - max_bytes))
            data = handle.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").rstrip().splitlines()[-lines:])


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
    """Starts each experiment as `python -m experiment_runner.worker` in a new session.

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
        return [sys.executable, "-m", "experiment_runner.worker", str(task_path)]

    def prepare(self, task: Task, extra_env: dict[str, str] | None = None) -> tuple[Path, dict[str, str]]:
        """Write the task file and build the child's environment and scratch folders."""
        task_path = task.write()
        env = child_environment(task, extra={**self.extra_env, **(extra_env or {})})
        (Path(task.artifacts_dir) / "scratch" / "tmp").mkdir(parents=True, exist_ok=True)
        return task_path, env

    def follow(self, log_path: Path) -> LogFollower | None:
        return LogFollower(log_path, sys.stdout) if self.print_subprocess else None

    def launch(self, task: Task, log_path: Path, extra_env: dict[str, str] | None = None) -> ChildOutcome:
        task_path, env = self.prepare(task, extra_env)
        start = time.monotonic()
        timed_out = False
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                self.command(task_path), env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if self.print_subprocess else log,
                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=self._preexec,
            )
            self.register(proc.pid)
            tee = None
            if self.print_subprocess:
                tee = threading.Thread(target=_tee, args=(proc.stdout, log, sys.stdout), daemon=True)
                tee.start()
            try:
                proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                kill_process_group(proc.pid, grace_s=KILL_GRACE_S if timed_out else 0.0)
                proc.wait()
                interrupted = self.unregister(proc.pid)
            if tee is not None:
                tee.join(timeout=5)
        wall = time.monotonic() - start
        result = None if (timed_out or interrupted) else read_result(task.result_path)
        return ChildOutcome(result=result, returncode=proc.returncode, timed_out=timed_out,
                            interrupted=interrupted, wall_s=wall, log_tail=read_log_tail(log_path),
                            launcher=self.name, cuda_visible_devices=(extra_env or {}).get("CUDA_VISIBLE_DEVICES"))

    def close(self) -> None:
        """Release what the launcher holds (nothing for plain subprocesses)."""


def classify_death(outcome: ChildOutcome, timeout_s: float | None) -> tuple[str, dict[str, Any]]:
    """Status and error block for a child that left no result of its own."""
    rc = outcome.returncode
    error: dict[str, Any] = {"type": None, "message": "", "traceback_tail": outcome.log_tail,
                             "returncode": rc, "signal": None}
    if rc is not None and rc < 0:
        error["signal"] = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
    if outcome.interrupted:
        error.update(type="Interrupted", message="interrupted by the user (SIGINT); the child was killed")
        return "interrupted", error
    if outcome.timed_out:
        error.update(type="Timeout", message=f"no result within --subprocess-timeout={timeout_s}s; "
                                             "the child's process group was killed")
        return "timeout", error
    if rc == -signal.SIGKILL:
        error.update(type="Killed", message="killed by SIGKILL from outside the runner, "
                                            "most likely the kernel's out-of-memory killer")
        return "oom", error
    if any(marker in outcome.log_tail for marker in _OOM_MARKERS):
        error.update(type="OutOfMemory", message="the child died out of memory")
        return "oom", error
    if rc is not None and rc < 0:
        error.update(type="Signal", message=f"the child died from signal {error['signal']}")
    else:
        error.update(type="Exit", message=f"the child exited with status {rc} without a result")
    return "crashed", error


@dataclass
class RecordContext:
    """Run-wide fields every record carries."""

    run_id: str
    options: RunOptions
    output_dir: Path
    host_environment: dict[str, Any] = field(default_factory=dict)


def build_record(ctx: RecordContext, exp: Experiment, outcome: ChildOutcome | None = None,
                 skip_reason: str | None = None, artifacts_dir: Path | None = None,
                 timeout_s: float | None = None, source: str | None = None) -> dict[str, Any]:
    """The one record of an experiment, from its child's result or its death."""
    config = exp.config
    result = outcome.result if outcome is not None else None
    if skip_reason is not None:
        status, error = "skipped", {"type": "Skipped", "message": skip_reason}
    elif result is not None:
        status, error = result["status"], result.get("error")
        if error is not None:
            error = {**error, "returncode": outcome.returncode, "signal": None}
    else:
        assert outcome is not None
        status, error = classify_death(outcome, timeout_s)
    result = result or {}
    code = result.get("verification_code") or (
        "VERIFIER_DIDNT_RUN" if ctx.options.verify and status not in ("ok", "skipped") else "VERIFIER_SKIPPED")
    assert code in VERIFICATION_CODES, code
    relative = (lambda p: os.path.relpath(p, ctx.output_dir)) if artifacts_dir is not None else None
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": ctx.run_id,
        "experiment_id": exp.experiment_id,
        "model": {"suite_name": exp.suite_name, "model_name": exp.model_name,
                  "source": result.get("source") or source},
        "experiment": {
            "accelerator": config.accelerator,
            "accelerator_model": result.get("accelerator_model"),
            "xla": config.xla,
            "xla_flags": config.xla_flags,
            "dynamo": config.dynamo,
            "torch_xla2": config.torch_xla2,
            "keep_model_data_on_cuda": False,
            # torch_xla's functionalization layer stays on (XLA_DISABLE_FUNCTIONALIZATION is cleaned).
            "enable_functionalization": config.xla is not None,
            "test": config.test,
            "batch_size": result.get("batch_size", config.batch_size),
            "precision": result.get("precision", config.precision),
        },
        "repeat": ctx.options.repeat,
        "iterations_per_run": ctx.options.iterations_per_run,
        "metrics": result.get("metrics", {}),
        "stats": {"per_iter_time": summarize(result.get("metrics", {}).get("per_iter_time", []))},
        "status": status,
        "error": error,
        "verification_code": code,
        "verification": result.get("verification"),
        "artifacts": {
            **({"dir": relative(artifacts_dir), "log": relative(artifacts_dir / "child.log")}
               if relative is not None and outcome is not None else {}),
            **{k: os.path.join(relative(artifacts_dir), v) for k, v in result.get("artifacts", {}).items()
               if relative is not None},
        },
        "timings": {**result.get("timings", {}), **({"wall_s": outcome.wall_s} if outcome else {})},
        "placement": {"launcher": outcome.launcher if outcome else None,
                      "cuda_visible_devices": outcome.cuda_visible_devices if outcome else None},
        "environment": result.get("environment") or ctx.host_environment,
        "timestamp": time.time(),
    }


def scratch_cleanup(artifacts_dir: Path) -> None:
    """Compiler caches are large and per experiment: drop them once the record is written."""
    shutil.rmtree(Path(artifacts_dir) / "scratch", ignore_errors=True)
