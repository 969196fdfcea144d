"""One run per GPU on a host: a run with cuda experiments holds a lock per GPU it may use for its
whole life, so two nights never time on one GPU. This host has no GPU: the capabilities cache
claims two (test_parallel.fake_two_gpus), and --gpu-ids names them."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from conftest import cli_env, new_marker
from test_parallel import fake_two_gpus

from experiment_runner.parent.gpu_locks import GpuLocked, lock_file, lock_gpus, release_gpus


def test_a_second_holder_of_a_gpu_is_refused_naming_the_first_then_gets_it(tmp_path: Path) -> None:
    first = lock_gpus(["1", "0"], tmp_path, 0, Path("nightly/a/results.jsonl"))
    with pytest.raises(GpuLocked) as refused:
        lock_gpus(["2", "1"], tmp_path, 0, Path("nightly/b/results.jsonl"))
    said = str(refused.value)
    assert said.startswith("GPU 1 is in use by another run: ") and "\n" not in said
    assert f"pid {os.getpid()} on host {socket.gethostname()}, writing nightly/a/results.jsonl" in said
    free = lock_gpus(["2"], tmp_path, 0, Path("c"))  # GPU 2 was given back when GPU 1 was refused
    release_gpus(first)
    release_gpus(free)
    assert first == [] and len(lock_gpus(["2", "1"], tmp_path, 0, Path("b"))) == 2


def test_a_gpu_id_that_is_a_uuid_names_a_file_in_the_folder(tmp_path: Path) -> None:
    assert lock_file(tmp_path, "GPU-8f2b/../x").parent == tmp_path


@pytest.mark.e2e
def test_a_night_on_a_gpu_another_run_holds_exits_2_and_a_cpu_run_is_not_held(run_cli, tmp_path: Path) -> None:
    cache, locks = tmp_path / "cache", tmp_path / "gpu-locks"
    extra = {"XDG_CACHE_HOME": str(cache), "CUDA_VISIBLE_DEVICES": ""}
    fake_two_gpus(cli_env(cache, new_marker("probe"), extra))
    night = ("--suite-name=faulty", "--filter=^quick_00$", "--dynamo=None", "--test=eval", "--repeat=1",
             "--gpu-ids=3,5", f"--gpu-lock-dir={locks}")
    held = lock_gpus(["5"], locks, 0, Path("nightly/yesterday/results.jsonl"))
    try:
        refused = run_cli(*night, "--accelerator=cuda", output_dir=tmp_path / "tonight", env=extra)
        cpu = run_cli(*night, "--accelerator=cpu", output_dir=tmp_path / "cpu", env=extra)
    finally:
        release_gpus(held)
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "GPU 5 is in use by another run: pid" in lines[0], lines
    assert "nightly/yesterday/results.jsonl" in lines[0]
    assert not (tmp_path / "tonight" / "results.jsonl").exists()
    assert cpu.returncode == 0 and [r["status"] for r in cpu.records()] == ["ok"], cpu.stderr

    ran = run_cli(*night, "--accelerator=cuda", output_dir=tmp_path / "tonight", env=extra)
    assert ran.returncode == 0 and len(ran.records()) == 1, ran.stderr  # the child finds no CUDA: a record
    assert len(lock_gpus(["3", "5"], locks, 0, Path("after"))) == 2, "the run gave its GPUs back"

    tonight = tmp_path / "tonight" / "results.jsonl"
    estimate = run_cli(*night, "--accelerator=cuda", "--max-parallel=2", "--dry-run", f"--estimate-from={tonight}",
                       output_dir=tmp_path / "tomorrow", env=extra)
    wall = sum(r["timings"]["wall_s"] for r in ran.records())
    assert estimate.returncode == 0, estimate.stderr
    assert f"cuda: {wall / 3600:.2f} GPU-hours" in estimate.stdout, estimate.stdout
    assert "on 2 GPU(s) at once (1 of 1 experiments timed there)" in estimate.stdout, estimate.stdout
    unknown = run_cli(*night, "--accelerator=cuda", "--dry-run", output_dir=tmp_path / "tomorrow", env=extra)
    assert "machine time: no estimate; --estimate-from=PATH" in unknown.stdout, unknown.stdout
