"""check-expected reads a bad expected file as bad: one line and exit 2 naming what is wrong
(exit 3 when it cannot be read at all), reads a spreadsheet's BOM correctly, and lists the
models the file expects that the run lacks."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from experiment_runner.analysis.expected import read_expected
from experiment_runner.cli import main as cli_main

RESULTS = Path(__file__).parents[1] / "golden" / "results.jsonl"
GROUP = ["--group", "inductor_torchbench_float32_inference_cpu"]
# What the golden run holds for that group (tests/analysis/test_export.py checks the same).
GOOD = "name,accuracy,graph_breaks\ndlrm,timeout,0\nllama,pass,0\nnanogpt,pass,0\nresnet50,fail_accuracy,0\n"


def check(capsys: pytest.CaptureFixture[str], expected: Path | str) -> tuple[int, str, list[str]]:
    code = cli_main(["check-expected", str(RESULTS), "--expected", str(expected), *GROUP])
    out, err = capsys.readouterr()
    return code, out, err.strip().splitlines()


def test_the_golden_expectations_hold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "e.csv").write_text(GOOD)
    code, out, _ = check(capsys, tmp_path / "e.csv")
    assert code == 0 and out.strip().endswith("4 model(s) checked against " + str(tmp_path / "e.csv") + ": as expected")


def test_a_bom_as_spreadsheets_write_it_is_read_correctly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "e.csv"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD.replace("\n", "\r\n").encode())
    assert list(read_expected(path)) == ["dlrm", "llama", "nanogpt", "resnet50"]
    code, out, _ = check(capsys, path)
    assert code == 0 and out.strip().endswith("as expected"), out


@pytest.mark.parametrize(("content", "message"), [
    (GOOD.replace("llama,pass,0", "llama,pass,two"), "e.csv:3: llama's graph_breaks must be a whole number >= 0, "
                                                     "got 'two'"),
    (GOOD.replace("llama,pass,0", "llama,pass,1.5"), "e.csv:3: llama's graph_breaks must be a whole number >= 0, "
                                                     "got '1.5'"),
    (GOOD.replace("llama,pass,0", "llama,pass,-1"), "got '-1'"),
    (GOOD.replace("llama,pass,0", "llama,pass,"), "got ''"),
    (GOOD + "llama,fail_accuracy,0\n", "e.csv:6: llama is listed twice; keep one row per model"),
    (GOOD + ",pass,0\n", "e.csv:6: a row needs a name and an accuracy status"),
    (GOOD.encode().replace(b"nanogpt", b"nan\xe9gpt"), "e.csv:4: not UTF-8 text (byte 0xe9); save it as UTF-8 CSV"),
    ("model,status\nx,pass\n", "is not an expected-results file: no name, accuracy, graph_breaks column"),
    (GOOD.replace("llama,pass,0", "llama,weird_status,0"), "e.csv:3: llama's accuracy 'weird_status' is not a "
                                                           "status PyTorch's harness writes (OOM, eager_1st_run_OOM"),
    (GOOD.replace("llama,pass,0", "llama,pass,0,1,extra"), "e.csv:3: 5 fields, the header has 3; a field holding a "
                                                           "comma needs quotes"),
    (GOOD.replace("llama,pass,0", '"ll\nama",pass,0'), "e.csv:4: the model name 'll\\nama' holds a line break or "
                                                       "another control character"),
])
def test_a_bad_expected_file_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    content: str | bytes, message: str) -> None:
    path = tmp_path / "e.csv"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    code, out, err = check(capsys, path)
    assert code == 2 and not out, out
    assert len(err) == 1 and err[0].startswith("experiment_runner check-expected: error: ") and message in err[0], err


def test_a_fifo_or_a_device_is_refused_without_reading(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """/dev/zero never ends; a FIFO blocks until someone writes. A writer here feeds the FIFO
    valid expectations, so a command that read it would pass instead of hanging this test."""
    fifo = tmp_path / "e.fifo"
    os.mkfifo(fifo)

    def write_once() -> None:
        try:
            with open(fifo, "w") as handle:  # until a reader opens the FIFO
                handle.write(GOOD)
        except BrokenPipeError:  # the reader left without reading: what is asked of it
            pass

    writer = threading.Thread(target=write_once, daemon=True)
    writer.start()
    code, _, err = check(capsys, fifo)
    assert code == 2 and err == [f"experiment_runner check-expected: error: {fifo} is a FIFO, not an "
                                 "expected-results file (a CSV)"], err
    writer.join(timeout=60)
    code, _, err = check(capsys, "/dev/zero")
    assert code == 2 and err == ["experiment_runner check-expected: error: /dev/zero is a device, not an "
                                 "expected-results file (a CSV)"], err
    code, _, err = check(capsys, "/proc/self/mem")
    assert code == 3 and err == ["experiment_runner check-expected: error: cannot read /proc/self/mem: "
                                 "Input/output error"], err


def test_models_expected_but_absent_from_the_run_are_listed(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "e.csv"
    path.write_text(GOOD + "alexnet,pass,0\nvgg16,pass,1\n")
    code, out, _ = check(capsys, path)
    lines = out.strip().splitlines()
    assert "inductor_torchbench_float32_inference_cpu: 2 model(s) of e.csv not in this run: alexnet, vgg16" in lines
    assert lines[-1].endswith("as expected; 2 expected model(s) not in this run"), out
    assert code == 0, "the harness's checks read only the run's models; a missing one is listed, not failed"


def _llama_verified_as(tmp_path: Path, verification: dict | None, code: str = "VERIFIER_SKIPPED") -> Path:
    """The golden run with llama's compiled CPU inference record given this verification."""
    records = [json.loads(line) for line in RESULTS.read_text().splitlines()]
    for record in records:
        if record["model"]["model_name"] == "llama" and record["run_id"] == "20250102T000000Z-bbbbbb" and (
                record["experiment"]["dynamo"], record["experiment"]["test"], record["experiment"]["accelerator"]) == (
                "inductor", "eval", "cpu"):
            record.update(verification_code=code, verification=verification)
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    return results


def test_a_model_the_verifier_declined_is_the_harness_s_pass_due_to_skip(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """PyTorch's accuracy run writes pass_due_to_skip for the models it does not judge (too large);
    ours declines the same models with VERIFIER_SKIPPED and says why in its verification block."""
    results = _llama_verified_as(tmp_path, {
        "code": "VERIFIER_SKIPPED", "method": None, "tolerance": None,
        "details": {"reason": "too large to hold eager, compiled and float64 runs at once "
                              "(accuracy.skip.large_models)"}})
    (tmp_path / "e.csv").write_text(GOOD.replace("llama,pass,0", "llama,pass_due_to_skip,0"))
    code = cli_main(["check-expected", str(results), "--expected", str(tmp_path / "e.csv"), *GROUP])
    out, _ = capsys.readouterr()
    assert code == 0 and out.strip().endswith(": as expected"), out


@pytest.mark.parametrize("code, why", [
    ("VERIFIER_SKIPPED",
     "accuracy was not checked (VERIFIER_SKIPPED: the run had no --verify); rerun it with --verify"),
    ("MAYBE", "its verification code 'MAYBE' is no verdict this tool knows; rerun it with --verify")])
def test_a_model_never_checked_is_no_pass_and_fails_the_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             code: str, why: str) -> None:
    """A record without a verdict (a run without --verify: VERIFIER_SKIPPED and no verification
    block; or a code no verifier gives) is not checked: the gate says so and exits 1 even where the
    expected file says pass, --update keeps its row as it was, and export writes infra_error for it."""
    results = _llama_verified_as(tmp_path, None, code)
    expected = tmp_path / "e.csv"
    expected.write_text(GOOD)
    assert cli_main(["check-expected", str(results), "--expected", str(expected), *GROUP]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert f"llama: not checked: {why}" in out
    assert out[-1].endswith("3 model(s) checked against " + str(expected) + ": 1 model(s) not checked (exit 1)"), out
    assert not any("llama: accuracy" in line for line in out)  # not a change either: nothing was judged

    expected.write_text(GOOD.replace("llama,pass,0\n", ""))
    assert cli_main(["check-expected", str(results), "--expected", str(expected), *GROUP, "--update"]) == 1
    assert "1 model(s) not checked, their rows left as they were: llama" in capsys.readouterr().err
    assert "llama" not in expected.read_text()

    assert cli_main(["check-expected", str(results), "--pytorch"]) == 1  # PyTorch's file expects llama to pass
    out = capsys.readouterr().out.splitlines()
    assert f"cpu_inductor_torchbench_inference: llama: not checked: {why}" in out
    assert not any("llama: accuracy" in line for line in out)
    assert any(line.startswith("cpu_inductor_torchbench_inference: 3 model(s) checked against PyTorch's") and
               "1 model(s) not checked (exit 1)" in line for line in out), out

    out_dir = tmp_path / "csv"
    assert cli_main(["export", str(results), "--format", "dynamo-csv", "-o", str(out_dir)]) == 0
    for name in ("inductor_torchbench_float32_inference_cpu_accuracy.csv",
                 "cpu_inductor_torchbench/inference_torchbench.csv"):
        rows = {line.split(",")[1]: line.split(",")[3] for line in (out_dir / name).read_text().splitlines()[1:]}
        assert rows["llama"] == "infra_error", name


def update(capsys: pytest.CaptureFixture[str], expected: Path) -> tuple[int, list[str]]:
    code = cli_main(["check-expected", str(RESULTS), "--expected", str(expected), *GROUP, "--update"])
    return code, capsys.readouterr().err.strip().splitlines()


def test_update_never_rewrites_pytorch_s_shipped_files_even_through_a_symlink(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 53: `--pytorch --update` was refused, `--expected <shipped file> --update` rewrote
    the installed package's data."""
    from experiment_runner.analysis.expected import SHIPPED

    shipped = SHIPPED / "cpu_inductor_torchbench_inference.csv"
    before = shipped.read_bytes()
    (tmp_path / "link.csv").symlink_to(shipped)
    for given in (shipped, tmp_path / "link.csv"):
        code, err = update(capsys, given)
        assert code == 2 and len(err) == 1 and "PyTorch's expected file shipped with this tool" in err[0], err
    assert shipped.read_bytes() == before


def test_update_keeps_pytorch_s_columns_and_blank_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 53: --update wrote name,accuracy,graph_breaks only, without the blank lines PyTorch
    puts before each row, so the file's diff was the whole file and its recompiles were lost."""
    path = tmp_path / "e.csv"
    rows = ["dlrm,timeout,0,1", "llama,fail_accuracy,0,0", "zzz,pass,0,3"]
    path.write_text("name,accuracy,graph_breaks,recompiles\n" + "".join(f"\n\n\n{row}\n" for row in rows))
    code, err = update(capsys, path)
    assert code == 0, err
    want = ["dlrm,timeout,0,1", "llama,pass,0,0", "zzz,pass,0,3", "nanogpt,pass,0,", "resnet50,fail_accuracy,0,"]
    assert path.read_text() == "name,accuracy,graph_breaks,recompiles\n" + "".join(f"\n\n\n{row}\n" for row in want)


def test_every_shipped_file_is_written_back_as_it_is() -> None:
    """What --update writes for a run that changes nothing is PyTorch's own file, byte for byte."""
    from experiment_runner.analysis.expected import SHIPPED, updated

    files = sorted(SHIPPED.glob("*.csv"))
    assert files
    for path in files:
        assert updated(path.read_text(), {}) == path.read_text(), path.name
