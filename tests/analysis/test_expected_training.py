"""A CUDA job's inference and training runs in check-expected and export: each test is gated
against its own PyTorch file (`<TEST_CONFIG>_inference.csv`, `<TEST_CONFIG>_training.csv`) and
written where the CI job writes it (`<TEST_CONFIG>/training_timm_models.csv`); a training run
moved to the CPU is said to be, and its differences still fail; a training record of PyTorch/XLA's
step is no job's."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path
from typing import Any

import pytest

from experiment_runner.analysis.expected import SHIPPED, read_expected
from experiment_runner.cli import main as cli_main

GOLDEN = Path(__file__).parents[1] / "golden" / "results.jsonl"
RUN_ID = "20260101T000000Z-cccccc"
# Two models of PyTorch's inductor timm files, with what both files expect of them.
MODELS = ("adv_inception_v3", "beit_base_patch16_224")
TIMM_BATCH = 8  # PyTorch's accuracy runs' timm batch (core/dashboards.json accuracy_batch_size)


def _template() -> dict[str, Any]:
    """The golden run's bf16 CUDA inductor inference record: a whole record to vary."""
    for line in GOLDEN.read_text().splitlines():
        record = json.loads(line)
        if (record["experiment"]["accelerator"], record["experiment"]["dynamo"]) == ("cuda", "inductor"):
            return record
    raise AssertionError("the golden run lost its CUDA inductor record")


def record(model: str, test: str, code: str = "PASS", accelerator: str = "cuda",
           experiment: dict[str, Any] | None = None) -> dict[str, Any]:
    """An inductor timm record of `model` as a `--dashboard=inductor` run writes it, with the graph
    breaks PyTorch's file expects of that test; `experiment` overrides its experiment fields."""
    expected = read_expected(SHIPPED / f"inductor_timm_{'training' if test == 'train' else 'inference'}.csv")
    breaks = int(expected[model]["graph_breaks"])
    out = copy.deepcopy(_template())
    out["run_id"] = RUN_ID
    out["experiment_id"] = f"timm/{model}/{accelerator}-None-inductor-{test}"
    out["model"] = {"suite_name": "timm", "model_name": model, "source": "builtin"}
    out["experiment"].update({
        "accelerator": accelerator, "test": test, "batch_size": TIMM_BATCH,
        "precision": "amp" if test == "train" else "bf16",
        "training_recipe": "dynamo_harness" if test == "train" else None,
        "dashboard": "inductor",
        "dashboard_overrides": {"accelerator": accelerator} if accelerator != "cuda" else {},
        **(experiment or {})})
    out["measurements"]["graph_breaks"] = {"total": breaks, "unique_graphs": 1, "harness_count": breaks}
    out["verification_code"] = code
    out["verification"] = {"code": code, "method": "harness", "tolerance": None, "details": {}}
    return out


def results(tmp_path: Path, records: list[dict[str, Any]]) -> str:
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def commit(name: str) -> str:
    """How a summary line names a shipped file's source: its commit, and the fork for a copy."""
    sources = json.loads((SHIPPED / "SOURCES.json").read_text())
    fork = sources.get("copies", {}).get(name)
    return sources["files"][name][:12] + (f" ({fork}'s copy)" if fork else "")


def both_tests(tmp_path: Path, train_code: str = "PASS", accelerator: str = "cuda") -> str:
    return results(tmp_path, [record(m, "eval") for m in MODELS]
                   + [record(m, "train", train_code if m == MODELS[1] else "PASS", accelerator) for m in MODELS])


def pytorch(capsys: pytest.CaptureFixture[str], path: str) -> tuple[int, list[str]]:
    code = cli_main(["check-expected", path, "--pytorch"])
    return code, capsys.readouterr().out.splitlines()


def summary(lines: list[str], name: str) -> str:
    (line,) = [line for line in lines if line.startswith(f"{name.removesuffix('.csv')}: 2 model(s) checked")]
    return line


def test_inference_and_training_are_each_checked_against_their_own_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The training file expects 6 and 7 graph breaks of the two models, the inference file none:
    compared with the other's file every model would differ."""
    code, out = pytorch(capsys, both_tests(tmp_path))
    assert code == 0, out
    for name in ("inductor_timm_inference.csv", "inductor_timm_training.csv"):
        assert f"checked against PyTorch's {name} @ {commit(name)}: as expected;" in summary(out, name), out
    for name in ("inductor_timm_inference.csv", "inductor_timm_training.csv"):  # both pytorch/pytorch's own
        assert "'s copy" not in summary(out, name)
    assert not any("accuracy" in line or "graph_breaks" in line or "device" in line for line in out), out

    code, out = pytorch(capsys, both_tests(tmp_path, train_code="FAIL"))
    assert code == 1
    # printed after the inference group's summary: it names its own group (it named none)
    change = "inductor_timm_training: beit_base_patch16_224: accuracy pass -> fail_accuracy (regression)"
    assert out.index(summary(out, "inductor_timm_inference.csv")) < out.index(change), out
    assert ": 1 change(s) (exit 1);" in summary(out, "inductor_timm_training.csv")
    assert ": as expected;" in summary(out, "inductor_timm_inference.csv")


def test_a_training_run_moved_to_the_cpu_is_said_and_its_differences_still_fail(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--dashboard=inductor --accelerator=cpu --test=train`: PyTorch's training file was written on
    CUDA; one line says so, each difference is marked as possibly the device's, the gate still fails."""
    device = ("inductor_timm_training: PyTorch's inductor_timm_training.csv was written on CUDA; this run was on "
              "the CPU: a difference below may be the device's, not the compiler's, and still fails the gate")
    code, out = pytorch(capsys, both_tests(tmp_path, accelerator="cpu"))
    assert code == 0 and out.count(device) == 1, out
    assert not any("written on" in line for line in out if line.startswith("inductor_timm_inference")), out

    code, out = pytorch(capsys, both_tests(tmp_path, train_code="FAIL", accelerator="cpu"))
    assert code == 1 and device in out, out
    assert "inductor_timm_training: beit_base_patch16_224: accuracy pass -> fail_accuracy (regression); " \
           "possibly the device's (ran on the " \
           "CPU, the file on CUDA)" in out
    assert out.index(device) < out.index(summary(out, "inductor_timm_training.csv"))


def test_expected_takes_pytorchs_training_file_unchanged(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """By its own name, PyTorch's training file picks the job's training records and no others."""
    path = both_tests(tmp_path)
    theirs = tmp_path / "inductor_timm_training.csv"
    theirs.write_bytes((SHIPPED / theirs.name).read_bytes())
    assert cli_main(["check-expected", path, "--expected", str(theirs)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert summary(out, theirs.name).startswith(f"inductor_timm_training: 2 model(s) checked against {theirs}: "
                                                "as expected;"), out

    # The same file given an inference group is refused: a training file never gates inference.
    group = "inductor_timm_models_bfloat16_inference_cuda"
    assert cli_main(["check-expected", path, "--expected", str(theirs), "--group", group]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"experiment_runner check-expected: error: inductor_timm_training.csv is named as PyTorch names "
                   f"the expected file of a training run; {group} is no training group: choose one with --group"], err


def test_export_writes_each_run_where_the_ci_job_writes_it(tmp_path: Path) -> None:
    out = tmp_path / "csv"
    assert cli_main(["export", both_tests(tmp_path), "--format", "dynamo-csv", "-o", str(out)]) == 1  # no baseline
    assert {str(p.relative_to(out)) for p in out.rglob("*.csv")} == {
        "inductor_timm/inference_timm_models.csv", "inductor_timm/training_timm_models.csv",
        "inductor_timm_models_bfloat16_inference_cuda_accuracy.csv",
        "inductor_timm_models_amp_training_cuda_accuracy.csv"}
    trained = read_expected(SHIPPED / "inductor_timm_training.csv")
    for name, breaks in (("inductor_timm/training_timm_models.csv", [trained[m]["graph_breaks"] for m in MODELS]),
                         ("inductor_timm_models_amp_training_cuda_accuracy.csv",
                          [trained[m]["graph_breaks"] for m in MODELS]),
                         ("inductor_timm/inference_timm_models.csv", ["0"] * len(MODELS))):
        rows = list(csv.DictReader((out / name).read_text().splitlines()))
        assert [(r["dev"], r["name"], r["accuracy"], r["graph_breaks"]) for r in rows] == [
            ("cuda", m, "pass", b) for m, b in zip(MODELS, breaks)], name


@pytest.mark.parametrize("experiment", [
    {"training_recipe": "pytorch_xla", "dashboard": None, "dashboard_overrides": None},  # as the runner records it
    {"training_recipe": "pytorch_xla"},  # without the dashboard field: read through core/dashboards.json
], ids=["recorded", "derived"])
def test_a_training_record_of_the_default_recipe_is_no_job_s(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              experiment: dict[str, Any]) -> None:
    """PyTorch/XLA's training step is not the harness's: its records are neither exported under nor
    gated against a job's file, whatever their settings."""
    train = [record(m, "train", experiment=experiment) for m in MODELS]
    for r in train:
        if "dashboard" not in experiment:
            del r["experiment"]["dashboard"], r["experiment"]["dashboard_overrides"]
    path = results(tmp_path, train)
    out = tmp_path / "csv"
    assert cli_main(["export", path, "--format", "dynamo-csv", "-o", str(out)]) == 1  # no baseline
    assert sorted(p.name for p in out.rglob("*.csv")) == ["inductor_timm_models_amp_training_cuda_accuracy.csv"]
    capsys.readouterr()
    assert cli_main(["check-expected", path, "--pytorch"]) == 2
    assert "the run has no experiment of a PyTorch dashboard configuration" in capsys.readouterr().err

    # The same records with the harness's step are the job's, with or without the dashboard field.
    for r in train:
        r["experiment"]["training_recipe"] = "dynamo_harness"
        if "dashboard" in r["experiment"]:
            r["experiment"]["dashboard"] = "inductor"
    code, lines = pytorch(capsys, results(tmp_path, train))
    assert code == 0 and ": as expected;" in summary(lines, "inductor_timm_training.csv"), lines


def test_the_record_s_own_dashboard_wins_over_its_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A record that names no job (say, written before its settings' job was described) stays no
    job's, though core/dashboards.json would now read its settings as inductor's."""
    path = results(tmp_path, [record(m, "eval", experiment={"dashboard": None, "dashboard_overrides": None})
                              for m in MODELS])
    assert cli_main(["check-expected", path, "--pytorch"]) == 2
    assert "the run has no experiment of a PyTorch dashboard configuration" in capsys.readouterr().err


def test_a_training_runs_graph_breaks_without_the_harness_count_are_said_to_be_this_runners_count(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A training record without the harness's count (run without --verify) holds this runner's
    count of every frame compiled: a difference in that column says whose count it is, and still
    fails the gate. With the replayed count that count is compared, and gets no such note."""
    want = int(read_expected(SHIPPED / "inductor_timm_training.csv")[MODELS[0]]["graph_breaks"])
    trained = record(MODELS[0], "train")
    trained["measurements"]["graph_breaks"] = {"total": 10, "unique_graphs": 6}
    code, out = pytorch(capsys, results(tmp_path, [trained, record(MODELS[0], "eval")]))
    assert code == 1
    assert f"inductor_timm_training: {MODELS[0]}: graph_breaks {want} -> 10 (regression); this runner's count of every frame compiled, " \
           "not the harness's (replayed only with --verify)" in out, out
    assert not any("not the harness's" in line for line in out if "inference" in line), out

    method = "replayed with optimizer Adam(lr=0.01, capturable=True, foreach=True), the harness's on cuda"
    trained["measurements"]["graph_breaks"].update(harness_count=want, harness_count_method=method)
    (tmp_path / "replayed").mkdir()
    code, out = pytorch(capsys, results(tmp_path / "replayed", [trained, record(MODELS[0], "eval")]))
    assert not any(f"{MODELS[0]}: graph_breaks" in line for line in out), out
    assert not any("not the harness's" in line for line in out), out


def test_a_cuda_record_takes_the_top_level_file_whatever_its_cuda_version(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """test.sh @ 0033967f gates every CUDA job against ci_expected_accuracy/<TEST_CONFIG>_<name>.csv,
    whatever the build's CUDA version: a cu124 build (PyTorch's repository has a cu124/ folder, which
    that script never reads) is checked against the same file as any other."""
    records = [record(m, "eval") for m in MODELS]
    for built in records:
        built["environment"] = {**built["environment"], "torch": "2.5.1+cu124"}
    code, out = pytorch(capsys, results(tmp_path, records))
    name = "inductor_timm_inference.csv"
    assert code == 0 and f"checked against PyTorch's {name} @ {commit(name)}: as expected;" in summary(out, name)
    assert not (SHIPPED / "cu124").exists()


def test_a_performance_modes_records_are_gated_by_no_expected_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """PyTorch's performance dashboard checks no expected file: its modes' records stay out of
    --pytorch's groups, and a run of them alone is told so."""
    mode = {"dashboard": "inductor_with_cudagraphs", "batch_size": 64, "dashboard_overrides": {}}
    performance = [record(m, "eval", "FAIL", experiment=mode) for m in MODELS]
    for own in performance:
        own["experiment_id"] += "-inductor_with_cudagraphs"
    code, out = pytorch(capsys, results(tmp_path, [record(m, "eval") for m in MODELS] + performance))
    assert code == 0 and not any("inductor_with_cudagraphs" in line for line in out), out
    assert cli_main(["check-expected", results(tmp_path, performance), "--pytorch"]) == 2
    assert "the performance dashboard's modes have no expected file" in capsys.readouterr().err

    # export keeps the two apart: the mode's CSVs are named as its CI job names them, and only the
    # accuracy job has a file where test_single_dynamo_benchmark writes it.
    out = tmp_path / "csv"
    both = results(tmp_path, [record(m, "eval") for m in MODELS] + performance)
    assert cli_main(["export", both, "--format", "dynamo-csv", "-o", str(out)]) == 1  # no baseline
    assert {str(p.relative_to(out)) for p in out.rglob("*.csv")} == {
        "inductor_timm/inference_timm_models.csv", "inductor_timm_models_bfloat16_inference_cuda_accuracy.csv",
        "inductor_with_cudagraphs_timm_models_bfloat16_inference_cuda_accuracy.csv"}
    rows = list(csv.DictReader((out / "inductor_with_cudagraphs_timm_models_bfloat16_inference_cuda_accuracy.csv")
                               .read_text().splitlines()))
    assert [(r["name"], r["accuracy"]) for r in rows] == [(m, "fail_accuracy") for m in MODELS]
