"""Which files the readers take for results files (loader.results_files): by their records, not
their names. An export, a minification sidecar or another tool's JSON lines is named in one line,
refused when given by name and skipped inside a folder; it is never read as a run of Nones."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from experiment_runner.analysis.loader import OWN_RECORD_FIELDS, record_kind
from experiment_runner.cli import main as cli_main
from experiment_runner.core.record_schema import record_schema

GOLDEN = Path(__file__).parents[1] / "golden"
RESULTS = GOLDEN / "results.jsonl"
EXPORT_SAID = "is a benchmark-database export (export --format pytorch-benchmark), not a results file"


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = cli_main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """An output folder as the issue left it: the results, and their export beside them."""
    folder = tmp_path / "output"
    folder.mkdir()
    shutil.copy(RESULTS, folder / "results.jsonl")
    code, _, err = run(capsys, "export", folder / "results.jsonl", "--format", "pytorch-benchmark",
                       "-o", folder / "bench.jsonl")
    assert code == 0, err
    return folder


@pytest.mark.parametrize("command", [
    ["report"], ["history"], ["compare"], ["export", "--format", "dynamo-csv", "-o", "{tmp}/csv"],
    ["check-expected", "--expected", "{tmp}/expected.csv"],
])
def test_an_export_given_by_name_is_refused_in_one_line(output: Path, capsys: pytest.CaptureFixture[str],
                                                        command: list[str]) -> None:
    bench = output / "bench.jsonl"
    name, *flags = [part.format(tmp=output.parent) for part in command]
    code, out, err = run(capsys, name, bench, *flags)
    assert (code, out) == (2, "")
    assert err == f"experiment_runner {name}: error: {bench} {EXPORT_SAID}\n"
    assert not (output.parent / "csv").exists() and not (output.parent / "expected.csv").exists()


def test_compare_refuses_an_export_as_its_second_file(output: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "compare", output / "results.jsonl", output / "bench.jsonl")
    assert code == 2 and err.strip().endswith(f"{output / 'bench.jsonl'} {EXPORT_SAID}")


def test_in_a_folder_an_export_is_skipped_with_one_line(output: Path, capsys: pytest.CaptureFixture[str]) -> None:
    alone = run(capsys, "history", output / "results.jsonl", "--format", "json")
    code, out, err = run(capsys, "history", output, "--format", "json")
    assert code == alone[0]
    assert err == f"warning: {output / 'bench.jsonl'} {EXPORT_SAID}; skipped\n"
    runs = json.loads(out)["runs"]
    assert runs == json.loads(alone[1])["runs"] and len(runs) == 2, "the export is no third run"
    code, out, err = run(capsys, "report", output)
    assert code == 0
    assert err.splitlines()[0] == f"warning: {output / 'bench.jsonl'} {EXPORT_SAID}; skipped"
    assert out == run(capsys, "report", output / "results.jsonl")[1]


def test_a_minification_sidecar_in_a_folder_is_passed_over_quietly(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """minified.jsonl holds a run_id and an experiment_id per line; read as results it would
    supersede every record it names with one of no status. Its blocks are read with the results."""
    folder = tmp_path / "output"
    folder.mkdir()
    shutil.copy(RESULTS, folder / "results.jsonl")
    first = json.loads(RESULTS.read_text().splitlines()[0])
    (folder / "minified.jsonl").write_text(json.dumps({"run_id": first["run_id"], "experiment_id": first["experiment_id"],
                                                       "minified": {"status": "reproduced"}}) + "\n")
    _, alone, _ = run(capsys, "history", RESULTS, "--format", "json")
    code, out, err = run(capsys, "history", folder, "--format", "json")
    assert (code, err) == (0, "")
    assert json.loads(out)["runs"] == json.loads(alone)["runs"]
    code, _, err = run(capsys, "report", folder / "minified.jsonl")
    assert code == 2 and "is a minification sidecar (minified.jsonl" in err


def test_a_folder_of_other_files_only_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "events.jsonl").write_text(json.dumps({"event": "start", "at": 1}) + "\n")
    code, _, err = run(capsys, "report", tmp_path)
    assert code == 3
    assert err.splitlines() == [
        f"warning: {tmp_path / 'events.jsonl'} is a JSON-lines file of other records (its first has at, event; "
        "a results record has schema_version, run_id, experiment_id), not a results file; skipped",
        f"experiment_runner report: error: no results files (*.jsonl) in {tmp_path} (1 *.jsonl file(s) there are "
        "not results files)"]


def test_records_are_told_by_their_fields() -> None:
    ours = json.loads(RESULTS.read_text().splitlines()[0])
    reference = {"model": {"suite_name": "torchbench", "model_name": "alexnet"}, "experiment": {"dynamo": None},
                 "metrics": {"per_iter_time": [0.1]}, "timestamp": 1.0}
    assert record_kind(ours) is None
    assert record_kind({**ours, "schema_version": 2}) is None, "a newer version is read, with its warning"
    assert record_kind(reference) is None
    assert record_kind({k: v for k, v in ours.items() if k != "run_id"}) == (
        "a JSON-lines file of other records (its first has schema_version 1 but no run_id)")
    assert record_kind({**ours, "schema_version": "1"}) == (
        "a JSON-lines file of other records (its first has schema_version '1' but not as an integer)")
    assert record_kind({**reference, "model": {"name": "alexnet"}}) is not None
    assert set(OWN_RECORD_FIELDS) <= set(record_schema()["required"])


def test_an_empty_file_is_still_a_results_file_with_no_records(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "results.jsonl"
    empty.write_text("")
    code, _, err = run(capsys, "report", empty)
    assert (code, err) == (2, "experiment_runner report: error: no records in the given file(s)\n")
