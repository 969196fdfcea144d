"""benchmarks/gpu_nightly.py: the prepared 8-minute GPU check, kept runnable on the CPU.

No GPU is lent to most sessions, so its plan (and the runner's acceptance of every step's flags),
its step machinery (a timeout ends the step, a spent budget starts nothing) and its judgement of
records are tested here; only the commands themselves need the device."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from benchmarks import gpu_nightly
from benchmarks.gpu_nightly import Outcome, Step, judge, main, plan, run_step, summary

DEVICE_RUN_S = 10 * 60  # one device command's limit on a lent H100/H200 (the device tool's README)


def test_the_dry_run_plans_every_step_within_one_device_run_and_the_runner_takes_their_flags(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_nightly, "harness_folder", lambda given: None)
    assert main([str(tmp_path / "out"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    names = [s.name for s in plan(tmp_path, None)]
    assert names == ["environment", "check-determinism", "check-cudagraph-outputs", "check-aot-load", "oom",
                     "forkserver", "mission", "inductor-timm", "expected-huggingface", "expected-timm"]
    for name in names:
        assert f"{name} (" in out
    assert "first after the environment: check-determinism, check-cudagraph-outputs, check-aot-load" in out
    assert out.startswith("budget 540 s: one device command runs at most 600 s") and "starts on a bare machine" in out
    assert "--suite-name=torchbench --accelerator=cuda --filter=llama" in out
    assert "no dynamobench folder: no harness step" in out
    assert sum(s.timeout_s for s in plan(tmp_path, None)) <= gpu_nightly.BUDGET_S < DEVICE_RUN_S
    assert "within the budget" in out
    assert not (tmp_path / "out").exists()  # a dry run writes nothing


def test_a_dynamobench_folder_adds_the_harness_step_last(tmp_path: Path) -> None:
    (tmp_path / "common.py").write_text("")
    found = gpu_nightly.harness_folder(tmp_path)
    assert found == tmp_path.resolve()
    last = plan(tmp_path / "out", found)[-1]
    assert last.name == "harness" and f"--harness={found}" in last.argv


@pytest.mark.e2e  # starts processes
def test_a_step_runs_alone_a_timeout_ends_it_and_a_spent_budget_starts_nothing(tmp_path: Path) -> None:
    said = Step("said", "prints", ("-c", "print('ran here')"), 30, records=False)
    assert run_step(said, tmp_path, time.monotonic() + 60) == Outcome("said", 0, pytest.approx(0, abs=30), True,
                                                                      "ran here")
    stuck = Step("stuck", "sleeps", ("-c", "import time; time.sleep(60)"), 30, records=False)
    start = time.monotonic()
    cut = run_step(stuck, tmp_path, time.monotonic() + gpu_nightly.MIN_STEP_S + gpu_nightly.STOP_GRACE_S + 1)
    assert cut.returncode is None and not cut.holds and cut.verdict.startswith("timed out after 6 s")
    assert time.monotonic() - start < 20
    late = run_step(said, tmp_path, time.monotonic())
    assert (late.returncode, late.holds, late.verdict) == (None, False, "not started: the budget was spent")


def write(folder: Path, *rows: dict) -> None:
    folder.mkdir(parents=True)
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def record(status: str, launcher: str = "forkserver", code: str | None = None) -> dict:
    return {"status": status, "placement": {"launcher": launcher}, "verification_code": code,
            "model": {"model_name": "dummy"}, "experiment": {"dashboard": None, "dynamo": "inductor",
                                                             "test": "eval", "precision": "fp32"},
            "metrics": {"per_iter_time": [0.002, 0.004]}}


def test_each_step_is_judged_by_its_records(tmp_path: Path) -> None:
    steps = {s.name: s for s in plan(tmp_path, None)}
    write(tmp_path / "oom", record("oom"))
    assert judge(steps["oom"], tmp_path, 0, "") == (True, "1 record(s): oom 1")
    write(tmp_path / "forkserver", record("ok"), record("ok", launcher="subprocess"))
    holds, verdict = judge(steps["forkserver"], tmp_path, 0, "")
    assert not holds and "launchers ['forkserver', 'subprocess']" in verdict
    write(tmp_path / "inductor-timm", record("ok", code="PASS"), record("ok", code="FAIL_ACCURACY"))
    assert judge(steps["inductor-timm"], tmp_path, 0, "") == (True, "2 record(s): ok 2; verified 1 of 2 PASS")
    assert judge(steps["mission"], tmp_path, 2, "") == (False, "0 record(s): none")
    # A dashboard record holds the harness's columns only with device memory and dynamo's call count.
    dashboard = {**record("ok", code="PASS"), "measurements": {
        "graph_breaks": {"calls_captured": 321},
        "harness_warmup": {"eager": {"peak_memory_bytes": 2 * 10**9},
                           "compiled": {"peak_memory_bytes": 0, "dynamo_stats": {"calls_captured": 321}}}}}
    (tmp_path / "inductor-timm" / "results.jsonl").write_text(json.dumps(dashboard) + "\n")
    assert judge(steps["inductor-timm"], tmp_path, 0, "") == (
        False, "1 record(s): ok 1; verified 1 of 1 PASS; eval: memory 2.00/0.00 GB, calls_captured 321 (dynamo's 321)")
    dashboard["measurements"]["harness_warmup"]["compiled"]["peak_memory_bytes"] = 3 * 10**9
    (tmp_path / "inductor-timm" / "results.jsonl").write_text(json.dumps(dashboard) + "\n")
    assert judge(steps["inductor-timm"], tmp_path, 0, "")[0]
    crashed = {**record("crashed"), "error": {"message": "RuntimeError: Error in dlopen: undefined symbol\nmore"}}
    write(tmp_path / "check-aot-load", crashed)
    assert judge(steps["check-aot-load"], tmp_path, 0, "") == (
        True, "1 record(s): crashed 1; the loader crashed: RuntimeError: Error in dlopen: undefined symbol")
    write(tmp_path / "check-determinism", record("ok", code="NONDETERMINISTIC_EAGER_RUN"))
    assert judge(steps["check-determinism"], tmp_path, 0, "") == (
        False, "1 record(s): ok 1; verification ['NONDETERMINISTIC_EAGER_RUN']")
    assert judge(steps["expected-timm"], tmp_path, 1, "a\nb: 1 change(s)\n") == (False, "a / b: 1 change(s)")


def test_the_summary_has_a_row_per_step_and_says_when_no_harness_was_there(tmp_path: Path) -> None:
    steps = plan(tmp_path, None)
    write(tmp_path / "oom", record("oom"))
    outcomes = [Outcome(s.name, 0, 1.0, True, "fine") for s in steps]
    text = summary(tmp_path, steps, outcomes, 460, "2026-11-28 14:00 UTC")
    assert text.startswith("# GPU nightly, 2026-11-28 14:00 UTC")
    assert all(f"| {s.name} | {s.what} | 0 | 1.0 | yes | fine |" in text for s in steps)
    assert "Beside PyTorch's harness: not run, no dynamobench folder here" in text
    assert "| oom | dummy | inductor | eval fp32 | oom | - | 3.000 | - |" in text
    cut = summary(tmp_path, steps, outcomes[:2], 540, "2026-12-02 09:00 UTC")
    assert f"| {steps[2].name} | {steps[2].what} | - | - | no | not reached" in cut
