"""No analysis command writes over its own input, into a FIFO or into a device
(analysis.files.check_output, asked by every writer before it reads anything)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

import pytest

from experiment_runner.cli import main as cli_main

RESULTS = Path(__file__).parents[1] / "golden" / "results.jsonl"
GROUP = ["--group", "inductor_torchbench_float32_inference_cpu"]

# Each writer, given its input and its output.
WRITERS: dict[str, Callable[[Path, Path], list[str]]] = {
    "export": lambda src, out: ["export", str(src), "--format=pytorch-benchmark", "-o", str(out)],
    "history --html": lambda src, out: ["history", str(src), "--html", str(out)],
    "merge": lambda src, out: ["merge", str(src), "-o", str(out)],
    "check-expected --update": lambda src, out: ["check-expected", str(src), "--expected", str(out), *GROUP,
                                                 "--update"],
}


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, list[str]]:
    code = cli_main(argv)
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("alias", ["same path", "symlink", "hard link", "dot path"])
def test_no_writer_replaces_its_own_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], writer: str,
                                          alias: str) -> None:
    src = tmp_path / "output" / "results.jsonl"
    src.parent.mkdir()
    shutil.copy(RESULTS, src)
    before = src.read_bytes()
    out = {"same path": src, "symlink": tmp_path / "link.jsonl", "hard link": tmp_path / "hard.jsonl",
           "dot path": tmp_path / "output" / "." / "results.jsonl"}[alias]
    if alias == "symlink":
        out.symlink_to(src)
    elif alias == "hard link":
        os.link(src, out)
    code, err = run(capsys, WRITERS[writer](src, out))
    assert code == 2, err
    assert len(err) == 1 and f"{out} is one of the inputs ({src})" in err[0], err
    assert src.read_bytes() == before


@pytest.mark.parametrize("writer", ["export", "history --html", "check-expected --update"])
def test_an_input_inside_a_given_folder_is_an_input_too(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        writer: str) -> None:
    src = tmp_path / "nightly" / "n1" / "results.jsonl"
    src.parent.mkdir(parents=True)
    shutil.copy(RESULTS, src)
    code, err = run(capsys, WRITERS[writer](tmp_path / "nightly", src))
    assert code == 2 and "is one of the inputs" in err[0], err
    assert src.read_bytes() == RESULTS.read_bytes()


@pytest.mark.parametrize("writer", WRITERS)
def test_a_fifo_or_a_device_is_refused_before_anything_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               writer: str) -> None:
    """A FIFO nobody reads would block the write forever; here a reader holds it open without
    reading, so a writer that went ahead would return (and fill it) instead of hanging the test."""
    src = tmp_path / "results.jsonl"
    shutil.copy(RESULTS, src)
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        code, err = run(capsys, WRITERS[writer](src, fifo))
        assert code == 2 and err == [next(line for line in err if "error" in line)], err
        assert f"{fifo} is a FIFO, not a regular file; give a file path" in err[0]
        assert os.read(reader, 1) == b"", "nothing was written into it"
    finally:
        os.close(reader)
    code, err = run(capsys, WRITERS[writer](src, Path("/dev/null")))
    assert code == 2 and "/dev/null is a device, not a regular file" in err[0], err


def test_folder_outputs_must_be_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    taken = tmp_path / "taken"
    taken.write_text("kept\n")
    code, err = run(capsys, ["export", str(RESULTS), "--format=dynamo-csv", "-o", str(taken)])
    assert code == 2 and err == [f"experiment_runner export: error: -o {taken} is not a directory (a file); "
                                 "give a folder for the files"]
    code, err = run(capsys, ["report", str(RESULTS), "--plot", str(taken)])
    assert code == 2 and err == [f"experiment_runner report: error: --plot {taken} is not a directory (a file); "
                                 "give a folder for the files"]
    assert taken.read_text() == "kept\n"
