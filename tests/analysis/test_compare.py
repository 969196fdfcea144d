"""`experiment_runner compare`: flags real shifts, stays quiet on noise, says when it cannot tell."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Sequence

import pytest

from experiment_runner.analysis.regress import min_two_sided_p
from experiment_runner.cli import main as cli_main

MODELS = ("llama", "nanogpt", "resnet50", "dlrm", "BERT_pytorch")
SPREAD = 0.04  # +-4% uniform noise, the same on both sides


def record(run_id: str, model: str, samples: Sequence[float], status: str = "ok", ts: float = 1.7e9) -> dict:
    return {
        "schema_version": 1, "run_id": run_id,
        "experiment_id": f"torchbench/{model}/cpu-None-inductor-eval-fp32-bsdefault",
        "model": {"suite_name": "torchbench", "model_name": model, "source": "builtin"},
        "experiment": {"accelerator": "cpu", "xla": None, "xla_flags": None, "dynamo": "inductor",
                       "torch_xla2": None, "test": "eval", "batch_size": 4, "precision": "fp32"},
        "repeat": len(samples), "iterations_per_run": 1,
        "metrics": {"per_iter_time": list(samples)} if status == "ok" else {},
        "status": status, "verification_code": "VERIFIER_SKIPPED", "timestamp": ts,
    }


def noisy(rng: random.Random, base: float, n: int = 10, shift: float = 0.0) -> list[float]:
    return [base * (1 + shift) * (1 + rng.uniform(-SPREAD, SPREAD)) for _ in range(n)]


def write(path: Path, records: Sequence[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def two_runs(tmp_path: Path, seed: int, shifts: dict[str, float], n: int = 10) -> tuple[Path, Path]:
    rng = random.Random(seed)
    bases = {m: 0.01 * (i + 1) for i, m in enumerate(MODELS)}
    a = write(tmp_path / "a.jsonl", [record("run-a", m, noisy(rng, b, n)) for m, b in bases.items()])
    b = write(tmp_path / "b.jsonl", [record("run-b", m, noisy(rng, b, n, shifts.get(m, 0.0)), ts=1.8e9)
                                     for m, b in bases.items()])
    return a, b


def compare(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = cli_main(["compare", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def verdicts(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, dict[str, str]]:
    code, out, _ = compare(capsys, *argv, "--format", "json")
    return code, {c["model"]: c["verdict"] for c in json.loads(out)["comparisons"]}


def test_a_ten_percent_slowdown_is_flagged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_runs(tmp_path, seed=1, shifts={"resnet50": 0.10})
    code, out, _ = compare(capsys, a, b)
    assert code == 1
    assert "regression" in next(line for line in out.splitlines() if line.startswith("resnet50"))
    assert "result: REGRESSION (exit 1)" in out
    code, found = verdicts(capsys, a, b)
    assert found["resnet50"] == "regression"
    assert {v for m, v in found.items() if m != "resnet50"} == {"within threshold"}


@pytest.mark.parametrize("seed", range(8))
def test_noise_of_the_same_spread_without_a_shift_stays_quiet(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              seed: int) -> None:
    a, b = two_runs(tmp_path, seed=seed, shifts={})
    code, found = verdicts(capsys, a, b)
    assert code == 0
    assert not {"regression", "improvement"} & set(found.values())


def test_a_ten_percent_speedup_is_an_improvement_and_exits_zero(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_runs(tmp_path, seed=2, shifts={"llama": -0.10})
    code, found = verdicts(capsys, a, b)
    assert code == 0 and found["llama"] == "improvement"


def test_few_samples_say_significance_is_unreachable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_runs(tmp_path, seed=3, shifts={"dlrm": 0.30}, n=3)
    code, out, _ = compare(capsys, a, b)
    assert code == 0
    assert "not significant (too few samples)" in next(line for line in out.splitlines() if line.startswith("dlrm"))
    assert "significance is unreachable" in out and "3 vs 3" in out


def test_missing_experiments_and_new_failures_are_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(4)
    a = write(tmp_path / "a.jsonl", [record("run-a", "llama", noisy(rng, 0.01)),
                                     record("run-a", "nanogpt", noisy(rng, 0.01)),
                                     record("run-a", "dlrm", noisy(rng, 0.01))])
    b = write(tmp_path / "b.jsonl", [record("run-b", "llama", noisy(rng, 0.01)),
                                     record("run-b", "nanogpt", [], status="crashed"),
                                     record("run-b", "resnet50", noisy(rng, 0.01))])
    code, out, _ = compare(capsys, a, b)
    assert code == 1
    assert "new failure" in next(line for line in out.splitlines() if line.startswith("nanogpt"))
    assert "1 experiment(s) only in A:\n  torchbench/dlrm/" in out
    assert "1 experiment(s) only in B:\n  torchbench/resnet50/" in out


def test_one_file_compares_the_run_before_the_latest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_runs(tmp_path, seed=5, shifts={"nanogpt": 0.10})
    both = write(tmp_path / "both.jsonl", [json.loads(line) for p in (a, b) for line in p.read_text().splitlines()])
    code, out, _ = compare(capsys, both)
    assert code == 1 and "A: run run-a" in out and "B: run run-b" in out
    code, found = verdicts(capsys, both, "--run-a", "run-b", "--run-b", "run-a")
    assert code == 0 and found["nanogpt"] == "improvement"


def test_torn_last_line_is_skipped_with_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_runs(tmp_path, seed=6, shifts={"llama": 0.10})
    with open(b, "a") as handle:
        handle.write('{"schema_version": 1, "run_id": "run-b", "experim')
    code, out, err = compare(capsys, a, b)
    assert code == 1 and "regression" in out
    assert f"{b}:{len(MODELS) + 1}: skipped a corrupt or torn line" in err


@pytest.mark.parametrize(("argv", "code", "message"), [
    (["/no/such.jsonl", "/no/other.jsonl"], 3, "cannot read results file"),
    (["{a}", "{b}", "--run-a", "nope"], 2, "no run 'nope'"),
    (["{a}"], 2, "no run in"),
    (["{a}", "--run-a", "run-a", "--run-b", "run-a"], 2, "same run"),
    (["{a}", "{b}", "--threshold", "-1"], 2, "--threshold"),
    (["{a}", "{b}", "--alpha", "2"], 2, "--alpha"),
])
def test_bad_input_is_one_line_and_exit_2_or_3(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                argv: list[str], code: int, message: str) -> None:
    a, b = two_runs(tmp_path, seed=7, shifts={})
    got, out, err = compare(capsys, *(x.format(a=a, b=b) for x in argv))
    assert (got, out) == (code, "")
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_without_scipy_the_error_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = two_runs(tmp_path, seed=8, shifts={})
    monkeypatch.setitem(sys.modules, "scipy.stats", None)
    code, out, err = compare(capsys, a, b)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "needs scipy" in err


def test_ten_samples_per_side_can_reach_the_default_significance() -> None:
    assert min_two_sided_p(10, 10) == pytest.approx(1.0825e-5, rel=1e-3)
    assert min_two_sided_p(3, 3) == pytest.approx(0.1)
    assert min_two_sided_p(0, 10) == 1.0


def test_csv_holds_every_compared_experiment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_runs(tmp_path, seed=9, shifts={"dlrm": 0.10})
    code, out, _ = compare(capsys, a, b, "--format", "csv")
    lines = out.splitlines()
    assert code == 1 and len(lines) == 1 + len(MODELS)
    assert lines[0].startswith("experiment_id,model,configuration,")


def test_a_shift_inside_the_noise_is_shown_as_not_significant(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    before = [0.010 + 0.001 * i for i in range(10)]  # a 90% spread around 14.5 ms
    a = write(tmp_path / "a.jsonl", [record("run-a", "llama", before)])
    b = write(tmp_path / "b.jsonl", [record("run-b", "llama", [t * 1.08 for t in before])])
    code, out, _ = compare(capsys, a, b)
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("llama"))
    assert "+8.0%" in row and row.endswith("not significant")


def test_model_source_and_batch_size_are_part_of_what_compare_matches(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A built-in llama and TorchBench's are different experiments; so are two batch sizes."""
    rng = random.Random(7)
    real = record("run-b", "llama", noisy(rng, 0.01))
    real["model"]["source"] = "torchbenchmark"
    bigger = record("run-b", "dlrm", noisy(rng, 0.01))
    bigger["experiment"]["batch_size"] = 8
    a = write(tmp_path / "a.jsonl", [record("run-a", "llama", noisy(rng, 0.01)), record("run-a", "dlrm", noisy(rng, 0.01))])
    b = write(tmp_path / "b.jsonl", [real, bigger])
    code, out, _ = compare(capsys, a, b, "--format", "json")
    document = json.loads(out)
    assert document["only_in_a"] == ["torchbench/llama/cpu-None-inductor-eval-fp32-bsdefault"]
    assert document["only_in_b"] == ["torchbench/llama/cpu-None-inductor-eval-fp32-bsdefault [torchbenchmark]"]
    (dlrm,) = document["comparisons"]
    assert dlrm["verdict"] == "not comparable (batch size 4 vs 8)" and code == 0
