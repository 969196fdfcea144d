"""`export` and `check-expected`: a fixed results file in PyTorch's formats (golden files), the
v3 records against their schema, a round trip through pandas against `report`, and the CI gate."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

import pytest

from experiment_runner.analysis.expected import SHIPPED
from experiment_runner.analysis.harness_rows import DATA
from experiment_runner.cli import main as cli_main

GOLDEN = Path(__file__).parents[1] / "golden"
RESULTS = GOLDEN / "results.jsonl"
EXPORT = GOLDEN / "export"
ACCURACY = "inductor_torchbench_float32_inference_cpu_accuracy.csv"


def export(tmp_path: Path, fmt: str) -> Path:
    out = tmp_path / ("export.json" if fmt == "pytorch-benchmark" else "csv")
    assert cli_main(["export", str(RESULTS), "--format", fmt, "-o", str(out)]) == 0
    return out


def check_golden(produced: Path, golden: Path) -> None:
    if os.environ.get("EXPERIMENT_RUNNER_UPDATE_GOLDEN"):
        golden.write_text(produced.read_text())
    assert produced.read_text() == golden.read_text(), f"{produced} differs from {golden}"


def test_the_golden_run_exports_byte_for_byte(tmp_path: Path) -> None:
    folder = export(tmp_path, "dynamo-csv")
    names = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.csv"))
    assert names == sorted(str(p.relative_to(EXPORT)) for p in EXPORT.rglob("*.csv"))
    # The dashboard configurations' accuracy CSVs where PyTorch's CI jobs write them.
    assert {"cpu_inductor_torchbench/inference_torchbench.csv",
            "inductor_torchbench/inference_torchbench.csv"} <= set(names)
    for name in names:
        check_golden(folder / name, EXPORT / name)
    check_golden(export(tmp_path, "pytorch-benchmark"), EXPORT / "pytorch_benchmark.json")


def test_v3_records_follow_the_schema_with_dashboard_metric_names(tmp_path: Path) -> None:
    import jsonschema

    schema = json.loads((DATA / "pytorch_benchmark_v3.schema.json").read_text())
    records = [json.loads(line) for line in export(tmp_path, "pytorch-benchmark").read_text().splitlines()]
    assert records
    for record in records:
        jsonschema.validate(record, schema)
    accuracy = [r for r in records if r["metric"]["name"] == "accuracy"]
    assert {r["model"]["name"]: r["metric"]["extra_info"]["benchmark_values"][0] for r in accuracy
            if r["benchmark"]["extra_info"]["output"] == ACCURACY} == {
        "dlrm": "timeout", "llama": "pass", "nanogpt": "pass", "resnet50": "fail_accuracy"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**records[0], "metric": {"name": "latency", "benchmark_values": [1.0]}}, schema)


def test_cache_bench_measurements_export_as_cachebench_records(tmp_path: Path) -> None:
    import jsonschema

    records = [json.loads(line) for line in RESULTS.read_text().splitlines()]
    nanogpt = [r for r in records if r["model"]["model_name"] == "nanogpt" and r["experiment"]["dynamo"] == "inductor"
               and r["experiment"]["precision"] == "fp32" and r["experiment"]["test"] == "eval"][-1]
    assert nanogpt["status"] == "ok"  # the latest run's final record: the one export reads
    nanogpt["measurements"].update({"cold_compile_time_s": 8.0, "warm_compile_time_s": 2.0,
                                    "cache_bench": {"warm_speedup_pct": 75.0}})
    nanogpt["experiment"]["compile_options"] = "dynamic"  # --compile-options=dynamic: cachebench's is_dynamic
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "export.json"
    assert cli_main(["export", str(results), "--format", "pytorch-benchmark", "-o", str(out)]) == 0
    exported = [json.loads(line) for line in out.read_text().splitlines()]
    schema = json.loads((DATA / "pytorch_benchmark_v3.schema.json").read_text())
    for record in exported:
        jsonschema.validate(record, schema)
    cache = [r for r in exported if r["benchmark"]["name"] == "TorchCache Benchmark"]
    assert {r["metric"]["name"]: r["metric"]["benchmark_values"] for r in cache} == {
        "Cold compile time (s)": [8.0], "Warm compile time (s)": [2.0], "Speedup (%)": [75.0]}
    assert {(r["model"]["name"], r["benchmark"]["mode"], r["benchmark"]["extra_info"]["device"]) for r in cache} == {
        ("nanogpt", "inference", "cpu")}
    assert all(r["benchmark"]["extra_info"]["is_dynamic"] is True for r in cache)
    assert len(exported) == len(out.read_text().splitlines()) == len(
        (EXPORT / "pytorch_benchmark.json").read_text().splitlines()) + 3
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**cache[0], "metric": {"name": "speedup", "benchmark_values": [1.0]}}, schema)


def test_the_csvs_read_back_with_pandas_give_reports_geomean_and_pass_rate(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import pandas as pd

    folder = export(tmp_path, "dynamo-csv")
    capsys.readouterr()
    assert cli_main(["report", str(RESULTS), "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    checked = unchecked_groups = 0
    for performance in folder.glob("*_performance.csv"):
        compiler, _suite, dtype, mode, device = performance.name.removesuffix("_performance.csv").split("_")
        speedups = pd.read_csv(performance)["speedup"]
        accuracy = pd.read_csv(folder / performance.name.replace("_performance", "_accuracy"))
        (expected,) = [s for s in summary if s["configuration"].endswith(f"dynamo={compiler}")
                       and s["test"] == {"inference": "eval", "training": "train"}[mode]
                       and s["accelerator"] == device and dtype.startswith({"fp32": "float32", "bf16": "bfloat16"}
                                                                           [s["precision"]])]
        geomean = math.exp(sum(map(math.log, speedups)) / len(speedups))
        assert geomean == pytest.approx(expected["speedup_geomean"], rel=1e-5)
        # neither calls a record run without --verify a pass: report counts it as not checked
        unchecked = int((accuracy["accuracy"] == "infra_error").sum())
        assert int((accuracy["accuracy"] == "pass").sum()) == expected["passed"]
        assert expected["checked"] == len(accuracy) - unchecked
        assert (expected["pass_rate"] is None) == (unchecked == len(accuracy))
        checked += 1
        unchecked_groups += unchecked > 0
    assert checked == 4 and unchecked_groups == 2  # the golden run's training and CUDA rows had no --verify


def test_a_performance_csv_without_a_row_is_not_written_and_says_why(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A run of compiled experiments alone (no eager baseline, no paired speedup) has no speedup to
    report: its performance CSV is left out with one line saying why and how to get one, exit 1."""
    records = [json.loads(line) for line in RESULTS.read_text().splitlines()]
    compiled = [r for r in records if r["experiment"]["dynamo"] is not None]
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in compiled))
    out = tmp_path / "csv"
    assert cli_main(["export", str(results), "--format", "dynamo-csv", "-o", str(out)]) == 1
    err = capsys.readouterr().err.splitlines()
    missing = out / "inductor_torchbench_float32_inference_cpu_performance.csv"
    assert f"experiment_runner export: {missing} not written: none of its 4 experiment(s) has a speedup: the run " \
           "has no eager baseline for them: plan one beside them (--dynamo=None), or time it in their own process " \
           "(--speedup=harness, a --dashboard run's default)" in err
    assert not list(out.glob("*_performance.csv"))
    assert (out / ACCURACY).read_text().count("\n") == 5  # the accuracy rows are still written


def test_a_speedup_of_another_step_than_the_harness_s_is_never_its_figure(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """An LLM entry's record says it timed a forward pass where the harness times generate()
    (environment.timed_step, as the huggingface suite sets it): its row leaves the performance CSV
    with one line saying so, its accuracy row stays, the others are untouched."""
    from benchmark_models.huggingface import LLM_FORWARD_ONLY

    records = [json.loads(line) for line in RESULTS.read_text().splitlines()]
    group = [r for r in records if r["experiment"]["dynamo"] == "inductor" and r["experiment"]["test"] == "eval"
             and r["experiment"]["accelerator"] == "cpu"]
    name = group[0]["model"]["model_name"]
    for record in group:  # in every run of the file: export takes the newest
        if record["model"]["model_name"] == name:
            record["environment"]["timed_step"] = LLM_FORWARD_ONLY
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "csv"
    assert cli_main(["export", str(results), "--format", "dynamo-csv", "-o", str(out)]) == 1
    performance = out / "inductor_torchbench_float32_inference_cpu_performance.csv"
    assert (f"experiment_runner export: {performance} row {name} not written: it timed {LLM_FORWARD_ONLY}, so its "
            "speedup is not the harness's figure") in capsys.readouterr().err.splitlines()
    golden = (EXPORT / performance.name).read_text().splitlines()
    assert performance.read_text().splitlines() == [line for line in golden if not line.startswith(f"cpu,{name},")]
    assert len(golden) == len(performance.read_text().splitlines()) + 1
    assert f",{name}," in (out / ACCURACY).read_text()


def test_an_unknown_verification_code_is_the_reason_given_not_the_baseline(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Compiled experiments alone, with a code this reader does not know: it said "no eager
    baseline", yet a baseline would not have given them a speedup."""
    records = [json.loads(line) for line in RESULTS.read_text().splitlines()]
    compiled = [{**r, "verification_code": "SOMETHING_NEWER"} for r in records if r["experiment"]["dynamo"] is not None]
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in compiled))
    out = tmp_path / "csv"
    assert cli_main(["export", str(results), "--format", "dynamo-csv", "-o", str(out)]) == 1
    missing = out / "inductor_torchbench_float32_inference_cpu_performance.csv"
    assert f"experiment_runner export: {missing} not written: none of its 4 experiment(s) has a speedup: " \
           "SOMETHING_NEWER is no verification code this reader knows (a newer runner's?), so no verdict, and a " \
           "timing without one is not exported: export with the runner that wrote them" \
        in capsys.readouterr().err.splitlines()


def test_check_expected_gates_on_status_and_graph_breaks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expected = tmp_path / "expected.csv"
    group = ["--group", ACCURACY.removesuffix("_accuracy.csv")]
    assert cli_main(["check-expected", str(RESULTS), "--expected", str(expected), *group, "--update"]) == 0
    assert expected.read_text().splitlines()[0] == "name,accuracy,graph_breaks"
    capsys.readouterr()
    assert cli_main(["check-expected", str(RESULTS), "--expected", str(expected), *group]) == 0
    assert capsys.readouterr().out.strip().endswith("as expected")

    lines = expected.read_text().splitlines()
    changed = [line.replace("resnet50,fail_accuracy,0", "resnet50,pass,0").replace("llama,pass,0", "llama,pass,2")
               for line in lines]
    expected.write_text("\n".join(changed) + "\n")
    assert cli_main(["check-expected", str(RESULTS), "--expected", str(expected), *group]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "resnet50: accuracy pass -> fail_accuracy (regression)" in out
    assert "llama: graph_breaks 2 -> 0 (improvement)" in out
    assert cli_main(["check-expected", str(RESULTS), "--expected", str(expected), *group, "--update"]) == 0
    assert cli_main(["check-expected", str(RESULTS), "--expected", str(expected), *group]) == 0


def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["check-expected", str(RESULTS), "--expected", str(tmp_path / "none.csv")]) == 2  # 4 groups
    assert "choose --group" in capsys.readouterr().err
    group = ["--group", ACCURACY.removesuffix("_accuracy.csv")]
    assert cli_main(["check-expected", str(RESULTS), "--expected", str(tmp_path / "none.csv"), *group]) == 3
    assert cli_main(["check-expected", str(RESULTS), "--expected", str(tmp_path / "none.csv"),
                     "--group", "inductor_torchbench_float16_inference_cpu"]) == 2
    err = capsys.readouterr().err
    assert "--group inductor_torchbench_float16_inference_cpu: the run has no such group; it has " in err
    assert "inductor_torchbench_float32_inference_cpu" in err and "choose --group" not in err
    (tmp_path / "bad.csv").write_text("model,status\nx,pass\n")
    assert cli_main(["check-expected", str(RESULTS), "--expected", str(tmp_path / "bad.csv"), *group]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not an expected-results file" in err[-1]
    assert cli_main(["export", str(RESULTS), "--format", "dynamo-csv", "-o", "/dev/null/x"]) == 3
    capsys.readouterr()
    for fmt, out in (("pytorch-benchmark", tmp_path / "no" / "such" / "x.jsonl"),
                     ("dynamo-csv", tmp_path / "no" / "csv")):
        assert cli_main(["export", str(RESULTS), "--format", fmt, "-o", str(out)]) == 3
        assert capsys.readouterr().err.splitlines() == [
            f"experiment_runner export: error: -o {out}: the folder {out.parent} does not exist; create it first "
            "(export creates only its output)"]
    assert not (tmp_path / "no").exists()


def test_check_expected_takes_pytorchs_files_shipped_or_named_as_pytorch_names_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # --pytorch: the golden run's fp32 CPU inductor inference is PyTorch's cpu_inductor configuration.
    assert cli_main(["check-expected", str(RESULTS), "--pytorch"]) == 1
    out = capsys.readouterr().out.splitlines()
    summary = next(line for line in out if line.startswith("cpu_inductor_torchbench_inference: 4 model(s) checked"))
    commit = json.loads((SHIPPED / "SOURCES.json").read_text())["files"]["cpu_inductor_torchbench_inference.csv"]
    assert f"PyTorch's cpu_inductor_torchbench_inference.csv @ {commit[:12]}" in summary
    # PyTorch expects a pass; the run has two groups: each line names its own
    assert "cpu_inductor_torchbench_inference: resnet50: accuracy pass -> fail_accuracy (regression)" in out
    absent = next(line for line in out if "not in this run" in line)
    expected_models = (SHIPPED / "cpu_inductor_torchbench_inference.csv").read_text().splitlines()[1:]
    lacking = sorted({line.split(",")[0] for line in expected_models if line} - {"dlrm", "llama", "nanogpt",
                                                                                  "resnet50"})
    # listed, not counted as changes: the first five, then how many more
    assert absent == f"cpu_inductor_torchbench_inference: {len(lacking)} model(s) of " \
                     f"cpu_inductor_torchbench_inference.csv not in this run: {', '.join(lacking[:5])}, ... and " \
                     f"{len(lacking) - 5} more (--list-absent names them all)"
    assert cli_main(["check-expected", str(RESULTS), "--pytorch", "--list-absent"]) == 1
    absent = next(line for line in capsys.readouterr().out.splitlines() if "not in this run" in line)
    assert absent.endswith(f"not in this run: {', '.join(lacking)}")
    # The golden run's bf16 CUDA inductor inference is PyTorch's inductor job, against its own file.
    cuda = json.loads((SHIPPED / "SOURCES.json").read_text())["files"]["inductor_torchbench_inference.csv"]
    assert "inductor_torchbench_inference: 0 model(s) checked against PyTorch's inductor_torchbench_inference.csv " \
           f"@ {cuda[:12]}: 1 model(s) not checked (exit 1); 69 expected model(s) not in this run" in out

    # PyTorch's file unchanged, by its own name: it picks that configuration's experiments, no --group.
    theirs = tmp_path / "cpu_inductor_torchbench_inference.csv"
    theirs.write_bytes((SHIPPED / theirs.name).read_bytes())
    assert cli_main(["check-expected", str(RESULTS), "--expected", str(theirs)]) == 1
    assert capsys.readouterr().out.splitlines()[-1].startswith("cpu_inductor_torchbench_inference: 4 model(s) checked")
    assert cli_main(["check-expected", str(RESULTS), "--pytorch", "--update"]) == 2
    assert "never PyTorch's shipped ones" in capsys.readouterr().err


def test_a_suites_expected_file_checked_against_another_suites_group_is_warned_of(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """timm's expected file against the golden run's torchbench group: every row read as absent
    or new, and nothing said it was the wrong file."""
    theirs = tmp_path / "inductor_timm_inference.csv"
    theirs.write_bytes((SHIPPED / theirs.name).read_bytes())
    group = ACCURACY.removesuffix("_accuracy.csv")
    assert cli_main(["check-expected", str(RESULTS), "--expected", str(theirs), "--group", group]) == 1
    assert "experiment_runner check-expected: warning: inductor_timm_inference.csv is named as PyTorch names " \
           f"timm's expected file; {group} holds torchbench models: check it against its own suite's file" \
        in capsys.readouterr().err.splitlines()
    own = tmp_path / "cpu_inductor_torchbench_inference.csv"
    own.write_bytes((SHIPPED / own.name).read_bytes())
    cli_main(["check-expected", str(RESULTS), "--expected", str(own), "--group", group])
    assert "warning" not in capsys.readouterr().err


def test_shipped_expected_files_are_pytorchs_and_read_as_its_checks_read_them() -> None:
    from experiment_runner.analysis.expected import read_expected
    from experiment_runner.core import dashboards

    sources = json.loads((SHIPPED / "SOURCES.json").read_text())["files"]
    wanted = {d.expected_file(suite, run.test) for d in dashboards.dashboards().values() for run in d.runs
              for suite in ("torchbench", "huggingface", "timm")} - {None}  # a performance mode has none
    assert set(sources) == {p.name for p in SHIPPED.glob("*.csv")}
    # Every job's file for each of its runs but two, which the index of PyTorch's files lacked on 2026-11-28.
    assert wanted - set(sources) == {"dynamic_inductor_timm_inference.csv", "dynamic_aot_eager_timm_inference.csv"}
    assert set(sources) <= wanted
    for name in sources:
        rows = read_expected(SHIPPED / name)  # blank lines and extra columns, as PyTorch keeps them
        assert rows and all(row["accuracy"] and row["graph_breaks"].isdigit() for row in rows.values())


def test_check_expected_names_models_run_at_another_batch_than_pytorchs_accuracy_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # PyTorch's accuracy runs take torchbench at batch 4 (the golden run's); one model at 2 is named.
    lines = []
    for line in RESULTS.read_text().splitlines():
        record = json.loads(line)
        if record.get("model", {}).get("model_name") == "resnet50":
            record["experiment"]["batch_size"] = 2
        lines.append(json.dumps(record))
    results = tmp_path / "results.jsonl"
    results.write_text("\n".join(lines) + "\n")
    assert cli_main(["check-expected", str(results), "--pytorch"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "cpu_inductor_torchbench_inference: 1 model(s) ran at another batch size than PyTorch's accuracy runs " \
           "(batch 4): resnet50; rerun them with --batch-size=4 before reading a difference as the " \
           "compiler's" in out
    assert cli_main(["check-expected", str(RESULTS), "--pytorch"]) == 1
    assert not any("another batch size" in line for line in capsys.readouterr().out.splitlines())


def test_dynamo_csv_checks_every_target_before_writing_any(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 53: a CI job's folder that was a file stopped the export half way (exit 3) after
    other CSVs were written. Now every target is checked first: one line, nothing written."""
    out = tmp_path / "csv"
    out.mkdir()
    (out / "inductor_torchbench").write_text("not a folder\n")
    assert cli_main(["export", str(RESULTS), "--format", "dynamo-csv", "-o", str(out)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"experiment_runner export: error: cannot write {out}/inductor_torchbench/inference_torchbench.csv: "
                   f"{out}/inductor_torchbench is a file, not a folder; nothing was written"], err
    assert [p.name for p in out.iterdir()] == ["inductor_torchbench"]


@pytest.mark.parametrize(("environment", "cpu_info"), [
    ({"platform": "Linux-6.8.0-x86_64-with-glibc2.36", "cpu": {"model_name": "Intel(R) Xeon(R) Platinum 8480+"}},
     "Intel(R) Xeon(R) Platinum 8480+"),
    ({"platform": "Linux-6.8.0-x86_64-with-glibc2.36", "cpu": {"model_name": None}}, "Linux-6.8.0-x86_64-with-glibc2.36"),
])
def test_the_runners_cpu_info_is_the_processors_model_name(tmp_path: Path, environment: dict, cpu_info: str) -> None:
    """cpu_info names the processor (environment.cpu.model_name, from the running host's
    /proc/cpuinfo); only a record without one falls back to its platform string."""
    records = [json.loads(line) for line in RESULTS.read_text().splitlines()]
    for record in records:
        record["environment"] = {**record["environment"], **environment}
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "bench.jsonl"
    assert cli_main(["export", str(results), "--format", "pytorch-benchmark", "-o", str(out)]) == 0
    exported = [json.loads(line) for line in out.read_text().splitlines()]
    assert exported and {r["runners"][0]["cpu_info"] for r in exported} == {cpu_info}


@pytest.mark.parametrize(("accelerator", "scale"), [("cpu", 100), ("cuda", 1)])
def test_the_harness_warmups_give_its_memory_compile_and_dynamo_columns(tmp_path: Path, accelerator: str,
                                                                          scale: int) -> None:
    """A record with the warm-ups measured as the harness measures them (measurements.harness_warmup)
    exports its figures: memory in its unit (100 x the resident set in GB on the CPU, psutil's
    memory_percent() times the RAM; device GB on CUDA), their ratio, the compiled warm-up's time less
    the eager one's, and the counters' change over the compiled warm-up, calls captured included."""
    records = [json.loads(line) for line in RESULTS.read_text().splitlines()]
    nanogpt = [r for r in records if r["model"]["model_name"] == "nanogpt" and r["experiment"]["dynamo"] == "inductor"
               and r["experiment"]["precision"] == "fp32" and r["experiment"]["test"] == "eval"][-1]
    stats = {"calls_captured": 545, "unique_graphs": 1, "fallbacks_to_eager": 0, "graph_breaks": 0,
             "unique_graph_breaks": 0, "autograd_captures": 0, "autograd_compiles": 0, "cudagraph_skips": 2}
    nanogpt["measurements"]["harness_warmup"] = {
        "eager": {"iterations": 5, "latency_s": 0.5, "peak_memory_bytes": 2_508_668_930},
        "compiled": {"iterations": 5, "latency_s": 39.0, "peak_memory_bytes": 2_715_369_470, "dynamo_stats": stats}}
    for record in records:
        record["experiment"]["accelerator"] = accelerator
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "csv"
    assert cli_main(["export", str(results), "--format", "dynamo-csv", "-o", str(out)]) == 0
    import pandas as pd

    table = pd.read_csv(out / f"inductor_torchbench_float32_inference_{accelerator}_performance.csv")
    row = table[table["name"] == "nanogpt"].iloc[0]
    assert row["eager_peak_mem"] == pytest.approx(2.508669 * scale, rel=1e-6)
    assert row["dynamo_peak_mem"] == pytest.approx(2.715369 * scale, rel=1e-6)
    assert row["compression_ratio"] == pytest.approx(2_508_668_930 / 2_715_369_470, rel=1e-6)
    assert row["compilation_latency"] == pytest.approx(38.5)
    assert {column: int(row[column]) for column in stats} == stats


@pytest.mark.parametrize("warmup_skips", [None, 3])
def test_the_accuracy_row_holds_the_counters_of_the_harness_accuracy_run(tmp_path: Path,
                                                                         warmup_skips: int | None) -> None:
    """A record whose child counted the harness's accuracy run (graph_breaks.harness_stats) exports
    each of its columns; cudagraph_skips, which a replay cannot see, is the compiled warm-up's where
    the record has one, else left empty; compilation_latency is dynamo's total compile time."""
    records = [json.loads(line) for line in RESULTS.read_text().splitlines()]
    nanogpt = [r for r in records if r["model"]["model_name"] == "nanogpt" and r["experiment"]["dynamo"] == "inductor"
               and r["experiment"]["precision"] == "fp32" and r["experiment"]["test"] == "eval"][-1]
    counted = {"calls_captured": 431, "unique_graphs": 2, "fallbacks_to_eager": 1, "graph_breaks": 3,
               "unique_graph_breaks": 1, "autograd_captures": 0, "autograd_compiles": 0}
    nanogpt["measurements"]["graph_breaks"] = {"total": 1, "unique_graphs": 2, "calls_captured": 215,
                                               "reasons": [], "harness_count": 3, "harness_count_method": "replayed",
                                               "harness_stats": counted}
    nanogpt["measurements"]["dynamo_compile"] = {"frames": 2, "total_wall_time_s": 12.3456789}
    if warmup_skips is not None:
        nanogpt["measurements"]["harness_warmup"] = {"compiled": {"dynamo_stats": {"cudagraph_skips": warmup_skips}}}
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "csv"
    assert cli_main(["export", str(results), "--format", "dynamo-csv", "-o", str(out)]) == 0
    with (out / "inductor_torchbench_float32_inference_cpu_accuracy.csv").open() as f:
        row = next(r for r in csv.DictReader(f) if r["name"] == "nanogpt")
    assert {column: int(row[column]) for column in counted} == counted
    assert row["cudagraph_skips"] == ("" if warmup_skips is None else str(warmup_skips))
    # Its compilation_latency is dynamo's running total of compile time, as the harness writes it.
    assert row["compilation_latency"] == "12.345679"


def test_dynamo_compile_accounting_exports_as_the_harness_compilation_metrics_csv(tmp_path: Path) -> None:
    """llama's compiled CPU inference given dynamo's accounting (code_gen_time_s missing): the file
    the harness writes beside its performance CSV, with the four columns the record fills."""
    records = [json.loads(line) for line in RESULTS.read_text().splitlines()]
    llama = next(r for r in records if r["experiment_id"] == "torchbench/llama/cpu-None-inductor-eval-fp32-bsdefault"
                 and r["run_id"] == "20250102T000000Z-bbbbbb")  # the latest run, which export takes
    llama["measurements"]["dynamo_compile"] = {"frames": 2, "entire_frame_compile_time_s": 4.25,
                                               "backend_compile_time_s": 3.5, "inductor_compile_time_s": 3.0}
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "csv"
    assert cli_main(["export", str(results), "--format", "dynamo-csv", "-o", str(out)]) == 0
    written = out / "inductor_torchbench_float32_inference_cpu_performance_compilation_metrics.csv"
    assert written.read_text().splitlines() == [
        "dev,name,batch_size,_compile.compile_inner,OutputGraph.call_user_compiler,compile_fx_inner,"
        "GraphLowering.compile_to_module",
        "cpu,llama,4,4.250000,3.500000,3.000000,"]
    # Only beside a performance CSV whose records hold the accounting: no other group gets one.
    assert [p.name for p in out.rglob("*_compilation_metrics.csv")] == [written.name]
