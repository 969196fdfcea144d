"""`compare --confirm` and `history --confirm` when the reruns cannot judge: the alert stands.

A rerun that cannot start (its confirm/ folder is a file, its plugin suite is not importable
in the rerun's environment) or that the runner ends with a failure confirms nothing, and
clears nothing: unconfirmable is not unconfirmed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from experiment_runner.analysis import confirm
from test_compare import compare, two_runs
from test_history import history, legacy


def failing_rerun(code: int, stderr: str):
    """subprocess.run as a rerun that exits `code` before writing any record."""
    calls: list[list[str]] = []

    def run(command: list[str], **_: Any) -> subprocess.CompletedProcess:
        calls.append(command)
        return subprocess.CompletedProcess(command, code, "", stderr)

    return run, calls


@pytest.mark.parametrize(("code", "stderr"), [
    (3, "experiment_runner: error: cannot write results file out/confirm/results.jsonl: Not a directory"),
    (2, "experiment_runner: error: unknown suite 'faulty'; choose from dummy, torchbench, huggingface, timm"),
    (1, "experiment_runner: internal error (a bug in the runner, not in your input)"),
])
def test_compare_keeps_a_regression_whose_rerun_cannot_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch, code: int,
                                                           stderr: str) -> None:
    a, b = two_runs(tmp_path, seed=1, shifts={"resnet50": 0.10})
    run, calls = failing_rerun(code, stderr)
    monkeypatch.setattr(confirm.subprocess, "run", run)
    got, out, _ = compare(capsys, a, b, "--confirm", "--confirm-processes", 2)
    assert calls, "the regression was rerun"
    assert got == 1, out
    header = out.split("confirmation: ", 1)[1].splitlines()
    assert header[0] == ("1 suspect(s) rerun with --processes 2; 0 upheld, 1 could not be confirmed "
                         "(their alerts stand) (exit 1)"), out
    assert header[1].split()[:3] == ["CANNOT", "CONFIRM", "time"], out
    assert f"the rerun exited with status {code}: {stderr}" in header[1]
    assert "result: REGRESSION (exit 1)" in out and "NOT CONFIRMED" not in out


def test_history_keeps_an_alert_whose_rerun_cannot_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "nightly.jsonl"
    path.write_text("".join(legacy("alexnet", 1.7e9 + 86400 * n, [0.01] * 5 if n < 7 else None,
                                   error=None if n < 7 else "RuntimeError: boom") for n in range(8)))
    run, _ = failing_rerun(3, "experiment_runner: error: cannot write results file confirm/results.jsonl")
    monkeypatch.setattr(confirm.subprocess, "run", run)
    got, out, _ = history(capsys, path, "--window", 3, "--confirm")
    assert got == 1, out
    assert "0 upheld, 1 could not be confirmed (their alerts stand) (exit 1)" in out
    assert "CANNOT CONFIRM  status" in out


def test_a_rerun_with_no_figure_to_judge_is_not_a_verdict() -> None:
    """A rerun that ends in an error measured no time: it cannot clear a slowdown."""
    from test_compare import record

    from experiment_runner.analysis.loader import flatten

    row = flatten(record("r", "llama", [], status="error"), "x.jsonl")
    suspect = confirm.Suspect("torchbench/llama/cpu", "time", 0.01, 0.02, None)
    upheld, _, reason = confirm.judge(suspect, row, 0.0, 0.05)
    assert upheld is None and reason == "the reruns ended error, with no time to compare"
    assert confirm.judge(suspect, None, 0.0, 0.05)[0] is None
