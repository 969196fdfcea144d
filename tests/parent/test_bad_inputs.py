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


@pytest.mark.parametrize(("flag", "message"), [
    ("--processes=100000000", "--processes must be between 1 and 1000 (pyperf uses 20), got 100000000"),
    ("--heartbeat=0.001", "--heartbeat must be at least 0.5 seconds (a line per experiment each time: less floods "
                          "the log), got 0.001"),
    ("--output-basename=runs", "--output-basename=runs puts the results file in the run registry ({out}/runs, "
                               "where each run is registered); name it otherwise"),
    ("--output-basename=runs/r.jsonl", "--output-basename=runs/r.jsonl puts the results file in the run registry"),
    ("--output-basename=results.jsonl.lock", "--output-basename=results.jsonl.lock names the results file "
                                            "{out}/results.jsonl.lock, the lock of the results file results.jsonl "
                                            "beside it, which every run into that file truncates; name it otherwise"),
    ("--output-basename=../../x.jsonl", "--output-basename=../../x.jsonl leads out of --output-dirname ({given}); "
                                       "give a name inside it, or an absolute path"),
    ("--output-basename=night/runs", "--output-basename=night/runs names the results file {out}/night/runs, the run "
                                     "registry of any run into {out}/night; name it otherwise"),
    ("--output-basename=minified.jsonl", "--output-basename=minified.jsonl names the results file "
                                         "{out}/minified.jsonl, the minification answers of any results file "
                                         "beside it (minify and --minify append there); name it otherwise"),
    ("--min-pairs=400", "--min-pairs=400 is above --max-pairs=100"),
    ("--min-pairs=5", "--min-pairs must be at least 6 (fewer pairs have no 95% interval), got 5"),
    ("--pairs-half-width=0", "--pairs-half-width must be in (0, 1], got 0.0"),
])
def test_flags_that_would_stall_flood_or_break_later_runs_are_refused(tmp_path: Path, flag: str,
                                                                      message: str) -> None:
    from experiment_runner.cli import parse_config
    from experiment_runner.errors import UsageError

    out = tmp_path / "out"
    with pytest.raises(UsageError) as refused:
        parse_config([*COMMON, "--dry-run", f"--output-dirname={out}", flag])
    assert message.format(out=os.path.realpath(out), given=out) in str(refused.value)
    assert not out.exists(), "nothing was written"


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_file_as_the_output_folder_is_one_line_before_anything_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], dry_run: bool) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# notes\n")
    for given, message in ((readme, f"--output-dirname={readme} is a file, not a folder"),
                           (readme / "out", f"--output-dirname={readme / 'out'}: {readme} is a file, not a folder")):
        code = cli_main([*COMMON, f"--output-dirname={given}", *(["--dry-run"] if dry_run else [])])
        (line,) = capsys.readouterr().err.splitlines()
        assert code == 2
        assert line == (f"experiment_runner: error: {message}; give a folder (it is created if missing)")
    assert readme.read_text() == "# notes\n"


def test_a_results_file_is_never_named_as_another_ones_lock_even_through_a_symlink(tmp_path: Path) -> None:
    """Issue 53: records written to results.jsonl.lock were truncated by the next default run,
    which locks results.jsonl there."""
    from experiment_runner.cli import parse_config
    from experiment_runner.errors import UsageError

    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.jsonl").symlink_to(out / "shared.jsonl.lock")
    with pytest.raises(UsageError, match="the lock of the results file shared.jsonl beside it"):
        parse_config([*COMMON, f"--output-dirname={out}", "--output-basename=mine.jsonl"])


def test_a_lock_file_holding_records_is_left_as_it_is(tmp_path: Path) -> None:
    """Records already written under a lock's name (by a runner before issue 53) are not
    truncated by the run that locks their neighbour: refused, byte for byte intact."""
    from experiment_runner.errors import UsageError
    from experiment_runner.parent.store import lock_results

    records = b'{"run_id": "a", "experiment_id": "x", "status": "ok"}\n' * 40
    (tmp_path / "results.jsonl.lock").write_bytes(records)
    with pytest.raises(UsageError, match=r"results.jsonl.lock, the lock of .*results.jsonl, holds 2160 bytes"):
        lock_results(tmp_path / "results.jsonl")
    assert (tmp_path / "results.jsonl.lock").read_bytes() == records
    os.close(lock_results(tmp_path / "other.jsonl"))
    (tmp_path / "other.jsonl.lock").write_bytes(b"pid 1 on host h\n")  # a finished runner's line: a lock
    os.close(lock_results(tmp_path / "other.jsonl"))
    assert (tmp_path / "other.jsonl.lock").read_bytes().startswith(f"pid {os.getpid()} ".encode())


@pytest.mark.e2e
def test_a_device_as_the_results_file_is_refused_before_any_experiment(tmp_path: Path, cli_cache: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([*cli_command(list(COMMON), out), "--output-basename=/dev/null"],
                          env=cli_env(cli_cache, new_marker("devnull")), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "experiment_runner: error: cannot write results file /dev/null: /dev/null is a device, not a regular file "
        "(its records would fail or be lost); give a file")
    assert not (out / "runs").exists(), "no run was registered, no experiment ran"


def test_records_a_reader_may_misread_are_said_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    import warnings

    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # cli_main sets its own
    golden = (Path(__file__).parents[1] / "golden" / "results.jsonl").read_text().splitlines()
    first = json.loads(golden[0])
    newer = {**json.loads(golden[1]), "schema_version": 2}
    mistyped = {**json.loads(golden[2]), "status": 5}
    for command in ("report", "history"):  # history's DuckDB reader hands such a file to the tolerant one
        path = tmp_path / command / "results.jsonl"
        path.parent.mkdir()
        path.write_text("".join(json.dumps(r) + "\n" for r in (first, newer, mistyped)))
        assert cli_main([command, str(path)]) == 0
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"experiment_runner: warning: {path}: read 2 record(s) this reader may misread (line 2: "
                       "schema_version 2, this reader knows 1)"], (command, err)
    path = tmp_path / "mistyped.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (first, mistyped)))
    assert cli_main(["report", str(path)]) == 0
    assert capsys.readouterr().err.strip().splitlines() == [
        f"experiment_runner: warning: {path}: read 1 record(s) this reader may misread (line 2: status is int '5', "
        "the schema says string)"]
