"""`faulty`: test-only models that fail in every way a real benchmark can, to prove the runner
still writes exactly one record per experiment and leaves no process behind.

Registered for the children with EXPERIMENT_RUNNER_SUITES="faulty=faulty_suite:FaultySuite"
and this folder on PYTHONPATH. Imported as a plugin (EXPERIMENT_RUNNER_PLUGINS=faulty_suite)
with FAULTY_TRACE_DIR set, it records where and when each child ran, before any device
is touched.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from benchmark_models.base import LoadRequest, ModelNotFound, Suite
from benchmark_models.model import BenchmarkModel
from experiment_runner.core.protocol import AOT_PACKAGE

TRACE_DIR_ENV = "FAULTY_TRACE_DIR"
PACE_S = 0.004
# Where models that behave differently on a retry count their attempts.
STATE_DIR_ENV = "FAULTY_STATE_DIR"
# What the segfault model prints before it dies, as a native library's last words.
NATIVE_LAST_WORDS = "free(): invalid pointer"
# A grandchild that survives SIGTERM: only a SIGKILL to the whole group ends it.
_STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"


def _tiny(request: LoadRequest, forward: Callable[[Any], Any] | None = None, batch_size: int = 2) -> BenchmarkModel:
    import torch

    module = torch.nn.Linear(4, 2).to(request.device)
    inputs = torch.randn(batch_size, 4, device=request.device)
    wrapped = (lambda m, args, kwargs: forward(m(*args))) if forward is not None else None
    return BenchmarkModel(module=module, args=(inputs,), batch_size=batch_size, source="builtin", forward=wrapped)


def _paced_clock(pace: float) -> Callable[[Any], Any]:
    """A paced model's forward: instead of sleeping, it moves the clock the runner's samples are
    read on (the child driver's perf_counter) forward by `pace`, and by a fixed 0.01% more on each
    of seven calls in turn, so that samples are distinct as real ones are (a rank test has no ties
    to lose power on). Its samples are then fixed, whatever else runs on the host: a test comparing
    runs of it judges what the runner did with them, not the scheduler's latency that day."""
    from experiment_runner.child import driver

    now, calls = [0.0], [0]
    driver.perf_counter = lambda: now[0]

    def forward(output: Any) -> Any:
        now[0] += pace * (1 + 1e-4 * (calls[0] % 7))
        calls[0] += 1
        return output

    return forward


def _trace_batch(output: Any) -> Any:
    """batched's forward: append the batch it ran at to FAULTY_BATCH_TRACE, one line per call."""
    with open(os.environ["FAULTY_BATCH_TRACE"], "a") as trace:
        trace.write(f"{output.shape[0]}\n")
    return output


def _exhaust_memory(_: Any) -> Any:
    """Allocate until MemoryError under an address-space limit set here, in the child, so
    the machine never feels it."""
    with open("/proc/self/statm") as handle:
        size = int(handle.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (size + (256 << 20), resource.RLIM_INFINITY))
    chunks = []
    try:
        while True:
            chunks.append(bytearray(32 << 20))
    except MemoryError:
        chunks.clear()  # room for the worker to format the error
        raise


def _segfault(_: Any) -> Any:
    # as glibc does before it aborts: its own message, straight to file descriptor 2
    os.write(2, NATIVE_LAST_WORDS.encode() + b"\n")
    os.kill(os.getpid(), signal.SIGSEGV)


def _exit3(_: Any) -> Any:
    os._exit(3)


def _raise(_: Any) -> Any:
    raise ValueError("injected failure in the middle of a run")


def _attempt(name: str) -> int:
    """1 in a model's first child process in this test, 2 in its second, ...

    Counted per process, not per load: the verifier loads the model again in the same child.
    """
    path = os.path.join(os.environ[STATE_DIR_ENV], f"{name}.attempts")
    with open(path, "a+") as handle:
        handle.seek(0)
        pids = handle.read().split()
        if str(os.getpid()) not in pids:
            handle.write(f"{os.getpid()}\n")
            pids.append(str(os.getpid()))
        return pids.index(str(os.getpid())) + 1


def _in_fp64(fault: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Behave normally, except in the verifier's float64 reference run. The output holds a
    one-element leaf (a mean), whose scalar rule needs that run."""
    import torch

    def forward(output: Any) -> Any:
        if output.dtype == torch.float64:
            fault(output)
        return output, output.mean()
    return forward


def _sleep_forever(_: Any) -> Any:
    while True:
        time.sleep(1)


def _escape_and_hang(_: Any) -> Any:
    """A descendant that leaves the experiment's process group (setsid), then a hang."""
    subprocess.Popen([sys.executable, "-c", _STUBBORN], start_new_session=True)
    _sleep_forever(None)


def _kill_fork_server(_: Any) -> Any:
    """Kill the fork server this child was forked from (refuses under any other parent)."""
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as handle:
        if b"experiment_runner.child.forkserver" not in handle.read():
            raise RuntimeError("kill_server needs --launcher=forkserver")
    os.kill(os.getppid(), signal.SIGKILL)
    _sleep_forever(None)


def _linger(request: LoadRequest) -> BenchmarkModel:
    """A non-daemon thread that never ends: a Python exit would wait for it forever."""
    import threading

    threading.Thread(target=_sleep_forever, args=(None,), name="lingering", daemon=False).start()
    return _tiny(request)


def _hang_at_exit(request: LoadRequest) -> BenchmarkModel:
    """Publish the final result, then never exit (as a child stuck in a driver's teardown)."""
    os._exit = lambda code: _sleep_forever(None)  # type: ignore[assignment]
    return _tiny(request)


def _aot_package_then_hang(request: LoadRequest) -> BenchmarkModel:
    """As an AOT Inductor experiment's child once its package exists: the package in its
    attempt's folder (where child.driver puts it; it holds this process's pid, for the test
    that kills it) and AOT Inductor's unpacked copy in TMPDIR, then a hang. Later attempts
    (counted in FAULTY_STATE_DIR) run normally."""
    if _attempt("aot_hang") > 1:
        return _tiny(request)
    tmp = Path(os.environ["TMPDIR"])
    (tmp / "aotinductor_unpacked").mkdir(parents=True, exist_ok=True)
    (tmp / "aotinductor_unpacked" / "model.so").write_bytes(b"\0" * 4096)
    package = tmp.parent.parent / AOT_PACKAGE
    partial = package.with_name(package.name + ".partial")
    partial.write_text(str(os.getpid()))
    os.replace(partial, package)
    _sleep_forever(None)


def _uncopyable(request: LoadRequest) -> BenchmarkModel:
    """A module whose __deepcopy__ raises (one holding a handle that cannot be copied)."""
    model = _tiny(request)

    def refuse(memo: dict) -> Any:
        raise TypeError("cannot deepcopy this module's handle")

    model.module.__deepcopy__ = refuse
    return model


def _hang(_: Any) -> Any:
    subprocess.Popen([sys.executable, "-c", _STUBBORN])
    while True:
        time.sleep(1)


class FaultySuite(Suite):
    name = "faulty"
    source = "builtin"

    FAULTS = ("big_output", "exit3", "grandchild", "hang", "oom", "raise_load", "raise_run", "segfault")
    # escape_hang: a hang whose descendant left the process group; sigkill: killed from
    # outside, no OOM; verify_*: die in the float64 verification run, after timing;
    # retry_*: the first attempt fails one way (raises; hangs verifying), every retry segfaults;
    # linger: a non-daemon thread outlives the work; exit_hang: never exits after its result;
    # aot_hang: hangs with an AOT Inductor package written (its first attempt only); uncopyable: its
    # module's __deepcopy__ raises.
    MORE_FAULTS = ("kill_server", "retry_raise", "retry_hang_verify", "escape_hang", "sigkill",
                   "verify_segfault", "verify_hang", "linger", "exit_hang", "aot_hang", "uncopyable")
    QUICK = tuple(f"quick_{i:02d}" for i in range(20))
    # paced_*: each forward takes FAULTY_PACE_<NAME> seconds (default PACE_S) on the clock the runner's samples
    # are read on, exactly (_paced_clock): a model slowed on purpose, and nothing else;
    # drift: each forward sleeps FAULTY_DRIFT_PACE (default PACE_S) x (1 + FAULTY_DRIFT_RATE x seconds since
    # FAULTY_DRIFT_T0);
    # batched: batch size 10 (or --batch-size), each forward appends the batch it ran at to FAULTY_BATCH_TRACE.
    PACED = ("paced_a", "paced_b")
    NAPS = tuple(f"nap_{i:02d}" for i in range(8))

    def model_names(self) -> list[str]:
        return sorted(self.FAULTS + self.MORE_FAULTS + self.QUICK + self.NAPS + self.PACED + ("drift", "batched"))

    def load(self, request: LoadRequest) -> BenchmarkModel:
        name = request.model_name
        if name.startswith("quick_"):
            return _tiny(request)
        if name == "drift":  # a host slowing down steadily: every call costs more as time goes on
            start, rate = float(os.environ.get("FAULTY_DRIFT_T0", "0")), float(os.environ.get("FAULTY_DRIFT_RATE", "0"))
            pace = float(os.environ.get("FAULTY_DRIFT_PACE", PACE_S))
            return _tiny(request, lambda output: (time.sleep(pace * (1 + rate * max(0.0, time.time() - start))),
                                                  output)[1])
        if name == "batched":
            return _tiny(request, _trace_batch, batch_size=request.batch_size or 10)
        if name in self.PACED:
            return _tiny(request, _paced_clock(float(os.environ.get(f"FAULTY_PACE_{name.upper()}", PACE_S))))
        if name.startswith("nap_"):
            time.sleep(0.4)
            return _tiny(request)
        if name == "raise_load":
            raise RuntimeError("injected failure while loading the model")
        if name == "big_output":
            chunk = "x" * 1023 + "\n"
            for stream in (sys.stdout, sys.stderr):
                for _ in range(10 * 1024):
                    stream.write(chunk)
                stream.flush()
            return _tiny(request)
        if name == "linger":
            return _linger(request)
        if name == "exit_hang":
            return _hang_at_exit(request)
        if name == "aot_hang":
            return _aot_package_then_hang(request)
        if name == "uncopyable":
            return _uncopyable(request)
        if name == "grandchild":
            subprocess.Popen([sys.executable, "-c", _STUBBORN])
            return _tiny(request)
        if name.startswith("retry_"):
            if _attempt(name) > 1:
                _segfault(None)
            return _tiny(request, _raise if name == "retry_raise" else _in_fp64(_sleep_forever))
        forwards = {"raise_run": _raise, "segfault": _segfault, "exit3": _exit3, "oom": _exhaust_memory,
                    "hang": _hang, "escape_hang": _escape_and_hang, "kill_server": _kill_fork_server,
                    "sigkill": lambda _: os.kill(os.getpid(), signal.SIGKILL),
                    "verify_segfault": _in_fp64(_segfault), "verify_hang": _in_fp64(_sleep_forever)}
        if name not in forwards:
            raise ModelNotFound(name)
        return _tiny(request, forwards[name])


def _trace() -> None:
    """As a plugin: note this child's pid, GPU pinning and start time, then linger a
    little so that children running side by side overlap measurably."""
    folder = os.environ.get(TRACE_DIR_ENV)
    if not folder or "torch" not in sys.modules:  # the runner's parent never imports torch
        return
    start = time.time()
    time.sleep(1.0)
    record = {"pid": os.getpid(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
              "start": start, "end": time.time()}
    with open(os.path.join(folder, f"{os.getpid()}.json"), "w") as handle:
        json.dump(record, handle)


_trace()


class SizedSuite(Suite):
    """`sized`: a model whose weights cannot fit any host (2^40 parameters, 4 TiB in float32)
    and a small one; loads without side effects, so the child may size them on the meta device."""

    name = "sized"
    source = "builtin"
    meta_buildable = True

    def model_names(self) -> list[str]:
        return ["huge", "small"]

    def load(self, request: LoadRequest) -> BenchmarkModel:
        import torch

        if request.model_name == "small":
            return _tiny(request)
        if request.model_name != "huge":
            raise ModelNotFound(request.model_name)
        module = torch.nn.Embedding(1 << 20, 1 << 20, device=request.device)
        inputs = torch.zeros(2, 4, dtype=torch.long, device=request.device)
        return BenchmarkModel(module=module, args=(inputs,), batch_size=2, source=self.source)
