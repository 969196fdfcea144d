"""Cold versus warm compilation cache, per experiment (the idea of PyTorch's cachebench).

Both measurements are fresh Python processes started one after the other on one cache
folder (TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR under the experiment's scratch
folder) that starts empty: the cold probe compiles from nothing and fills it; the warm
probe starts with nothing in memory and everything on disk, which is what a user
re-running a job gets. A rerun in the same process after torch._dynamo.reset() would
flatter the cache: loaded kernel modules and memoized hashes would survive in memory.

Each probe loads the model, times the first iteration and PROBE_STEADY_ITERATIONS more,
and reports compile_time_s as the timing loop does (first minus the steady median) with
dynamo's own accounting beside it (its cache hit and miss counts show whether the warm
probe really hit). Run as `python -m experiment_runner.child.instrument.cachebench TASK_JSON OUT_JSON`.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from time import perf_counter
from typing import Any, Callable

from experiment_runner.core.logs import read_log_tail
from experiment_runner.core.protocol import Task

PROBE_STEADY_ITERATIONS = 3
PHASES = ("cold", "warm")
METHOD = "fresh process per measurement; cold on an empty inductor/triton cache folder, warm on the folder it filled"


class CacheBenchError(RuntimeError):
    pass


def probe(task: Task) -> dict[str, Any]:
    """In this (fresh) process: load the model, compile on the first iteration, time a few more."""
    start = perf_counter()
    import torch  # noqa: F401 - timed apart: start-up cost, not compilation

    from experiment_runner.child.devices import runtime_for
    from experiment_runner.child.driver import (
        ExperimentDriver,
        apply_matmul_precision,
    )
    from experiment_runner.child.instrument.dynamo import dynamo_compile_summary
    from experiment_runner.child.plugins import import_plugins

    import_plugins()
    import_s = perf_counter() - start
    device = runtime_for(task.experiment.config)
    apply_matmul_precision(task.options)
    driver = ExperimentDriver(task.experiment, task.options, device, Path(task.artifacts_dir))
    step = driver.make_step(driver.load())
    times: list[float] = []
    for _ in range(1 + PROBE_STEADY_ITERATIONS):
        device.reset_rng(task.options.seed)
        device.synchronize()
        t0 = perf_counter()
        device.run_iteration(step)
        device.synchronize()
        times.append(perf_counter() - t0)
    steady = statistics.median(times[1:])
    return {
        "first_iter_time_s": times[0], "steady_iter_time_s": steady,
        "compile_time_s": max(0.0, times[0] - steady), "import_s": import_s,
        "dynamo_compile": dynamo_compile_summary() if task.experiment.config.dynamo is not None else None,
    }


def cache_environment(cache_dir: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The probes' environment: the parent's, with the compiler caches pointed at cache_dir."""
    env = dict(os.environ if base is None else base)
    env.update({"TORCHINDUCTOR_CACHE_DIR": str(cache_dir / "inductor"), "TRITON_CACHE_DIR": str(cache_dir / "triton"),
                "PYTHONUNBUFFERED": "1"})
    return env


def _tail(path: Path, lines: int = 8) -> str:
    return read_log_tail(path, lines=lines)


def run_cache_bench(task: Task, add_artifact: Callable[[str, Path], None],
                    python: str = sys.executable) -> dict[str, Any]:
    """Cold then warm probe for one experiment; returns metrics, reports each file as it appears
    (so a failed probe's log is listed too).

    Probe outputs stay in <artifacts_dir>/cachebench/; the cache itself lives under
    scratch/ and goes when the launcher cleans up. Experiments without a dynamo backend
    compile nothing through these caches and are reported as skipped.
    """
    if task.experiment.config.dynamo is None:
        return {"cache_bench": {"skipped": "no dynamo backend: nothing compiles through the inductor/triton caches"}}
    artifacts_dir = Path(task.artifacts_dir)
    out_dir = artifacts_dir / "cachebench"
    out_dir.mkdir(parents=True, exist_ok=True)
    cache_dir = artifacts_dir / "scratch" / "cachebench"
    shutil.rmtree(cache_dir, ignore_errors=True)
    task_path = out_dir / "task.json"
    task_path.write_text(json.dumps(task.to_dict()))
    env = cache_environment(cache_dir)
    results: dict[str, dict[str, Any]] = {}
    for phase in PHASES:
        result_path, log_path = out_dir / f"{phase}.json", out_dir / f"{phase}.log"
        started = perf_counter()
        with open(log_path, "wb") as log:
            rc = subprocess.run([python, "-m", "experiment_runner.child.instrument.cachebench", str(task_path), str(result_path)],
                                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT).returncode
        add_artifact(f"cachebench_{phase}_log", log_path)
        if rc != 0 or not result_path.exists():
            raise CacheBenchError(f"the {phase} probe exited with status {rc}: {_tail(log_path)}")
        results[phase] = {**json.loads(result_path.read_text()), "process_wall_s": perf_counter() - started}
        add_artifact(f"cachebench_{phase}", result_path)
    cold, warm = results["cold"]["compile_time_s"], results["warm"]["compile_time_s"]
    return {
        "cold_compile_time_s": cold,
        "warm_compile_time_s": warm,
        "cache_bench": {**results, "warm_speedup_pct": (1 - warm / cold) * 100 if cold > 0 else None,
                        "method": METHOD},
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    task = Task.read(Path(argv[0]))
    Path(argv[1]).write_text(json.dumps(probe(task), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
