"""Where a child's time goes: the record's `timings` split the child's lifetime (child_s, the
run_task call) into disjoint phases (core/record.py TIMING_PHASES) that add up to it, with the
remainder named (other_s) and small. Checked on real child runs, against the runner's own figures."""

from __future__ import annotations

import pytest

from experiment_runner.core.record import TIMING_PHASES, VERIFY_STEPS

# Named phases must hold all but this share of child_s (the acceptance: the breakdown
# sums to within 2% of the child's lifetime).
UNACCOUNTED_SHARE = 0.02


def check_breakdown(record: dict) -> dict:
    """The breakdown of one record adds up, and each phase holds at least what it timed."""
    timings = record["timings"]
    phases = {k: timings[k] for k in TIMING_PHASES if k in timings}
    assert all(value >= 0 for value in phases.values()), phases
    assert sum(phases.values()) == pytest.approx(timings["child_s"], rel=1e-9)
    assert phases["other_s"] <= UNACCOUNTED_SHARE * timings["child_s"], phases
    # the coarse keys keep their meaning: measure_s holds the timing phases, work_s what it always summed
    measured = sum(phases.get(k, 0.0) for k in ("baseline_first_warmup_s", "build_step_s", "warmup_s", "compile_s",
                                                 "calibration_s", "samples_s", "pairs_warmup_s", "pairs_s"))
    assert timings["measure_s"] >= measured
    assert timings["work_s"] == pytest.approx(sum(timings.get(k, 0.0) for k in (
        "load_s", "measure_s", "instrument_s", "verify_s", "harness_graph_breaks_s")))
    # each phase holds the runner's own figures for it
    figures, metrics = record["measurements"], record["metrics"]
    assert phases["compile_s"] == pytest.approx(figures["compile_time_s"])
    assert phases["warmup_s"] + phases["compile_s"] >= sum(figures["warmup_time"])
    assert phases["calibration_s"] >= sum(t["elapsed_s"] for t in figures.get("calibration", []))
    isolated = figures.get("memory_sample_time", metrics["total_time"])  # samples_from pairs: the one sample
    assert phases["samples_s"] >= sum(isolated)
    # verification's steps lie inside verify_s, never beside it
    steps = {k: timings[k] for k in VERIFY_STEPS if k in timings}
    assert not set(steps) & set(TIMING_PHASES)
    assert {"verify_eager_s", "verify_compiled_s", "verify_compare_s"} <= set(steps)
    assert 0 < sum(steps.values()) <= phases["verify_s"]
    return phases


@pytest.mark.e2e
def test_the_breakdown_adds_up_to_the_child_s_lifetime(run_cli, tmp_path) -> None:
    """Eager and compiled (paired, verified) experiments of a tiny model in fresh interpreters:
    every phase that ran is there, the phases add up to child_s, and what none of them holds is
    under 2% of it."""
    run = run_cli("--suite-name=faulty", "--filter=^quick_00$", "--accelerator=cpu", "--dynamo=None",
                  "--dynamo=eager", "--test=eval", "--precision=fp32", "--speedup=paired", "--repeat=3",
                  "--warmup-iterations=2", "--verify", "--max-pairs=12", "--launcher=subprocess",
                  output_dir=tmp_path / "out")
    assert run.returncode == 0, run.stderr
    records = {r["experiment"]["dynamo"]: r for r in run.records()}
    eager, compiled = check_breakdown(records[None]), check_breakdown(records["eager"])
    always = {"import_s", "setup_s", "load_s", "build_step_s", "warmup_s", "compile_s", "calibration_s",
              "samples_s", "instrument_s", "verify_prepare_s", "verify_s", "finish_s", "other_s"}
    assert set(eager) == always
    assert set(compiled) == always | {"baseline_first_warmup_s", "pairs_warmup_s", "pairs_s"}  # no break: no replay
    assert eager["import_s"] > 0 and compiled["import_s"] > 0  # a fresh interpreter imports torch
    paired = records["eager"]["measurements"]["paired"]
    per_sample = paired["iterations_per_sample"]
    assert compiled["pairs_s"] >= per_sample * sum(paired["baseline_per_iter_time"] + paired["compiled_per_iter_time"])
    assert paired["baseline_first_warmup"]["iterations"] == 2  # --warmup-iterations, on a copy before the compile
    assert len(paired["baseline_minor_faults"]) == len(paired["compiled_minor_faults"]) == paired["pairs"]
    assert all(isinstance(n, int) and n >= 0 for n in paired["baseline_minor_faults"] + paired["compiled_minor_faults"])
    assert records["eager"]["metrics"]["total_time"] == pytest.approx(
        [t * per_sample for t in paired["compiled_per_iter_time"]])  # its samples are the pairs' (timed once)
