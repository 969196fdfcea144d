"""bisect judges only what it ran: a step's records are its interpreter's, a failed runner is a
failed step, the run flags name one experiment, and no step outlives bisect (SIGINT, SIGTERM,
--step-timeout). The fake interpreters here are scripts: one that hangs, one whose runner ends
with exit status 1."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import assert_no_process_left, cli_env, marked_processes, new_marker, wait_for

from experiment_runner.analysis.bisect import Environment, StepRunner
from experiment_runner.cli import main as cli_main
from experiment_runner.errors import ReportError

ONE = ["--suite-name=dummy", "--filter=^dummy$", "--accelerator=cpu", "--xla=None", "--dynamo=None", "--test=eval",
       "--precision=fp32", "--repeat=2"]


def script(path: Path, body: str) -> str:
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return str(path)


def hanging(tmp_path: Path) -> str:
    """An interpreter that never returns (a deadlocked import, a stuck driver)."""
    return script(tmp_path / "hang", "import time\ntime.sleep(3600)\n")


def exiting_1(tmp_path: Path) -> str:
    """A runner that writes its records, then fails (exit status 1: an internal error)."""
    return script(tmp_path / "fails", "import subprocess, sys\n"
                                      f"subprocess.run([{sys.executable!r}, *sys.argv[1:]])\nsys.exit(1)\n")


def start(tmp_path: Path, cache: Path, envs: list[str], *extra: str, flags: list[str] = ONE):
    marker = new_marker("bisect")
    command = [sys.executable, "-m", "experiment_runner", "bisect", *[a for e in envs for a in ("--env", e)],
               "--output", str(tmp_path / "bisect"), "--processes=2", *extra, "--", *flags]
    proc = subprocess.Popen(command, env=cli_env(cache, marker), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    return proc, marker


def finish(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


@pytest.mark.parametrize("name", ["./g", "a/b", "..", ".", "g\n"])
def test_an_environment_name_must_be_a_folder_name(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`g` and `./g` would share one step folder; `..` would write beside --output."""
    code = cli_main(["bisect", "--env", "g=python", "--env", f"{name}=python", "--", *ONE])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and f"environment name {name!r} is not a folder name" in err[0], err


@pytest.mark.parametrize("flag, why", [
    ("--dry-run", "a step must run the experiment"), ("--dry", "a step must run the experiment"),
    ("--list-models", "a step must run the experiment"),
    ("--output-dirname=elsewhere", "each step writes into --output/NAME"),
    ("--output-basename=r.jsonl", "bisect reads each step's results.jsonl"),
    ("--processes=9", "give bisect's own --processes")])
def test_run_flags_bisect_sets_itself_are_refused_before_any_step(flag: str, why: str, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 53: `-- ... --dry-run --output-dirname=X` ran every step for real, into bisect's own
    folders: the runner took bisect's --output-dirname over the user's and bisect's steps ran."""
    code = cli_main(["bisect", "--env", "a=python", "--env", "b=python", "--output", str(tmp_path / "b"), "--",
                     *ONE, flag])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(
        f"experiment_runner bisect: error: {flag} is bisect's to set, not a run flag it passes on: {why}"), err
    assert not (tmp_path / "b").exists(), "no step ran"


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_envs_from_a_device_is_refused_not_read(device: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(["bisect", "--envs", device, "--", *ONE])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [f"experiment_runner bisect: error: {device} is a device, not an environments file "
                                 "(`NAME PYTHON` per line)"], err


def test_a_step_folder_is_reused_only_by_its_own_interpreter(tmp_path: Path) -> None:
    runner = StepRunner(ONE, tmp_path, 2)
    runner.claim(Environment("g", "/builds/a/bin/python"))
    runner.claim(Environment("g", "/builds/a/bin/python"))  # rerunning resumes
    (tmp_path / "g" / "results.jsonl").write_text("{}\n")
    with pytest.raises(ReportError, match="holds the records of /builds/a/bin/python, not of /builds/b/bin/python"):
        runner.claim(Environment("g", "/builds/b/bin/python"))
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "results.jsonl").write_text("{}\n")  # an --output reused from before: whose records?
    with pytest.raises(ReportError, match="holds the records of an unknown interpreter"):
        runner.claim(Environment("old", "/builds/a/bin/python"))


@pytest.mark.e2e
def test_a_runner_that_exits_1_is_a_failed_step(tmp_path: Path, cli_cache: Path) -> None:
    proc, _ = start(tmp_path, cli_cache, [f"good={sys.executable}", f"bad={exiting_1(tmp_path)}"])
    code, out, err = finish(proc)
    assert code == 2, out + err
    assert "bisect: nothing to bisect: the newest environment cannot run it: exit status 1" in out, out
    assert (tmp_path / "bisect" / "bad" / "results.jsonl").is_file(), "its records were written, and not judged"


@pytest.mark.e2e
def test_run_flags_selecting_several_experiments_are_refused(tmp_path: Path, cli_cache: Path) -> None:
    proc, _ = start(tmp_path, cli_cache, [f"a={sys.executable}", f"b={sys.executable}"],
                    flags=[*ONE, "--test=train"])
    code, out, err = finish(proc)
    assert code == 2 and err.strip().splitlines() == [
        "experiment_runner bisect: error: the run flags select 2 experiments; bisect needs one (an anchored --filter "
        "and one value of every dimension: the line `history` prints for a change)"], out + err
    assert not (tmp_path / "bisect" / "a" / "results.jsonl").exists(), "nothing was run"


@pytest.mark.e2e
def test_a_hanging_step_times_out_and_its_processes_are_ended(tmp_path: Path, cli_cache: Path) -> None:
    proc, marker = start(tmp_path, cli_cache, [f"good={sys.executable}", f"stuck={hanging(tmp_path)}"],
                         "--step-timeout=20")
    code, out, err = finish(proc)
    assert code == 2, out + err
    assert "the newest environment cannot run it: timed out after 20 s (--step-timeout)" in out, out
    assert_no_process_left(marker)


@pytest.mark.e2e
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_bisect_at_once_with_no_verdict(tmp_path: Path, cli_cache: Path, signum: int) -> None:
    proc, marker = start(tmp_path, cli_cache, [f"good={sys.executable}", f"stuck={hanging(tmp_path)}"])
    stuck = str(tmp_path / "hang")
    wait_for(lambda: any(line.split()[2:3] == [stuck] for line in marked_processes(marker)), timeout=180,
             what="the hanging step")  # "PID INTERPRETER SCRIPT ARGS...": the script runs, not just named
    proc.send_signal(signum)
    code, out, err = finish(proc, timeout=60)
    name = signal.Signals(signum).name
    assert code == 128 + signum, err
    assert err.strip().splitlines() == [f"experiment_runner bisect: stopped by {name}: no verdict; finished steps "
                                        f"are kept in {tmp_path / 'bisect'} (rerun the same command to resume)"], err
    assert "first bad" not in out and "nothing to bisect" not in out
    assert_no_process_left(marker)
