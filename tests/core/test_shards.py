"""--shard-by=duration:PATH: shards balanced by an earlier run's durations, the same on every host."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from experiment_runner.core.shards import balanced_shards, model_durations, shard_loads


def record(model: str, wall_s: float, experiment: str = "eval", run_id: str = "r1") -> dict:
    return {"run_id": run_id, "experiment_id": f"{model}-{experiment}", "model": {"model_name": model},
            "status": "ok", "timings": {"wall_s": wall_s}}


def test_durations_sum_a_models_final_records() -> None:
    records = [record("a", 3.0), record("a", 4.0, "train"), record("b", 9.0),
               record("b", 2.0, run_id="r2"),  # b's eval ran again later: its last record counts
               {"run_id": "r1", "experiment_id": "c-eval", "model": {"model_name": "c"}, "status": "skipped"}]
    assert model_durations(records) == {"a": 7.0, "b": 2.0}


def test_longest_first_onto_the_least_loaded_shard() -> None:
    durations = {"huge": 100.0, "big": 60.0, "mid": 40.0, "s1": 10.0, "s2": 10.0, "s3": 10.0, "s4": 10.0}
    shards = balanced_shards(list(durations), durations, 2)
    assert shards == [["huge", "s1", "s3"], ["big", "mid", "s2", "s4"]]  # ties go to the lower shard
    assert shard_loads(shards, durations) == [120.0, 120.0]


def test_mixed_durations_are_balanced_within_15_percent_where_round_robin_is_not() -> None:
    rng = random.Random(7)
    durations = {f"m{i:03d}": rng.lognormvariate(3, 1.2) for i in range(120)}  # heavy-tailed, like real suites
    models = sorted(durations)
    total = sum(durations.values())
    lpt = max(shard_loads(balanced_shards(models, durations, 4), durations)) / (total / 4)
    round_robin = max(shard_loads([models[i::4] for i in range(4)], durations)) / (total / 4)
    assert lpt <= 1.15 and lpt < round_robin


def test_unknown_models_count_as_the_median_and_ties_are_deterministic() -> None:
    durations = {"a": 1.0, "b": 2.0, "c": 3.0}
    models = ["new1", "c", "a", "new2", "b"]
    first = balanced_shards(models, durations, 3)
    assert first == balanced_shards(list(reversed(models)), dict(reversed(list(durations.items()))), 3)
    assert first == [["c"], ["b", "new2"], ["a", "new1"]]  # new1 and new2 cost the median, 2.0
    assert shard_loads(first, durations) == [3.0, 4.0, 3.0]


@pytest.mark.e2e
def test_cli_shards_by_duration_cover_the_models_once(run_cli, tmp_path: Path) -> None:
    earlier = tmp_path / "earlier.jsonl"
    lines = [record("nap_00", 40.0), record("nap_01", 20.0), record("quick_00", 1.0), record("quick_01", 1.0)]
    earlier.write_text("".join(json.dumps(r) + "\n" for r in lines))
    common = ("--suite-name=faulty", "--filter=^nap_0[01]$", "--filter=^quick_0[0-3]$", "--accelerator=cpu",
              "--dynamo=None", "--test=eval", "--dry-run", f"--shard-by=duration:{earlier}", "--total-partitions=2")
    shards = []
    for partition in (0, 1):
        run = run_cli(*common, f"--partition-id={partition}")
        assert run.returncode == 0, run.stderr
        shards.append(sorted(line.split(". ", 1)[1].split(":")[0] for line in run.stdout.splitlines()
                             if ". " in line and ": cpu" in line))
    # quick_02 and quick_03 are new: each costs the median, 10.5 s
    assert shards == [["nap_00", "quick_00", "quick_01"], ["nap_01", "quick_02", "quick_03"]]


@pytest.mark.e2e
def test_cli_shard_by_bad_input_is_one_line(run_cli, tmp_path: Path) -> None:
    run = run_cli("--suite-name=dummy", "--dry-run", "--shard-by=time:x", "--total-partitions=2")
    assert run.returncode == 2 and "--shard-by must be round-robin or duration:PATH" in run.stderr
    run = run_cli("--suite-name=dummy", "--dry-run", f"--shard-by=duration:{tmp_path / 'missing.jsonl'}")
    assert run.returncode == 3 and run.stderr.count("\n") == 1 and "missing.jsonl" in run.stderr
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("not json\n")
    run = run_cli("--suite-name=dummy", "--dry-run", f"--shard-by=duration:{garbage}")
    assert run.returncode == 3 and "holds no results record" in run.stderr


@pytest.mark.e2e
def test_records_name_their_shard(run_cli) -> None:
    """A fleet's merged file must say which host's shard each record came from, and how it was cut."""
    run = run_cli("--suite-name=faulty", "--filter=^quick_0[0-3]$", "--accelerator=cpu", "--dynamo=None",
                  "--test=eval", "--repeat=1", "--total-partitions=2", "--partition-id=1", "--shard-by=round-robin")
    assert run.returncode == 0, run.stderr
    records = run.records()
    assert sorted(r["model"]["model_name"] for r in records) == ["quick_01", "quick_03"]  # dealt, filtered list
    assert all(r["placement"]["shard"] == {"partition_id": 1, "total_partitions": 2, "by": "round-robin"}
               for r in records)
    run = run_cli("--suite-name=faulty", "--filter=^quick_00$", "--accelerator=cpu", "--dynamo=None",
                  "--test=eval", "--repeat=1", output_dir=run.output_dir.parent / "whole")
    assert run.returncode == 0, run.stderr
    assert [r["placement"]["shard"] for r in run.records()] == [
        {"partition_id": 0, "total_partitions": 1, "by": "contiguous"}]
