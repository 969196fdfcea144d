"""The fork server process: imports torch once, then forks one experiment child per request.

It initializes no device, so nothing device-side is shared; each forked child becomes a
process of its own (new session, its own environment and log) and runs
`experiment_runner.child.main`, ending with os._exit(). The protocol and the parent's half
are in `experiment_runner.parent.launch.forkserver_launcher`.

With `--dynamo` it imports torch._dynamo too (compiled and training experiments import it,
a second on a small machine; an eager inference child never does), and with `--xla`
torch_xla too, but creates no PJRT client: torch_xla 2.9 picks the
device (PJRT_DEVICE), parses XLA_FLAGS and reads its dump and dtype variables when the
runtime starts or the value is first used, which is in the child, under the child's own
environment. What torch_xla does to the environment at import (defaults added to
XLA_FLAGS, TF_CPP_MIN_LOG_LEVEL, the libtpu path) is redone in the child over its own
variables, exactly as a fresh `import torch_xla` would.

Run as `python -m experiment_runner.child.forkserver [--dynamo] [--xla]` (by the parent only).
"""

from __future__ import annotations

import io
import json
import os
import select
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

from experiment_runner.core.process_groups import signal_group

# Modules worth having in memory before the fork: what every experiment imports anyway...
PRELOAD = ("torch", "numpy", "experiment_runner.child.main")
# ... and what compiled and training experiments import (torch.compile, the optimizers, the loss).
DYNAMO_PRELOAD = ("torch._dynamo",)
# ... and for XLA experiments, what their children import: the runtime, metrics, the
# openxla dynamo backend. None of it starts the PJRT runtime (checked after preloading).
XLA_PRELOAD = ("torch_xla", "torch_xla.core.xla_model", "torch_xla.debug.metrics", "torch_xla.backends",
               "torch_xla._dynamo.dynamo_bridge", "experiment_runner.child.devices.xla")


def _send(fd: int, message: dict[str, Any]) -> None:
    os.write(fd, (json.dumps(message) + "\n").encode())


def _run_child(request: dict[str, Any], close_fds: list[int]) -> None:
    """In the forked child: become an experiment process, run the worker, never return."""
    code = 1
    try:
        os.setsid()
        _die_with_parent()
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for fd in close_fds:
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        if "torch_xla" in sys.modules:
            redo_torch_xla_environment()
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
        from experiment_runner.child import main as child_main

        code = child_main.main([request["task"]])
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


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this child if the server dies: an experiment whose server is
    gone has no one to report it, and the parent records it as killed with the server."""
    import ctypes

    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the server died before the prctl
        os._exit(1)


def serve(xla: bool = False, dynamo: bool = True) -> int:
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
    for name in PRELOAD + (DYNAMO_PRELOAD if dynamo else ()) + (XLA_PRELOAD if xla else ()):
        __import__(name)
    if _cuda_driver_initialized():
        print("forkserver: the CUDA driver was initialized while preloading; refusing to fork", file=sys.stderr)
        return 1
    if xla:
        refusal = _xla_unforkable()
        if refusal:
            print(f"forkserver: {refusal}; refusing to fork", file=sys.stderr)
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
            signal_group(pid, signal.SIGKILL)
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
                    signal_group(pid, signal.SIGKILL)
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
            # Its group does not outlive it: what it left there dies now, here, even when the
            # launcher that would clean up after it is gone (a Ray worker ended with its job).
            signal_group(pid, signal.SIGKILL)
            if request_id is not None and not eof:
                _send(replies_fd, {"id": request_id, "status": status})


def redo_torch_xla_environment() -> None:
    """What `import torch_xla` (2.9) writes into os.environ, done again over the child's own
    variables, in the same order; each step only adds what the environment lacks. Missing
    one shows in tests/child/test_xla_forkserver.py, which compares whole environments."""
    import torch_xla
    from torch_xla import runtime
    from torch_xla.experimental import plugins

    torch_xla._setup_default_env()  # TF_CPP_MIN_LOG_LEVEL, GRPC_VERBOSITY, libtpu's flags
    torch_xla._setup_xla_flags()  # --xla_cpu_enable_fast_math=false unless XLA_FLAGS says
    torch_xla._check_deprecated_env_var()
    torch_xla._setup_tpu_vm_library_path()
    if os.getenv("XLA_REGISTER_INSTALLED_PLUGINS", "1") == "1":
        plugins.use_dynamic_plugins()  # PJRT_DYNAMIC_PLUGINS=1
    runtime._maybe_select_default_device()  # PJRT_DEVICE where the child has none


def _xla_unforkable() -> str | None:
    """Why children forked from here would not behave like fresh torch_xla processes, if so."""
    import torch_xla

    if torch_xla._XLAC._xla_runtime_is_initialized():
        return "the PJRT runtime was started while preloading"
    try:
        redo_torch_xla_environment()  # a rehearsal: this torch_xla has every step
    except (AttributeError, ImportError, RuntimeError) as exc:
        return f"torch_xla {torch_xla.__version__} cannot redo its import-time environment: {exc}"
    return None


# CUresult of a driver call made before cuInit.
CUDA_ERROR_NOT_INITIALIZED = 3


def _cuda_driver_initialized() -> bool:
    """Whether cuInit ran in this process: its children could not use CUDA then.

    Merely loading libcuda is harmless, and some torch builds (2.11+cu130) load it at import;
    so ask the loaded driver itself: cuDeviceGetCount answers CUDA_ERROR_NOT_INITIALIZED, and
    initializes nothing, until cuInit has run."""
    try:
        if "libcuda.so" not in Path("/proc/self/maps").read_text():
            return False
    except OSError:
        return False
    import ctypes

    count = ctypes.c_int()
    try:
        result = ctypes.CDLL("libcuda.so.1").cuDeviceGetCount(ctypes.byref(count))
    except (OSError, AttributeError):
        return True  # a libcuda we cannot ask: assume the worst
    return result != CUDA_ERROR_NOT_INITIALIZED


if __name__ == "__main__":
    code = serve(xla="--xla" in sys.argv[1:], dynamo="--dynamo" in sys.argv[1:])
    # Nothing of the server needs an orderly interpreter shutdown once serve() returns (its
    # children are ended, its replies written unbuffered), and tearing down the preloaded torch
    # took 0.6-1.3 s on 2 cores that every run's close() waited for.
    sys.stderr.flush()
    os._exit(code)
