"""--speedup=paired: the compiled experiment times its eager baseline in its own process, pair by
pair, and `report` uses that ratio. On a host that slows down steadily the isolated speedup
(two processes, one after the other) moves; the paired one stays where the quiet host put it."""

from __future__ import annotations

import json
import random
import statistics
import time
from collections import Counter
from typing import NamedTuple

import pytest

from experiment_runner.child.paired import HARNESS_BATCH, HARNESS_PAIRS, harness_batch, resized, t_test
from experiment_runner.core.stats import paired_speedup

ARGS = ("--suite-name=faulty", "--filter=^drift$", "--accelerator=cpu", "--dynamo=None", "--dynamo=eager",
        "--test=eval", "--precision=fp32", "--speedup=paired", "--repeat=8", "--iterations-per-run=3",
        "--warmup-iterations=1", "--launcher=subprocess", "--isolated-samples", "--no-adaptive-pairs")


def test_the_paired_summary_of_known_pairs() -> None:
    summary = paired_speedup([2.0] * 10, [1.0, 1.1, 0.9, 1.0, 1.05, 0.95, 1.0, 1.02, 0.98, 1.0])
    assert summary["median_ratio"] == 2.0 and summary["pairs"] == 10
    assert summary["ci95"] == [2.0 / 1.05, 2.0 / 0.95]  # the 2nd smallest and 2nd largest ratio
    assert summary["p_value"] == pytest.approx(2 / 1024)  # all ten above 1: 2 x 0.5^10
    assert paired_speedup([1.0] * 5, [1.0] * 5)["ci95"] is None  # under 6 pairs: no 95% interval
    assert t_test([2.0, 2.1, 1.9, 2.0], [1.0, 1.1, 0.9, 1.0]) < 0.001  # the harness's test, via scipy
    assert t_test([1.0] * 4, [1.0] * 4) is None and t_test([2.0], [1.0]) is None  # no spread; one pair


# Each call of the drift model sleeps this long times its drift: long beside the few milliseconds
# a busy host's scheduler adds to a sleep, so the pairs' ratios hold at load 6 on 2 cores.
DRIFT_PACE_S = 0.02


def check_adaptive(paired: dict) -> None:
    """--speedup=paired's pairs follow the sequential rule: between its floor and ceiling, stopped
    converged (interval within the half-width) or at the ceiling, and the interval recorded is the
    one all of its pairs give."""
    rule = paired["stopping_rule"]
    assert rule["kind"] == "sequential" and rule["floor"] <= paired["pairs"] <= rule["ceiling"]
    summary = paired_speedup(paired["baseline_per_iter_time"], paired["compiled_per_iter_time"])
    assert paired["ci95"] == summary["ci95"]
    if paired["stop_reason"] == "converged":
        assert paired["ci95_relative_half_width"] <= rule["half_width"]
    else:
        assert paired["stop_reason"] == "ceiling" and paired["pairs"] == rule["ceiling"]


def speedups(run_cli, rate: float, output) -> tuple[float, float]:
    """(isolated, paired) speedup of the drift model's eager backend over eager, from a fixed 30
    pairs: what is compared is the two modes under drift, and the same count on both hosts keeps the
    comparison to that (the sequential rule, which may stop a quiet run at its floor of 10, is
    checked in the tests below)."""
    env = {"FAULTY_DRIFT_T0": str(time.time()), "FAULTY_DRIFT_RATE": str(rate), "FAULTY_DRIFT_PACE": str(DRIFT_PACE_S)}
    run = run_cli(*ARGS, env=env, output_dir=output)
    assert run.returncode == 0, run.stderr
    records = {r["experiment"]["dynamo"]: r for r in run.records()}
    eager, compiled = records[None], records["eager"]
    paired = compiled["measurements"]["paired"]
    assert len(paired["baseline_per_iter_time"]) == len(paired["compiled_per_iter_time"]) == HARNESS_PAIRS
    assert paired["stop_reason"] == "fixed"
    assert "paired" not in eager["measurements"], "the baseline experiment is measured on its own, as always"
    assert eager["measurements"]["samples_from"] == compiled["measurements"]["samples_from"] == "isolated"
    assert "their speedups use that" in eager["measurements"]["paired_baseline"]
    assert len(compiled["metrics"]["per_iter_time"]) == 8  # --isolated-samples: its own --repeat runs
    isolated = eager["stats"]["per_iter_time"]["median"] / compiled["stats"]["per_iter_time"]["median"]
    assert paired["speedup"] == paired["median_ratio"]
    return isolated, paired["speedup"]


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
    assert summary["speedup_geomean"] == pytest.approx(drift_paired, rel=1e-5) and summary["speedup_paired"] == 1


def test_the_harness_batch_rule_and_resizing() -> None:
    """The batch PyTorch's harness times eager at: the nominal one, except with dynamic shapes
    (--dynamic-batch-only), where its timed() draws a factor in [0.8, 1.2) right after its
    previous call reseeded Python's random with 1337, so the draw is always the same, 1.0471:
    the nominal batch up to 21, about 4.7% more from 22 on, never under 2 or for batch 1.
    Inputs are cut, or padded with their last row, along the first dimension of that extent."""
    import torch

    reseeded = random.Random(HARNESS_BATCH["seed"])  # what reset_rng_state() leaves before timed()'s next draw
    factor = reseeded.uniform(HARNESS_BATCH["low"], HARNESS_BATCH["high"])
    assert factor == pytest.approx(1.0471, abs=1e-4)
    batches = (1, 2, 8, 21, 22, 32, 64, 128)
    assert [harness_batch(b, "dynamic") for b in batches] == [1, 2, 8, 21, 23, 33, 67, 134]
    assert [harness_batch(b, "default") for b in batches] == list(batches)
    assert all(harness_batch(b, "dynamic") == max(2, int(b * factor)) for b in range(2, 200))

    class Pair(NamedTuple):
        x: torch.Tensor
        y: int

    x = torch.arange(12.0).reshape(4, 3)  # batch 4 on dim 0; dim 1 (3) untouched
    mask = torch.ones(2, 4)  # batch 4 on dim 1
    cut = resized(({"x": x, "mask": mask}, [Pair(x, 7)]), 4, 2)
    assert cut[0]["x"].tolist() == x[:2].tolist() and cut[0]["mask"].shape == (2, 2)
    assert isinstance(cut[1][0], Pair) and cut[1][0].x.shape == (2, 3) and cut[1][0].y == 7
    padded = resized(x, 4, 6)
    assert padded.shape == (6, 3) and padded[4:].tolist() == [x[3].tolist()] * 2
    assert resized(x, 5, 3) is x  # no dimension of the batch's extent


@pytest.mark.e2e
def test_harness_mode_times_the_baseline_at_the_harness_batch(run_cli, tmp_path) -> None:
    """--speedup=harness at batch 32: with dynamic shapes every baseline sample ran at 33 (the
    model traces each call's batch), the compiled step and the warm-up at 32; with static
    shapes everything at 32. The speedup is the ratio of the two series' medians, as the harness
    computes it."""
    trace = tmp_path / "batches.txt"
    run = run_cli("--suite-name=faulty", "--filter=^batched$", "--accelerator=cpu", "--dynamo=eager",
                  "--test=eval", "--precision=fp32", "--speedup=harness", "--repeat=4", "--iterations-per-run=2",
                  "--warmup-iterations=1", "--batch-size=32", "--compile-options=default",
                  "--compile-options=dynamic", env={"FAULTY_BATCH_TRACE": str(trace)}, output_dir=tmp_path / "out")
    assert run.returncode == 0, run.stderr
    records = {r["experiment"]["compile_options"]: r for r in run.records()}
    assert records["default"]["measurements"]["paired"]["baseline_batch_size"] == 32
    paired = records["dynamic"]["measurements"]["paired"]
    assert paired["baseline_batch_size"] == 33 and paired["pairs"] == HARNESS_PAIRS
    assert paired["stop_reason"] == "fixed" and paired["stopping_rule"] == {"kind": "fixed", "pairs": HARNESS_PAIRS}
    assert paired["baseline_batch_rule"]["source"].startswith("pytorch/benchmark")
    seen = Counter(int(line) for line in trace.read_text().split())
    assert set(seen) == {32, 33} and seen[33] == HARNESS_PAIRS * paired["iterations_per_sample"]
    assert paired["speedup"] == pytest.approx(statistics.median(paired["baseline_per_iter_time"])
                                              / statistics.median(paired["compiled_per_iter_time"]))
    assert "ratio of the two series' medians" in paired["speedup_of"]
    assert 0.0 <= paired["t_test_p_value"] <= 1.0  # scipy is in the test environment


@pytest.mark.e2e
def test_paired_training_steps_rewind_and_still_verify(run_cli, tmp_path) -> None:
    """--test=train --speedup=paired: the pairs time whole training steps (forward, loss,
    backward, optimizer) of eager and compiled on one model, rewound before every sample, and
    the experiment still verifies in the same child."""
    run = run_cli("--suite-name=faulty", "--filter=^quick_00$", "--accelerator=cpu", "--dynamo=eager", "--test=train",
                  "--precision=fp32", "--speedup=paired", "--repeat=4", "--iterations-per-run=2",
                  "--warmup-iterations=1", "--verify", output_dir=tmp_path / "out")
    assert run.returncode == 0, run.stderr
    (record,) = run.records()
    assert record["status"] == "ok" and record["verification_code"] == "PASS", record.get("verification")
    paired = record["measurements"]["paired"]
    assert paired["pairs"] == len(paired["ratios"]) == len(paired["baseline_per_iter_time"])
    check_adaptive(paired)
    assert min(paired["baseline_per_iter_time"] + paired["compiled_per_iter_time"]) > 0


@pytest.mark.e2e
def test_by_default_the_compiled_samples_are_its_samples_in_the_pairs(run_cli, tmp_path) -> None:
    """Nothing timed twice: without --isolated-samples a paired compiled experiment's per_iter_time
    is its series in the pairs (one sample alone is left, for memory and losses), and the record
    says so; the eager experiment of the run still takes its own samples. Under harness the pairs
    time one iteration each, and so does that one sample (nothing calibrated for it)."""
    for mode, extra in (("paired", ()), ("harness", ("--no-adaptive-pairs",))):
        run = run_cli("--suite-name=faulty", "--filter=^quick_00$", "--accelerator=cpu", "--dynamo=None",
                      "--dynamo=eager", "--test=train", "--precision=fp32", f"--speedup={mode}", "--repeat=5",
                      "--warmup-iterations=1", "--max-pairs=12", *extra, output_dir=tmp_path / mode)
        assert run.returncode == 0, run.stderr
        records = {r["experiment"]["dynamo"]: r for r in run.records()}
        compiled, eager = records["eager"], records[None]
        figures, paired = compiled["measurements"], compiled["measurements"]["paired"]
        assert figures["samples_from"] == "pairs" and len(figures["memory_sample_time"]) == 1
        assert compiled["metrics"]["per_iter_time"] == paired["compiled_per_iter_time"]
        assert compiled["metrics"]["total_time"] == pytest.approx(
            [t * paired["iterations_per_sample"] for t in paired["compiled_per_iter_time"]])
        assert compiled["iterations_per_run"] == paired["iterations_per_sample"]
        assert figures["host_load"] == paired["host_load"] and figures["timed_peak_rss_bytes"] > 0
        assert "loss_first_timed_step" in figures  # the one sample alone still gives the training losses
        assert figures["steady_iter_time_s"] == statistics.median(paired["compiled_per_iter_time"])
        assert eager["measurements"]["samples_from"] == "isolated" and len(eager["metrics"]["per_iter_time"]) == 5
    assert compiled["iterations_per_run"] == 1 and not compiled["iterations_per_run_calibrated"]  # harness


@pytest.mark.e2e
def test_a_module_that_cannot_be_copied_says_the_paired_baseline_copy_failed(run_cli, tmp_path) -> None:
    """Issue 53: a module whose __deepcopy__ raises got an error record with no phase and the
    model's own message, as if the experiment had failed; the record now says where."""
    run = run_cli("--suite-name=faulty", "--filter=^uncopyable$", "--accelerator=cpu", "--dynamo=eager",
                  "--test=eval", "--precision=fp32", "--speedup=paired", "--repeat=2", output_dir=tmp_path / "out")
    assert run.returncode == 0, run.stderr
    [record] = run.records()
    error = record["error"]
    assert (record["status"], error["type"], error["phase"]) == ("error", "BaselineCopyFailed", "paired baseline copy")
    assert error["message"] == ("--speedup=paired: the paired eager baseline's copy of the module failed "
                                "(copy.deepcopy, as PyTorch's harness copies it): TypeError: cannot deepcopy this "
                                "module's handle")
