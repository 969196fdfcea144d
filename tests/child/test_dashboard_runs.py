"""Every CPU dashboard configuration end to end on a tiny model: planned, compiled, timed,
verified, and recorded under its PyTorch CI name (slow tier: one inductor compile each); and a
`--dashboard` run with no other flag giving what PyTorch's job gives (one compile, e2e tier)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmark_models.torchbench import TORCHBENCH_DIR_ENV
from experiment_runner.core import dashboards

FAKE_TORCHBENCH = Path(__file__).parents[1] / "fake_torchbenchmark"


@pytest.mark.e2e
def test_a_dashboard_run_alone_gives_a_verdict_graph_breaks_and_the_harness_speedup_at_the_jobs_batch(
        run_cli, tmp_path, capsys):
    """No flag but --dashboard: accuracy checked, the harness's graph-break count, a speedup timed
    as the harness times it (no eager experiment planned) with the dashboard's pair rule (±5%, 10
    to the job's 30 pairs, recorded as the one departure from the job), all at PyTorch's torchbench
    accuracy batch (4, where the model's own default is 3); report, export and check-expected read
    them."""
    run = run_cli("--suite-name=torchbench", "--filter=^tiny_mlp$", "--dashboard=cpu_inductor", timeout=600,
                  env={TORCHBENCH_DIR_ENV: str(FAKE_TORCHBENCH)})
    assert run.returncode == 0, run.stderr
    (record,) = run.records()
    assert record["status"] == "ok" and record["verification_code"] == "PASS", record["error"]
    experiment, measured = record["experiment"], record["measurements"]
    assert (experiment["dashboard"], experiment["batch_size"], experiment["dashboard_overrides"]) == (
        "cpu_inductor", 4, {"pairs": dashboards.ADAPTIVE_PAIRS})
    assert measured["graph_breaks"]["harness_count"] == 0
    paired = measured["paired"]
    assert paired["speedup"] > 0 and 10 <= paired["pairs"] <= 30 and paired["baseline_batch_size"] == 4
    rule = paired["stopping_rule"]
    assert (rule["kind"], rule["half_width"], rule["floor"], rule["ceiling"]) == (
        "sequential", dashboards.PAIRS_HALF_WIDTH, 10, dashboards.HARNESS_PAIRS)
    assert paired["stop_reason"] in ("converged", "ceiling")
    # The harness's warm-ups: five each, memory read as its warmup() reads it on the CPU, and the
    # counters' change over the compiled one: every call dynamo captured, as its own counters say.
    warmups = measured["harness_warmup"]
    assert warmups["eager"]["iterations"] == warmups["compiled"]["iterations"] == 5
    assert warmups["eager"]["peak_memory_bytes"] > 0 and warmups["compiled"]["peak_memory_bytes"] > 0
    # Both rise from the resident set before the model loaded: torch imported, the model not yet.
    assert 0 < warmups["base_memory_bytes"] < min(warmups[side]["peak_memory_bytes"] for side in ("eager", "compiled"))
    stats = warmups["compiled"]["dynamo_stats"]
    assert stats["calls_captured"] == measured["graph_breaks"]["calls_captured"] > stats["unique_graphs"] == 1

    from experiment_runner.cli import main as cli_main

    results = str(run.output_dir / "results.jsonl")
    capsys.readouterr()
    assert cli_main(["report", results, "--format", "json"]) == 0
    (summary,) = json.loads(capsys.readouterr().out)["summary"]
    assert (summary["speedup_models"], summary["speedup_harness"]) == (1, 1)  # not "no baseline"
    # The HUD's compression ratio and compile latency, from the harness's warm-ups in the run's own process.
    ratio = warmups["eager"]["peak_memory_bytes"] / warmups["compiled"]["peak_memory_bytes"]
    # report's JSON keeps six significant digits: at most 5e-6 of the value off.
    assert summary["compression_ratio_mean"] == pytest.approx(ratio, rel=1e-5) and summary["memory_models"] == 1
    assert summary["compile_time_mean_s"] == pytest.approx(
        warmups["compiled"]["latency_s"] - warmups["eager"]["latency_s"], rel=1e-5)
    out = tmp_path / "csv"
    assert cli_main(["export", results, "--format", "dynamo-csv", "-o", str(out)]) == 0
    (row,) = [line.split(",") for line in
              (out / "inductor_torchbench_float32_inference_cpu_performance.csv").read_text().splitlines()[1:]]
    assert (row[1], row[2], float(row[3])) == ("tiny_mlp", "4", pytest.approx(paired["speedup"], rel=1e-5))
    assert all(float(value) > 0 for value in row[6:9])  # compression_ratio, eager_peak_mem, dynamo_peak_mem
    assert int(row[9]) == stats["calls_captured"]
    accuracy = (out / "cpu_inductor_torchbench" / "inference_torchbench.csv").read_text().splitlines()
    assert accuracy[1].split(",")[1:4] == ["tiny_mlp", "4", "pass"]
    capsys.readouterr()
    assert cli_main(["check-expected", results, "--pytorch"]) == 1  # tiny_mlp is no model of PyTorch's file
    out_lines = capsys.readouterr().out.splitlines()
    assert "tiny_mlp: not in the expected file (accuracy pass, graph_breaks 0): add it with --update" in out_lines
    assert not any("not checked" in line or "another batch size" in line for line in out_lines)


@pytest.mark.slow
@pytest.mark.parametrize("name", dashboards.groups()["cpu"])
def test_a_cpu_dashboard_configuration_runs_verifies_and_is_recorded_under_its_name(run_cli, name):
    wanted = dashboards.dashboards()[name]
    run = run_cli("--suite-name=dummy", f"--dashboard={name}", "--verify", "--repeat=2", timeout=600)
    assert run.returncode == 0, run.stderr
    (record,) = run.records()
    experiment = record["experiment"]
    assert record["status"] == "ok" and record["verification_code"] == "PASS", record["error"]
    assert (experiment["dashboard"], experiment["precision"], experiment["compile_options"]) == (
        name, wanted.run(experiment["test"]).precision, wanted.compile_options)
    breaks = record["measurements"]["graph_breaks"]
    if wanted.compile_options.startswith("aot-inductor"):
        assert experiment["compile_scope"] == "model" and "harness_count" not in breaks
        # the verifier loaded the timed step's package, and the child removed it when it finished
        assert not list(run.output_dir.rglob("*.pt2"))
    else:
        # the verifier ran the step that was timed instead of compiling a fresh copy
        assert record["verification"]["details"]["compiled_run"] == "timed step"
        # no frame broke, so nothing was replayed to say the harness's count is 0 too
        assert (breaks["total"], breaks["harness_count"], breaks["harness_count_method"]) == (
            0, 0, "no break in any frame compiled")


@pytest.mark.slow
@pytest.mark.parametrize("name", dashboards.training_jobs())
def test_a_cuda_jobs_training_run_on_the_cpu_takes_the_harness_step_and_says_where_it_ran(run_cli, name):
    """Each training configuration end to end on the CPU: the harness's step (no optimizer off
    CUDA), checked as the harness checks it, recorded under the job's name with the device moved,
    at the batch the job takes (an accuracy job's torchbench batch 4; a performance job's, such as
    inductor_with_cudagraphs, the model's own training batch, 6 for tiny_mlp)."""
    wanted = dashboards.dashboards()[name]
    run = run_cli("--suite-name=torchbench", "--filter=^tiny_mlp$", f"--dashboard={name}", "--accelerator=cpu",
                  "--test=train", "--repeat=2", timeout=600, env={TORCHBENCH_DIR_ENV: str(FAKE_TORCHBENCH)})
    assert run.returncode == 0, run.stderr
    (record,) = run.records()
    experiment = record["experiment"]
    assert record["status"] == "ok" and record["verification_code"] == "PASS", (record["error"],
                                                                                record["verification"])
    assert (experiment["dashboard"], experiment["test"], experiment["precision"], experiment["dynamo"],
            experiment["compile_options"]) == (name, "train", "amp", wanted.dynamo, wanted.compile_options)
    job_batch = 6 if wanted.target == dashboards.PERFORMANCE else dashboards.accuracy_batch_size("torchbench")
    assert (experiment["training_recipe"], experiment["optimizer"], experiment["batch_size"]) == (
        "dynamo_harness", "none", job_batch)
    assert experiment["dashboard_overrides"] == {"accelerator": "cpu", "pairs": dashboards.ADAPTIVE_PAIRS}
    details = record["verification"]["details"]
    # Two steps, then the loss, 4 gradients and 4 parameters of its two Linear layers: not the output.
    assert (details["iterations"], details["leaves"]) == (2, 9)
    # Its graph breaks counted as the CUDA job's harness counts them: with that job's optimizer.
    breaks = record["measurements"]["graph_breaks"]
    assert breaks["harness_count"] > 0
    assert breaks["harness_count_method"].startswith("replayed with optimizer ")
    assert breaks["harness_count_method"].endswith(", the harness's on cuda")
    assert "none" not in breaks["harness_count_method"]
