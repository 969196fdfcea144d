"""--max-parallel: experiments side by side, one per GPU with CUDA_VISIBLE_DEVICES pinned per
child, CPU experiments serial unless --parallel-cpu; records still whole, one per experiment,
written by the parent alone.

This host has no GPU, so the GPU case simulates one: a host-capabilities cache that claims
two GPUs, and --gpu-ids naming them. The children then fail to find CUDA (status error),
but not before a plugin (faulty_suite's trace) noted which GPU they were pinned to and when.
"""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import pytest
from conftest import assert_no_process_left, cli_env, new_marker

pytestmark = pytest.mark.e2e

DUMMY = ("--suite-name=dummy", "--accelerator=cpu", "--dynamo=None", "--repeat=3")


def intervals(records: list[dict]) -> list[tuple[float, float]]:
    return [(r["timings"]["finished_at"] - r["timings"]["wall_s"], r["timings"]["finished_at"]) for r in records]


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return max(a[0], b[0]) < min(a[1], b[1])


def test_parallel_cpu_runs_side_by_side(run_cli) -> None:
    run = run_cli(*DUMMY, "--max-parallel=2", "--parallel-cpu")
    assert run.returncode == 0, run.stderr
    records = run.records()
    assert sorted(r["experiment"]["test"] for r in records) == ["eval", "train"]
    assert all(r["status"] == "ok" and r["placement"]["cuda_visible_devices"] is None for r in records)
    assert overlap(*intervals(records))
    assert_no_process_left(run.marker)


def test_cpu_experiments_stay_serial_by_default(run_cli) -> None:
    run = run_cli(*DUMMY, "--max-parallel=2")
    assert run.returncode == 0, run.stderr
    records = run.records()
    assert len(records) == 2 and all(r["status"] == "ok" for r in records)
    assert not overlap(*intervals(records))


def fake_two_gpus(env: dict[str, str]) -> None:
    """Write the capabilities cache this environment will read, claiming two GPUs."""
    code = ("from experiment_runner.parent.host import _cache_dir, _cache_key, probe_capabilities\n"
            "probe_capabilities()\n"
            "print(_cache_dir() / f'capabilities-{_cache_key()}.json')")
    path = Path(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                               check=True).stdout.strip())
    caps = json.loads(path.read_text())
    caps.update(cuda=True, cuda_device_count=2)
    path.write_text(json.dumps(caps))


def test_one_experiment_per_gpu_pinned(run_cli, tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    cache = tmp_path / "cache"
    extra = {"EXPERIMENT_RUNNER_PLUGINS": "faulty_suite", "FAULTY_TRACE_DIR": str(traces),
             "XDG_CACHE_HOME": str(cache), "CUDA_VISIBLE_DEVICES": ""}
    fake_two_gpus(cli_env(cache, new_marker("probe"), {**extra, "FAULTY_TRACE_DIR": ""}))
    run = run_cli("--suite-name=faulty", "--filter=^quick_0[0-3]$", "--accelerator=cuda", "--dynamo=None",
                  "--test=eval", "--repeat=1", "--max-parallel=2", "--gpu-ids=3,5", env=extra)
    assert run.returncode == 0, run.stderr
    records = run.records()
    assert sorted(r["model"]["model_name"] for r in records) == [f"quick_0{i}" for i in range(4)]
    assert {r["placement"]["cuda_visible_devices"] for r in records} <= {"3", "5"}

    seen = [json.loads(p.read_text()) for p in traces.glob("*.json")]
    assert len(seen) == 4  # one child per experiment, each saw exactly one pinned GPU
    assert {t["cuda_visible_devices"] for t in seen} == {"3", "5"}
    windows = [((t["start"], t["end"]), t["cuda_visible_devices"]) for t in seen]
    pairs = [(a, b) for a, b in combinations(windows, 2) if overlap(a[0], b[0])]
    assert pairs, "no two experiments ran at the same time"
    assert all(a[1] != b[1] for a, b in pairs), "two experiments shared a GPU"
    for t in seen:  # never more than --max-parallel at once
        assert sum(overlap((t["start"], t["start"] + 1e-3), w) for w, _ in windows) <= 2
    assert_no_process_left(run.marker)
