"""Every CPU dashboard configuration end to end on a tiny model: planned, compiled, timed,
verified, and recorded under its PyTorch CI name (slow tier: one inductor compile each)."""

from __future__ import annotations

import pytest

from experiment_runner.core import dashboards


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
        name, wanted.precision, wanted.compile_options)
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
