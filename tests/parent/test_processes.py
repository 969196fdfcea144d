"""`--processes N`: every experiment measured in N fresh processes, interleaved in rounds,
one record per process; a resumed run picks up mid-way through the rounds; a failing
experiment is not started again in later rounds."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from experiment_runner.core.matrix import Experiment, ExperimentConfig, Planned, rounds

COMMON = ("--suite-name=faulty", "--accelerator=cpu", "--dynamo=None", "--test=eval", "--repeat=2",
          "--warmup-iterations=0")


def _planned(name: str, skip: str | None = None) -> Planned:
    return Planned(Experiment("s", name, ExperimentConfig("cpu", None, None, None, "eval", "fp32")), skip)


def test_rounds_interleave_experiments_and_plan_a_skip_once() -> None:
    plan = [_planned("a"), _planned("b"), _planned("c", skip="listed")]
    order = [(p.experiment.model_name, p.process_index) for p in rounds(plan, 3)]
    assert order == [("a", 0), ("b", 0), ("c", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2)]
    done = {(plan[0].experiment.experiment_id, 0), (plan[1].experiment.experiment_id, 1)}
    assert [(p.experiment.model_name, p.process_index) for p in rounds(plan, 2, done)] == \
        [("b", 0), ("c", 0), ("a", 1)]


@pytest.mark.e2e
def test_processes_give_one_record_per_process_in_rounds(run_cli) -> None:
    run = run_cli(*COMMON, "--filter=^quick_0[01]$", "--processes=3")
    assert run.returncode == 0, run.stderr
    records = run.records()
    assert [(r["model"]["model_name"], r["process"]) for r in records] == [
        (name, {"index": index, "count": 3}) for index in range(3) for name in ("quick_00", "quick_01")]
    assert len({r["run_id"] for r in records}) == 1
    assert all(r["status"] == "ok" and len(r["metrics"]["per_iter_time"]) == 2 for r in records)
    dirs = {r["artifacts"]["dir"] for r in records}
    assert len(dirs) == 6 and all(Path(d).name.startswith("process_") for d in dirs)


@pytest.mark.e2e
def test_resume_mid_rounds_runs_only_the_missing_processes(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = (*COMMON, "--filter=^quick_0[01]$", "--processes=3")
    first = run_cli(*args, output_dir=out)
    assert first.returncode == 0, first.stderr
    lines = first.results_path.read_text().splitlines(keepends=True)
    first.results_path.write_text("".join(lines[:3]))  # as if killed during round 2

    dry = run_cli(*args, "--dry-run", output_dir=out)
    assert "[2 of 3 processes done in the run being resumed]" in dry.stdout
    assert "[1 of 3 processes done in the run being resumed]" in dry.stdout
    resumed = run_cli(*args, output_dir=out)  # resuming is the default
    assert resumed.returncode == 0, resumed.stderr
    assert "3 experiment process(es)" in resumed.stderr and "3 already done" in resumed.stderr
    records = resumed.records()
    assert len({r["run_id"] for r in records}) == 1
    keys = Counter((r["model"]["model_name"], r["process"]["index"]) for r in records)
    assert keys == Counter({(name, index): 1 for name in ("quick_00", "quick_01") for index in range(3)})


@pytest.mark.e2e
def test_a_failing_experiment_is_not_started_again_in_later_rounds(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = (*COMMON, "--filter=^raise_run$", "--filter=^quick_00$", "--processes=2")
    run = run_cli(*args, output_dir=out)
    assert run.returncode == 0, run.stderr
    got = [(r["model"]["model_name"], r["process"]["index"], r["status"]) for r in run.records()]
    assert got == [("quick_00", 0, "ok"), ("raise_run", 0, "error"), ("quick_00", 1, "ok")]
    again = run_cli(*args, output_dir=out)  # a rerun resumes: the failed experiment is done, not retried
    assert "nothing to run" in again.stdout and len(again.records()) == 3
    retried = run_cli(*args, "--retry-failed", output_dir=out)
    assert retried.returncode == 0, retried.stderr
    tail = [(r["model"]["model_name"], r["process"]["index"], r["status"]) for r in retried.records()[3:]]
    assert tail == [("raise_run", 0, "error")]  # retried, failed again, so process 1 is not started
