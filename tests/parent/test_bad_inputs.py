"""Inputs that used to crash or hang the tools: one line and a non-zero exit, at once."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import cli_command, cli_env, new_marker
from experiment_runner.cli import main as cli_main

COMMON = ("--suite-name=faulty", "--accelerator=cpu", "--dynamo=None", "--test=eval", "--filter=^quick_0[01]$")


@pytest.mark.e2e
def test_a_fifo_as_the_results_file_is_refused_not_waited_on(tmp_path: Path, cli_cache: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "results.jsonl")
    proc = subprocess.run(cli_command(list(COMMON), out), env=cli_env(cli_cache, new_marker("fifo")), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "is not a regular file (a FIFO or a socket)" in line


@pytest.mark.e2e
def test_shard_durations_from_a_device_are_one_line(tmp_path: Path, cli_cache: Path) -> None:
    proc = subprocess.run(cli_command([*COMMON, "--total-partitions=2", "--shard-by=duration:/dev/zero"],
                                      tmp_path / "out"), env=cli_env(cli_cache, new_marker("zero")), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "experiment_runner: error: cannot read results file /dev/zero: not a regular file (a FIFO, a socket or a "
        "device)"]


@pytest.mark.parametrize("command", ["report", "compare", "merge"])
def test_analysis_commands_refuse_a_device(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [command, "/dev/zero", *(["-o", str(tmp_path / "all.jsonl")] if command == "merge" else [])]
    code = cli_main(argv)
    err = capsys.readouterr().err
    assert code == 3, err
    assert len(err.strip().splitlines()) == 1 and "not a regular file" in err
