"""--speedup=paired: the compiled experiment times its eager baseline in its own process, pair by
pair, and `report` uses that ratio. On a host that slows down steadily the isolated speedup
(two processes, one after the other) moves; the paired one stays where the quiet host put it."""

from __future__ import annotations

import json
import time

import pytest

from experiment_runner.core.stats import paired_speedup

ARGS = ("--suite-name=faulty", "--filter=^drift$", "--accelerator=cpu", "--dynamo=None", "--dynamo=eager",
        "--test=eval", "--precision=fp32", "--speedup=paired", "--repeat=8", "--iterations-per-run=3",
        "--warmup-iterations=1", "--launcher=subprocess")


def test_the_paired_summary_of_known_pairs() -> None:
    summary = paired_speedup([2.0] * 10, [1.0, 1.1, 0.9, 1.0, 1.05, 0.95, 1.0, 1.02, 0.98, 1.0])
    assert summary["median_ratio"] == 2.0 and summary["pairs"] == 10
    assert summary["ci95"] == [2.0 / 1.05, 2.0 / 0.95]  # the 2nd smallest and 2nd largest ratio
    assert summary["p_value"] == pytest.approx(2 / 1024)  # all ten above 1: 2 x 0.5^10
    assert paired_speedup([1.0] * 5, [1.0] * 5)["ci95"] is None  # under 6 pairs: no 95% interval


def speedups(run_cli, rate: float, output) -> tuple[float, float]:
    """(isolated, paired) speedup of the drift model's eager backend over eager."""
    env = {"FAULTY_DRIFT_T0": str(time.time()), "FAULTY_DRIFT_RATE": str(rate)}
    run = run_cli(*ARGS, env=env, output_dir=output)
    assert run.returncode == 0, run.stderr
    records = {r["experiment"]["dynamo"]: r for r in run.records()}
    eager, compiled = records[None], records["eager"]
    paired = compiled["measurements"]["paired"]
    assert len(paired["baseline_per_iter_time"]) == len(paired["compiled_per_iter_time"]) == 8
    assert "paired" not in eager["measurements"], "the baseline experiment is measured on its own, as always"
    isolated = eager["stats"]["per_iter_time"]["median"] / compiled["stats"]["per_iter_time"]["median"]
    return isolated, paired["median_ratio"]


@pytest.mark.e2e
def test_a_drifting_host_moves_the_isolated_speedup_not_the_paired_one(run_cli, tmp_path, capsys) -> None:
    quiet_isolated, quiet_paired = speedups(run_cli, 0.0, tmp_path / "quiet")
    drift_isolated, drift_paired = speedups(run_cli, 0.08, tmp_path / "drift")
    assert drift_paired == pytest.approx(quiet_paired, rel=0.05)
    assert drift_isolated < 0.9 * quiet_isolated, (quiet_isolated, drift_isolated)

    from experiment_runner.cli import main as cli_main

    capsys.readouterr()
    assert cli_main(["report", str(tmp_path / "drift" / "results.jsonl"), "--format", "json"]) == 0
    (summary,) = [s for s in json.loads(capsys.readouterr().out)["summary"] if s["configuration"].endswith("eager")]
    assert summary["speedup_geomean"] == pytest.approx(drift_paired) and summary["speedup_paired"] == 1
