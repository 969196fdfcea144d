"""`experiment_runner report` and the loader, against a committed small results file.

Golden outputs are regenerated with EXPERIMENT_RUNNER_UPDATE_GOLDEN=1; review the diff.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from experiment_runner.analysis import report
from experiment_runner.analysis.loader import COLUMNS, load_dataframe, load_rows, runs_of
from experiment_runner.cli import main as cli_main

GOLDEN = Path(__file__).parents[1] / "golden"
RESULTS = GOLDEN / "results.jsonl"
OLD_RUN, NEW_RUN = "20250101T000000Z-aaaaaa", "20250102T000000Z-bbbbbb"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli_main(["report", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("EXPERIMENT_RUNNER_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"output differs from {path}"


@pytest.mark.parametrize(("name", "flags"), [
    ("report.txt", []),
    ("report_summary.csv", ["--format", "csv"]),
    ("report_models.csv", ["--format", "csv", "--table", "models"]),
    ("report.json", ["--format", "json"]),
])
def test_golden_outputs(capsys: pytest.CaptureFixture[str], name: str, flags: list[str]) -> None:
    code, out, err = run(capsys, RESULTS, *flags)
    assert (code, err) == (0, "")
    check_golden(name, out)


def summary_of(capsys: pytest.CaptureFixture[str], *flags: str) -> dict[tuple[str, str, str], dict]:
    code, out, _ = run(capsys, RESULTS, "--format", "json", *flags)
    assert code == 0
    return {(s["accelerator"], s["test"], s["configuration"]): s for s in json.loads(out)["summary"]}


def median(samples: list[float]) -> float:
    ordered = sorted(samples)
    return (ordered[4] + ordered[5]) / 2


def records_of(model: str, dynamo: str | None, test: str = "eval", run_id: str = NEW_RUN) -> list[dict]:
    found = []
    for line in RESULTS.read_text().splitlines():
        r = json.loads(line)
        if (r["run_id"], r["model"]["model_name"], r["experiment"]["dynamo"], r["experiment"]["test"],
                r["experiment"]["accelerator"], r["experiment"]["xla"]) == (run_id, model, dynamo, test, "cpu", None):
            found.append(r)
    return found


def test_latest_run_metrics_follow_the_documented_definitions(capsys: pytest.CaptureFixture[str]) -> None:
    summary = summary_of(capsys)
    inductor = summary[("cpu", "eval", "xla=None dynamo=inductor")]
    # llama ok+PASS, nanogpt retried to ok (the retry supersedes the error), resnet50 FAIL, dlrm timeout
    assert (inductor["models"], inductor["ok"], inductor["passed"]) == (4, 3, 2)
    assert inductor["pass_rate"] == 0.5
    speedups = []
    for model in ("llama", "nanogpt"):
        eager = records_of(model, None)[-1]["metrics"]["per_iter_time"]
        compiled = records_of(model, "inductor")[-1]["metrics"]["per_iter_time"]
        speedups.append(median(eager) / median(compiled))
    assert inductor["speedup_models"] == 2
    assert inductor["speedup_geomean"] == pytest.approx((speedups[0] * speedups[1]) ** 0.5, rel=1e-5)
    # llama records compile_time_s (12.5); nanogpt's is estimated from its first warm-up iteration
    nanogpt = records_of("nanogpt", "inductor")[-1]
    estimate = nanogpt["measurements"]["warmup_time"][0] - median(nanogpt["metrics"]["per_iter_time"])
    assert inductor["compile_time_mean_s"] == pytest.approx((12.5 + estimate) / 2, rel=1e-5)
    assert inductor["compile_time_estimated"] is True
    # timed-run rss peaks on CPU, not the lifetime peaks: 0.6 x 500 MB eager over 0.5 x 400 MB (llama)
    # and 0.5 x 250 MB (nanogpt)
    assert inductor["memory_ratio_geomean"] == pytest.approx((1.5 * 2.4) ** 0.5, rel=1e-5)
    # CUDA uses peak_allocated_bytes (2.0 GB / 1.6 GB), not rss (equal on both sides)
    assert summary[("cuda", "eval", "xla=None dynamo=inductor")]["memory_ratio_geomean"] == pytest.approx(1.25)
    baseline = summary[("cpu", "eval", "xla=None dynamo=None")]
    assert baseline["baseline"] is True and baseline["speedup_geomean"] == 1.0


def test_run_id_selects_an_older_run(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, RESULTS, "--format", "json", "--run-id", OLD_RUN)
    document = json.loads(out)
    assert code == 0 and document["run_id"] == OLD_RUN
    assert {m["model"] for m in document["models"]} == {"llama", "nanogpt", "resnet50"}


def test_any_configuration_can_be_the_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    # compile_options=default names plain torch.compile, as the records say it
    assert summary_of(capsys, "--baseline", "dynamo=inductor,compile_options=default") == summary_of(
        capsys, "--baseline", "dynamo=inductor")
    summary = summary_of(capsys, "--baseline", "dynamo=inductor")
    eager = summary[("cpu", "train", "xla=None dynamo=None")]
    assert summary[("cpu", "train", "xla=None dynamo=inductor")]["baseline"] is True
    eager_t = median(records_of("llama", None, "train")[0]["metrics"]["per_iter_time"])
    compiled_t = median(records_of("llama", "inductor", "train")[0]["metrics"]["per_iter_time"])
    assert eager["speedup_geomean"] == pytest.approx(compiled_t / eager_t, rel=1e-5)


def test_torn_last_line_is_skipped_with_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torn = tmp_path / "results.jsonl"
    shutil.copy(RESULTS, torn)
    lines = RESULTS.read_text().count("\n")
    with open(torn, "a") as handle:
        handle.write('{"schema_version": 1, "run_id": "20250103T000000Z-cccccc", "metrics": {"per_it')
    code, out, err = run(capsys, torn)
    assert code == 0
    assert f"{torn}: skipped 1 corrupt or torn line(s) (line {lines + 1};" in err
    assert out == (GOLDEN / "report.txt").read_text()


def test_many_corrupt_lines_are_one_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file full of garbage must not print a warning per line (200,000 lines of stderr)."""
    garbage = tmp_path / "results.jsonl"
    shutil.copy(RESULTS, garbage)
    lines = RESULTS.read_text().count("\n")
    with open(garbage, "a") as handle:
        handle.write("not json\n" * 5000)
    code, out, err = run(capsys, garbage)
    assert code == 0
    warnings = [line for line in err.splitlines() if "corrupt" in line]
    assert len(warnings) == 1
    assert warnings[0].startswith(f"warning: {garbage}: skipped 5000 corrupt or torn line(s) "
                                  f"(line {lines + 1}, {lines + 2}, {lines + 3}, ...; line {lines + 1}: ")
    assert out == (GOLDEN / "report.txt").read_text()


def legacy_record(model: str, dynamo: str | None, samples: list[float] | None, **extra: object) -> str:
    """A record as PyTorch/XLA's reference runner wrote it: no ids, status, stats or precision."""
    metrics: dict[str, object] = {"error": "RuntimeError: boom"} if samples is None else {
        "total_time": samples, "per_iter_time": samples}
    return json.dumps({
        "model": {"suite_name": "torchbench", "model_name": model},
        "experiment": {"accelerator": "cuda", "accelerator_model": "NVIDIA A100-SXM4-40GB", "xla": None,
                       "xla_flags": None, "dynamo": dynamo, "test": "eval", "batch_size": 8},
        "repeat": len(samples or []), "iterations_per_run": 1, "metrics": metrics,
        "outputs_file": None, "timestamp": 1699680738.72, **extra})


def test_reference_runner_records_are_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old.jsonl"
    old.write_text("\n".join([
        legacy_record("alexnet", None, [0.02, 0.021, 0.019], verification_code="PASS"),
        legacy_record("alexnet", "inductor", [0.01, 0.011, 0.009], verification_code="PASS"),
        legacy_record("bert", None, [0.04, 0.04, 0.04]),
        legacy_record("bert", "inductor", None),
    ]) + "\n")
    code, out, err = run(capsys, old, "--format", "json")
    assert (code, err) == (0, "")
    document = json.loads(out)
    assert document["run_id"] == "legacy:old.jsonl@1699680738.72"
    summary = {s["configuration"]: s for s in document["summary"]}
    assert (summary["xla=None dynamo=inductor"]["passed"], summary["xla=None dynamo=inductor"]["models"]) == (1, 2)
    assert summary["xla=None dynamo=inductor"]["speedup_geomean"] == pytest.approx(2.0)
    bert = next(m for m in document["models"] if m["model"] == "bert" and m["configuration"].endswith("inductor"))
    assert bert["status"] == "error"


def test_files_from_before_measurements_were_split_from_metrics_report_the_same(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Files written before `measurements` existed kept every figure in `metrics`."""
    merged = tmp_path / "results.jsonl"
    with open(merged, "w") as handle:
        for line in RESULTS.read_text().splitlines():
            record = json.loads(line)
            record["metrics"] = {k: v for k, v in record["metrics"].items() if k != "error"}
            record["metrics"].update(record.pop("measurements"))
            handle.write(json.dumps(record) + "\n")
    code, out, _ = run(capsys, merged)
    assert code == 0 and out == (GOLDEN / "report.txt").read_text()


def test_a_legacy_file_of_two_nights_is_two_runs_and_compare_works(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """nightly.sh appends each night to one file with one --timestamp per night."""
    nights = tmp_path / "v100.jsonl"
    first, second = 1699680738.72, 1699767138.0
    nights.write_text("\n".join([
        legacy_record("alexnet", None, [0.02] * 5, timestamp=first),
        legacy_record("alexnet", "inductor", [0.01] * 5, timestamp=first),
        legacy_record("alexnet", None, [0.02] * 5, timestamp=second),
        legacy_record("alexnet", "inductor", [0.015] * 5, timestamp=second),
    ]) + "\n")
    runs = [r.run_id for r in runs_of(load_rows([nights]))]
    assert runs == ["legacy:v100.jsonl@1699680738.72", "legacy:v100.jsonl@1699767138"]
    code, out, _ = run(capsys, nights, "--format", "json")
    assert code == 0 and json.loads(out)["run_id"] == runs[1]
    code, out, _ = run(capsys, nights, "--run-id", runs[0], "--format", "json")
    assert code == 0 and json.loads(out)["run_id"] == runs[0]
    code = cli_main(["compare", str(nights), "--format", "json"])
    out = capsys.readouterr().out
    document = json.loads(out)
    assert (document["run_a"], document["run_b"]) == tuple(runs)
    inductor = next(c for c in document["comparisons"] if "inductor" in c["experiment_id"])
    assert inductor["change"] == pytest.approx(0.5)


def test_legacy_first_sample_is_the_estimated_warm_up(tmp_path: Path) -> None:
    """The reference times its first repeat cold: with 2 repeats, counting it would make the
    median half compilation. Without warmup_time it is taken as the warm-up, marked so."""
    old = tmp_path / "old.jsonl"
    old.write_text("\n".join([
        legacy_record("alexnet", "inductor", [15.0, 0.010, 0.011, 0.009]),
        legacy_record("bert", "inductor", [15.0, 0.010]),
    ]) + "\n")
    rows = {r.model: r for r in load_rows([old])}
    alexnet = rows["alexnet"]
    assert (alexnet.n_samples, alexnet.median_per_iter_time_s, alexnet.warmup_estimated) == (3, 0.010, True)
    assert alexnet.compile_time_s == pytest.approx(15.0 - 0.010) and alexnet.compile_time_estimated is True
    assert rows["bert"].per_iter_time == (0.010,)

    with_warmup = json.loads(legacy_record("alexnet", "inductor", [0.010, 0.011, 0.009]))
    with_warmup["metrics"]["warmup_time"] = [15.0, 0.02]
    old.write_text(json.dumps(with_warmup) + "\n")
    row = load_rows([old])[0]
    assert (row.n_samples, row.warmup_estimated, row.compile_time_s) == (3, False, pytest.approx(15.0 - 0.010))


def test_stats_are_recomputed_from_edited_samples(tmp_path: Path) -> None:
    """Stored stats are never trusted: a file whose samples were edited is judged by them."""
    record = json.loads(RESULTS.read_text().splitlines()[0])
    record["metrics"]["per_iter_time"] = [1.0] * record["stats"]["per_iter_time"]["n"]
    edited = tmp_path / "edited.jsonl"
    edited.write_text(json.dumps(record) + "\n")
    assert load_rows([edited])[0].median_per_iter_time_s == 1.0


def test_loader_gives_one_flat_row_per_final_experiment() -> None:
    frame = load_dataframe([RESULTS])
    assert list(frame.columns) == list(COLUMNS)
    lines = RESULTS.read_text().count("\n")
    assert len(frame) == lines - 1  # the retried nanogpt/inductor counts once
    latest = load_dataframe(RESULTS, run_id="latest")
    assert set(latest["run_id"]) == {NEW_RUN} and len(latest) == 14
    retried = latest[(latest["model"] == "nanogpt") & (latest["dynamo"] == "inductor")]
    assert retried["status"].tolist() == ["ok"]
    with_samples = load_dataframe(RESULTS, run_id=OLD_RUN, samples=True)
    assert len(with_samples) == 6 and all(len(s) == 10 for s in with_samples["per_iter_time"])


def test_plots_are_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, RESULTS, "--plot", tmp_path / "plots")
    assert code == 0
    names = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert "speedup_torchbench_cpu_eval_fp32.png" in names
    assert "geomean_over_time_torchbench_cpu_eval_fp32.png" in names
    for name in names:
        assert (tmp_path / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"wrote {tmp_path / 'plots' / name}" in err


def test_many_models_go_to_several_bar_charts(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report, "MODELS_PER_PLOT", 1)
    code, _, _ = run(capsys, RESULTS, "--plot", tmp_path)
    assert code == 0
    bars = sorted(p.name for p in tmp_path.glob("speedup_torchbench_cpu_eval_fp32*"))
    assert bars == ["speedup_torchbench_cpu_eval_fp32_p1.png", "speedup_torchbench_cpu_eval_fp32_p2.png"]


def test_plot_without_matplotlib_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, out, err = run(capsys, RESULTS, "--plot", tmp_path)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "needs matplotlib" in err


@pytest.mark.parametrize(("flags", "code", "message"), [
    (["/no/such/file.jsonl"], 3, "no such results file or folder"),
    ([RESULTS, "--run-id", "nope"], 2, "no run 'nope'"),
    ([RESULTS, "--baseline", "compiler=x"], 2, "bad --baseline item"),
    ([RESULTS, "--baseline", "dynamo=inductr"], 2, "--baseline dynamo=inductr: no experiment of run "
                                                  "20250102T000000Z-bbbbbb has it; did you mean 'inductor'? (its "
                                                  "dynamo values: None, inductor, openxla)"),
    ([RESULTS, "--baseline", "accelerator=tpu"], 2, "(its accelerator values: cpu, cuda)"),
    ([RESULTS, "--format", "csv", "--table", "all"], 2, "csv holds one table"),
    ([RESULTS, "--format", "xml"], 2, "invalid choice"),
    ([RESULTS, "--format", "html", "--table", "timings"], 2, "--table timings is for --format text, csv or json"),
])
def test_bad_input_is_one_line_and_an_exit_code(capsys: pytest.CaptureFixture[str], flags: list,
                                                code: int, message: str) -> None:
    got, out, err = run(capsys, *flags)
    assert (got, out) == (code, "")
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_help_documents_which_samples_count(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    assert "median of metrics.per_iter_time" in out and "warm-up" in out


@pytest.mark.e2e
def test_reports_never_import_torch() -> None:
    script = ("import sys; from experiment_runner.cli import main; "
              f"main(['report', {str(RESULTS)!r}]); main(['compare', {str(RESULTS)!r}, '--format', 'json']); "
              "assert 'torch' not in sys.modules, 'torch was imported'")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_folder_is_read_as_its_results_files_and_failures_name_their_logs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    night = tmp_path / "nightly" / "2025-01-02"
    night.mkdir(parents=True)
    failed = {**json.loads(RESULTS.read_text().splitlines()[0]), "status": "error",
              "error": {"type": "RuntimeError", "message": "CUDA error: an illegal memory access\nmore lines"},
              "artifacts": {"log": "runs/r/llama/child.log"}}
    (night / "results.jsonl").write_text(json.dumps(failed) + "\n")
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, Path("nightly"))
    assert code == 0, err
    failures = out.split("failures (each log holds the experiment's own output):\n", 1)[1]
    assert "RuntimeError: CUDA error: an illegal memory access" in failures and "more lines" not in failures
    assert "nightly/2025-01-02/runs/r/llama/child.log" in failures


@pytest.mark.parametrize("block, said", [
    ({"status": "reproduced", "nodes_before": 15, "nodes_after": 4}, "reproduced, 4 of 15 nodes kept"),
    ({"status": "timeout", "reproduces": True, "nodes_before": 1091, "nodes_after": 90},
     "timeout, checkpoint reproduces, 90 of 1091 nodes kept"),
    ({"status": "timeout", "reproduces": False, "nodes_before": 47, "nodes_after": 9},
     "timeout, checkpoint does not reproduce, 9 of 47 nodes kept"),
])
def test_minified_repros_are_named_from_the_sidecar(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch, block: dict, said: str) -> None:
    """A red experiment's minification (minified.jsonl beside the results file) is listed with its
    repro.py, and for one killed at its budget, whether its last checkpoint reproduces; an
    experiment without one is not, and the records are read as they are."""
    first, second = (json.loads(line) for line in RESULTS.read_text().splitlines()[:2])
    failed = {**first, "status": "ok", "verification_code": "FAIL"}
    (tmp_path / "results.jsonl").write_text(json.dumps(failed) + "\n" + json.dumps(second) + "\n")
    block = {**block, "repro": "runs/r/exp/minify/repro.py"}
    (tmp_path / "minified.jsonl").write_text(json.dumps({"run_id": failed["run_id"],
                                                         "experiment_id": failed["experiment_id"],
                                                         "minified": block}) + "\n")
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "results.jsonl")
    assert code == 0, err
    listed = out.split("minified repros (python REPRO runs the failing graph alone; minified.jsonl says more):\n",
                       1)[1].split("\n\n", 1)[0].splitlines()[2:]
    assert len(listed) == 1
    assert listed[0].split()[0] == first["model"]["model_name"]
    assert "FAIL" in listed[0] and said in listed[0]
    assert listed[0].endswith("runs/r/exp/minify/repro.py")


def test_a_folder_says_which_file_and_run_it_reported_and_what_else_is_there(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A folder holds many results files and runs; the report's header names only the run it chose."""
    lines = RESULTS.read_text().splitlines(keepends=True)
    old = [line for line in lines if OLD_RUN in line]
    folder = tmp_path / "output"
    folder.mkdir()
    (folder / "results.jsonl").write_text("".join(line for line in lines if NEW_RUN in line))
    (folder / "before.jsonl").write_text("".join(old))
    code, _, err = run(capsys, folder)
    assert code == 0
    assert err.splitlines() == [f"report: read run {NEW_RUN} from {folder / 'results.jsonl'}; 1 other results "
                                f"file(s) there: {folder / 'before.jsonl'}; 1 other run(s) in the files read: "
                                "choose one with --run-id"]
    (folder / "before.jsonl").unlink()
    code, _, err = run(capsys, folder)
    assert err.splitlines() == [f"report: read run {NEW_RUN} from {folder / 'results.jsonl'}"]
    code, _, err = run(capsys, folder / "results.jsonl")
    assert (code, err) == (0, "")


def test_a_speedup_from_noisy_samples_is_shown_as_such(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A noisy-host sample on either side of a ratio flags the model's speedup and counts in its
    geomean's mark, in text, JSON and the export."""
    records = [json.loads(line) for line in (GOLDEN / "results.jsonl").read_text().splitlines()]
    for record in records:
        if (record["run_id"], record["model"]["model_name"], record["experiment"]["dynamo"],
                record["experiment"]["precision"]) == ("20250102T000000Z-bbbbbb", "llama", None, "fp32") \
                and record["experiment"]["test"] == "eval":
            record["measurements"]["noisy_host"] = True
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert cli_main(["report", str(path)]) == 0
    text = capsys.readouterr().out
    llama = next(line for line in text.splitlines() if line.startswith("llama ") and "(noisy host)" in line)
    assert "x (noisy host)" in llama
    assert " !1 " in text and "!N: N of the geomean's speedups come from noisy-host or unstable samples" in text
    assert cli_main(["report", str(path), "--format", "json"]) == 0
    flagged = {(s["test"], s["precision"], s["configuration"]): s["speedup_flagged"]
               for s in json.loads(capsys.readouterr().out)["summary"]}
    assert flagged[("eval", "fp32", "xla=None dynamo=inductor")] == 1
    assert flagged[("eval", "bf16", "xla=None dynamo=inductor")] == 0


def test_plots_mark_noisy_speedups_as_the_text_report_does(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    records = [json.loads(line) for line in RESULTS.read_text().splitlines()]
    for record in records:
        if (record["run_id"], record["model"]["model_name"], record["experiment"]["dynamo"],
                record["experiment"]["precision"], record["experiment"]["test"]) == (NEW_RUN, "llama", None, "fp32",
                                                                                     "eval"):
            record["measurements"]["noisy_host"] = True
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    figures: dict[str, object] = {}
    saved = report._save
    monkeypatch.setattr(report, "_save", lambda fig, plt, where: figures.setdefault(where.name, fig.axes[0]) and
                        saved(fig, plt, where))
    assert cli_main(["report", str(path), "--plot", str(tmp_path / "plots")]) == 0
    text = capsys.readouterr().out
    table = text.split("speedup per model: torchbench / cpu / eval / fp32\n", 1)[1].split("\n\n", 1)[0]
    marked = table.count("(noisy host)")
    assert marked == 2  # llama's inductor and openxla speedups, over its noisy eager baseline
    bars = figures["speedup_torchbench_cpu_eval_fp32.png"]
    assert [text.get_text() for text in bars.texts] == ["(noisy host)"] * marked
    assert len([patch for patch in bars.patches if patch.get_hatch()]) == marked
    assert report.FLAGGED_BARS in [text.get_text() for text in bars.get_legend().get_texts()]
    over_time = figures["geomean_over_time_torchbench_cpu_eval_fp32.png"]
    assert [text.get_text() for text in over_time.texts] == ["!1"] * marked  # each geomean holds one
    assert over_time.get_xlabel() == report.FLAGGED_GEOMEAN
    assert not figures["speedup_torchbench_cpu_train_fp32.png"].texts, "nothing noisy there, nothing marked"


def test_the_html_report_holds_its_figures_without_javascript(capsys: pytest.CaptureFixture[str]) -> None:
    """A reader that runs no script (a mail client, lynx, grep) gets the dashboard and per-model tables."""
    import re

    _, out, _ = run(capsys, RESULTS, "--format", "json")
    document = json.loads(out)
    code, page, _ = run(capsys, RESULTS, "--format", "html")
    assert code == 0
    markup = page.split('<script type="application/json"', 1)[0]
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r'<tr class="dash-row">(.*?)</tr>', markup)]
    assert len(rows) == len(document["summary"]) > 0
    for summary, cells in zip(document["summary"], rows):
        assert cells[:4] == [summary[k] for k in ("suite", "accelerator", "test", "precision")]
        # a configuration none of whose models was checked has no pass count, and says so
        if summary["checked"]:
            assert cells[5].startswith(f"{summary['passed']}/{summary['models']}")
        else:
            assert cells[5] == "not checked"
        if not summary["baseline"] and summary["speedup_geomean"] is not None:
            assert cells[6].startswith(f"{summary['speedup_geomean']:.3f}x")
    speedups = [m for m in document["models"] if m["configuration"] == "xla=None dynamo=inductor"
                and m["test"] == "eval" and m["speedup"]]
    assert speedups
    for m in speedups:
        assert f'<tr class="model-row"><td>{m["model"]}</td><td class="num">{m["speedup"]:.2f}x</td>' in markup


def test_the_time_breakdown_sums_each_phase_over_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--table timings: each phase summed over the run's final records, whatever their status; a
    record from before the breakdown counts its child_s unsplit, a child that left no result its
    wall_s, and each child's start and exit is wall_s - child_s. Shares add up to 1; verify_s's
    steps are lines within it, left out of the total."""
    records = [json.loads(line) for line in RESULTS.read_text().splitlines()]
    latest = [r for r in records if r["run_id"] == NEW_RUN]
    phases = {"import_s": 1.0, "load_s": 2.0, "compile_s": 3.0, "pairs_s": 4.0, "verify_s": 5.0, "other_s": 0.5}
    split, unsplit, lost = latest[0], latest[1], latest[2]
    steps = {"verify_eager_s": 2.0, "verify_compiled_s": 1.5, "verify_compare_s": 0.25}
    split["timings"] = {**phases, **steps, "measure_s": 7.0, "child_s": 15.5, "wall_s": 16.0, "finished_at": 1e9}
    unsplit["timings"] = {"load_s": 1.0, "measure_s": 2.0, "child_s": 4.0, "wall_s": 4.25}
    lost["timings"] = {"wall_s": 8.0}
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    expected = {**phases, "unsplit": 4.0, "outside": 0.5 + 0.25, "no_result": 8.0}

    assert cli_main(["report", str(path), "--table", "timings", "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["run_id"] == NEW_RUN
    breakdown = {line["phase"]: line for line in document["timings"]}
    assert {k: line["seconds"] for k, line in breakdown.items()} == {**expected, **steps}
    assert {k for k, line in breakdown.items() if line["within"] == "verify_s"} == set(steps)
    assert breakdown["outside"]["experiments"] == 2 and breakdown["pairs_s"]["experiments"] == 1
    assert sum(line["share"] for line in breakdown.values() if line["within"] is None) == pytest.approx(1.0, abs=1e-5)
    assert breakdown["verify_eager_s"]["share"] == pytest.approx(2.0 / sum(expected.values()), rel=1e-5)
    assert breakdown["verify_s"]["share"] == pytest.approx(5.0 / sum(expected.values()), rel=1e-5)

    assert cli_main(["report", str(path), "--table", "timings"]) == 0
    text = capsys.readouterr().out
    total = next(line for line in text.splitlines() if line.startswith("total"))
    assert total.split() == ["total", f"{sum(expected.values()):.1f}", "100.0%"]
    assert "timed pairs" in text and "not split (records before the breakdown)" in text
    assert "of which the two eager runs" in text
    assert cli_main(["report", str(path), "--table", "timings", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "phase,what,seconds,share,experiments,within"
    assert cli_main(["report", str(RESULTS), "--table", "timings"]) == 0
    assert capsys.readouterr().out == f"run {NEW_RUN}: none of its records has timings\n"


def test_a_record_never_checked_is_no_pass_in_report_history_or_the_page(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The golden run's training rows ran without --verify: ok, timed, never checked. Each reader
    counts them as not checked, never as passing, and keeps their speedups (issue 54's follow-up)."""
    summary = summary_of(capsys)
    trained = summary[("cpu", "train", "xla=None dynamo=inductor")]
    assert (trained["ok"], trained["checked"], trained["passed"], trained["pass_rate"]) == (1, 0, 0, None)
    assert trained["speedup_models"] == 1  # its figures still count: only the verdict is missing
    checked = summary[("cpu", "eval", "xla=None dynamo=inductor")]
    assert checked["checked"] == checked["models"] and checked["pass_rate"] == checked["passed"] / checked["models"]
    capsys.readouterr()
    assert cli_main(["history", str(RESULTS), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["dashboard"]
    (history_row,) = [r for r in rows if (r["accelerator"], r["test"], r["configuration"]) ==
                      ("cpu", "train", "xla=None dynamo=inductor")]
    assert history_row["passed"][-1] == history_row["checked"][-1] == 0 and history_row["models"][-1] == 1
    from experiment_runner.analysis.page import pass_text

    assert [pass_text(1, 0, 0), pass_text(4, 2, 3), pass_text(4, 4, 4)] == [
        "not checked", "2/4 (50%, 1 not checked)", "4/4 (100%)"]


@pytest.mark.parametrize("method", ["paired", "harness"])
def test_a_speedup_from_pairs_is_named_by_how_its_pairs_were_timed(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                   method: str) -> None:
    """--speedup=harness (a --dashboard run's default) is said as harness, as the docs say it;
    only --speedup=paired's figure is called paired. A harness block is the one with the batch
    rule PyTorch's harness times eager at."""
    block = {"speedup": 1.5} if method == "paired" else {"speedup": 1.5, "baseline_batch_size": 4,
                                                        "baseline_batch_rule": {"low": 0.8, "high": 1.2}}
    records = [json.loads(line) for line in RESULTS.read_text().splitlines()]
    for record in records:
        if record["run_id"] == NEW_RUN and record["experiment"]["dynamo"] == "inductor" \
                and record["experiment"]["accelerator"] == "cpu" and record["status"] == "ok":
            record["measurements"]["paired"] = block
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    other = {"paired": "harness", "harness": "paired"}[method]
    code, out, _ = run(capsys, path)
    assert code == 0
    train = next(line for line in out.splitlines() if line.startswith("torchbench  cpu            train")
                 and "inductor" in line)
    assert f"1.500x {method}" in train
    assert f"1.50x {method}" in out and f"1.50x {other}" not in out
    assert any(line.startswith(f"{method}: ") for line in out.splitlines())
    assert not any(line.startswith(f"{other}: ") for line in out.splitlines())
    code, out, _ = run(capsys, path, "--format", "json", "--table", "summary")
    inductor = [s for s in json.loads(out)["summary"] if s["configuration"] == "xla=None dynamo=inductor"
                and s["accelerator"] == "cpu" and s["test"] == "train"]
    assert [(s[f"speedup_{method}"], s[f"speedup_{other}"]) for s in inductor] == [(1, 0)]


def test_eager_configurations_have_no_compile_time(capsys: pytest.CaptureFixture[str]) -> None:
    """An eager record's compile_time_s is its first iteration's overhead: the summary leaves it
    out, and the text says why its cell is empty."""
    code, out, _ = run(capsys, RESULTS, "--format", "json", "--table", "summary")
    summary = json.loads(out)["summary"]
    eager = [s for s in summary if s["xla"] is None and s["dynamo"] is None]
    compiled = [s for s in summary if s["dynamo"] == "inductor"]
    assert eager and all(s["compile_time_mean_s"] is None for s in eager)
    assert compiled and all(s["compile_time_mean_s"] > 0 for s in compiled)
    assert any(row.compile_time_s for row in load_rows([RESULTS]) if not row.compiles), \
        "the records do hold an eager figure, which the summary leaves out"
    _, text, _ = run(capsys, RESULTS)
    assert "mean compile s: none (-) for eager configurations, which compile nothing" in text
