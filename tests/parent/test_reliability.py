"""Fault injection, round two (issue 14), under both launchers:

- a retry that dies without a result is never recorded with an earlier attempt's result;
- a child that dies verifying keeps its timings;
- SIGTERM and SIGHUP stop a run as Ctrl-C does (interrupted record, summary, 128+signal);
- a runner killed with SIGKILL leaves no process behind, not even one that called setsid();
- a timeout kills descendants that left the experiment's process group;
- one runner per run: a second one on the same run exits 2 naming the first;
- output-side I/O failures are exit 3 with one line naming the path and the OS error;
- a dead fork server is said in the record, restarted, and warned about once.
"""

from __future__ import annotations

import os
import resource
import signal
from collections import Counter
from pathlib import Path

import pytest
from conftest import assert_no_process_left, invoke_cli, marked_processes, read_records, start_cli, wait_for
from experiment_runner.core.protocol import AOT_PACKAGE

pytestmark = pytest.mark.e2e

LAUNCHERS = ("forkserver", "subprocess")
COMMON = ("--suite-name=faulty", "--accelerator=cpu", "--dynamo=None", "--test=eval", "--repeat=1",
          "--warmup-iterations=0")
# A timeout these tests wait out: long enough for a child to reach its hang on a loaded host.
# A fresh interpreter imports torch first (seconds, tens of seconds under load); a child forked
# from the warm fork server starts where the server left off, and its timeout starts at the fork.
HANG_TIMEOUT_S = {"forkserver": 15, "subprocess": 45}


def stubborn_alive(marker: str) -> bool:
    """Whether a faulty model's SIGTERM-proof descendant of this run is still alive."""
    return any("signal.SIG_IGN" in line for line in marked_processes(marker))


def records_by_model(path: Path) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for record in read_records(path):
        grouped.setdefault(record["model"]["model_name"], []).append(record)
    return grouped


# ---- stale results -----------------------------------------------------------------------

@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_retry_failed_never_records_the_first_attempts_result(launcher: str, tmp_path: Path, run_cli) -> None:
    """retry_raise raises ValueError on its first attempt and segfaults on every retry."""
    args = (*COMMON, "--filter=^retry_raise$", f"--launcher={launcher}")
    env = {"FAULTY_STATE_DIR": str(tmp_path)}
    first = run_cli(*args, env=env)
    assert first.returncode == 0, first.stderr
    assert [r["error"]["type"] for r in first.records()] == ["ValueError"]
    retried = run_cli(*args, "--resume", "--retry-failed", env=env)
    assert retried.returncode == 0, retried.stderr
    first_record, retry = retried.records()
    assert (retry["status"], retry["error"]["signal"]) == ("crashed", "SIGSEGV")
    assert "per_iter_time" not in retry["metrics"] and "ValueError" not in retry["metrics"]["error"]
    assert "ValueError" not in retry["error"]["traceback_tail"]
    log = (retried.output_dir / retry["artifacts"]["log"]).read_text()
    assert "Segmentation fault" in log and "in _segfault" in retry["error"]["traceback_tail"]
    # Each attempt keeps its own folder: the first record's log is still the first attempt's.
    assert retry["artifacts"]["dir"] == f"{first_record['artifacts']['dir']}/attempt_2"
    first_log = (retried.output_dir / first_record["artifacts"]["log"]).read_text()
    assert first_log.startswith("experiment_runner worker:") and "Segmentation fault" not in first_log
    assert_no_process_left(retried.marker)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_resume_after_sigkill_never_records_the_killed_attempts_result(launcher: str, tmp_path: Path,
                                                                       run_cli, cli_cache: Path) -> None:
    """retry_hang_verify publishes its interim result, then hangs verifying; the runner is
    killed there; the retry segfaults while loading. Its record must not be the stale one."""
    args = [*COMMON, "--filter=^retry_hang_verify$", "--verify", f"--launcher={launcher}"]
    env = {"FAULTY_STATE_DIR": str(tmp_path)}
    out = tmp_path / "out"
    proc, marker = start_cli(args, out, cli_cache, env)
    wait_for(lambda: any(out.glob("runs/*/retry_hang_verify-*/result.interim.json")), what="the interim result")
    proc.kill()
    proc.communicate()
    assert_no_process_left(marker)
    results = out / "results.jsonl"
    assert not results.exists() or not read_records(results), "the first attempt must still be hanging when killed"

    resumed = run_cli(*args, "--resume", output_dir=out, env=env)
    assert resumed.returncode == 0, resumed.stderr
    [record] = resumed.records()
    assert (record["status"], record["error"]["signal"]) == ("crashed", "SIGSEGV")
    assert "per_iter_time" not in record["metrics"] and record["verification_code"] == "VERIFIER_DIDNT_RUN"
    assert_no_process_left(resumed.marker)


# ---- a death during verification ---------------------------------------------------------

@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_death_in_float64_verification_keeps_the_timings(launcher: str, run_cli) -> None:
    run = run_cli(*COMMON, "--filter=^verify_(segfault|hang)$", "--verify",
                  f"--subprocess-timeout={HANG_TIMEOUT_S[launcher]}", f"--launcher={launcher}")
    assert run.returncode == 0, run.stderr
    records = {model: rs[0] for model, rs in records_by_model(run.results_path).items()}
    for model, death in (("verify_segfault", "(crashed)"), ("verify_hang", "(timeout)")):
        record = records[model]
        assert record["status"] == "ok", record["error"]
        assert len(record["metrics"]["per_iter_time"]) == 1
        assert record["verification_code"] == "VERIFIER_DIDNT_RUN"
        assert f"died during verification {death}" in record["verification"]["details"]["reason"]
        assert record["error"]["phase"] == "verification"
    assert records["verify_segfault"]["error"]["signal"] == "SIGSEGV"
    assert_no_process_left(run.marker)


# ---- SIGTERM, SIGHUP, SIGKILL of the runner ----------------------------------------------

@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_sighup_stops_a_run_like_ctrl_c(launcher: str, tmp_path: Path, cli_cache: Path) -> None:
    """A closed terminal; SIGTERM is the `timeout` test below."""
    sig = signal.SIGHUP
    out = tmp_path / "out"
    proc, marker = start_cli([*COMMON, "--filter=^hang$", "--filter=^quick_00$", f"--launcher={launcher}"],
                             out, cli_cache)
    wait_for(lambda: stubborn_alive(marker), what="the hang experiment's grandchild")
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, stderr
    assert "Traceback" not in stderr and "Interrupted" in stdout
    records = read_records(out / "results.jsonl")
    assert [(r["model"]["model_name"], r["status"]) for r in records] == [("hang", "interrupted")]
    assert_no_process_left(marker)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_timeout_command_exits_143_with_an_interrupted_record(launcher: str, tmp_path: Path, run_cli,
                                                             cli_cache: Path) -> None:
    """`timeout -s TERM 20 experiment_runner ...`, as cron jobs and CI stop a long matrix;
    the running experiment has a descendant that left its process group. (--preserve-status:
    without it `timeout` itself exits 124 whatever the command did.)"""
    assert run_cli("--suite-name=faulty", "--dry-run").returncode == 0  # the host probe is cached: 20 s to run
    out = tmp_path / "out"
    proc, marker = start_cli([*COMMON, "--filter=^escape_hang$", "--filter=^nap_", f"--launcher={launcher}"],
                             out, cli_cache, prefix=("timeout", "--preserve-status", "-s", "TERM", "20"))
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr and "Interrupted" in stdout
    records = read_records(out / "results.jsonl")
    assert [(r["model"]["model_name"], r["status"]) for r in records] == [("escape_hang", "interrupted")]
    assert_no_process_left(marker)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_sigkilled_runner_leaves_no_process_not_even_a_setsid_one(launcher: str, tmp_path: Path,
                                                                   cli_cache: Path) -> None:
    out = tmp_path / "out"
    proc, marker = start_cli([*COMMON, "--filter=^escape_hang$", f"--launcher={launcher}"], out, cli_cache)
    wait_for(lambda: stubborn_alive(marker), what="the escaped grandchild")
    proc.kill()
    proc.communicate()
    assert_no_process_left(marker)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_timeout_kills_a_descendant_that_left_the_group(launcher: str, tmp_path: Path, cli_cache: Path) -> None:
    out = tmp_path / "out"
    results = out / "results.jsonl"
    proc, marker = start_cli([*COMMON, "--filter=^escape_hang$", "--filter=^quick_",
                              f"--subprocess-timeout={HANG_TIMEOUT_S[launcher]}", f"--launcher={launcher}"],
                             out, cli_cache)
    wait_for(lambda: stubborn_alive(marker), what="the escaped grandchild")
    wait_for(lambda: results.exists() and b"escape_hang" in results.read_bytes(), what="the timeout record")
    assert proc.poll() is None  # still running the quick models: the run's own cleanup has not come yet
    assert not stubborn_alive(marker)
    proc.kill()
    proc.communicate()
    [record] = [r for r in read_records(results) if r["model"]["model_name"] == "escape_hang"]
    assert record["status"] == "timeout"
    assert_no_process_left(marker)


# ---- one runner per run ------------------------------------------------------------------

@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_two_resume_runners_one_runs_the_other_exits_2(launcher: str, tmp_path: Path, cli_cache: Path) -> None:
    out = tmp_path / "out"
    results = out / "results.jsonl"
    args = [*COMMON, "--filter=^nap_0[0-7]$", f"--launcher={launcher}"]
    first, marker = start_cli(args, out, cli_cache)
    wait_for(lambda: results.exists() and results.read_bytes().count(b"\n") >= 1, what="one record")
    first.kill()
    first.communicate()
    assert_no_process_left(marker)

    runners = [start_cli([*args, "--resume"], out, cli_cache) for _ in range(2)]
    outcomes = [(proc.communicate(timeout=600), proc.returncode) for proc, _ in runners]
    codes = sorted(code for _, code in outcomes)
    assert codes in ([0, 2], [0, 0]), outcomes  # [0, 0]: the second started after the first had finished
    for (_, stderr), code in outcomes:
        if code == 2:
            lines = [line for line in stderr.splitlines() if "error" in line or "Traceback" in line]
            assert len(lines) == 1, stderr
            assert "is being written by pid" in lines[0] and f"on host {os.uname().nodename}" in lines[0]
    records = read_records(results)
    assert len({r["run_id"] for r in records}) == 1
    assert Counter(r["model"]["model_name"] for r in records) == Counter({f"nap_0{i}": 1 for i in range(8)})
    for _, marker in runners:
        assert_no_process_left(marker)


# ---- output-side I/O failures --------------------------------------------------------------

def _no_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))


def _file_size_1k() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.RLIM_INFINITY))


@pytest.mark.parametrize("launcher, fault", [
    # Both fail before any experiment starts: the launcher plays no part.
    ("subprocess", "runs_is_a_file"), ("forkserver", "file_size_limit_0"),
    # The first record's write fails, after an experiment ran under each launcher.
    ("subprocess", "disk_full"), ("forkserver", "disk_full"),
    # A 1 KiB file-size limit: the run's registry entry (its command and options) does not fit.
    ("subprocess", "file_size_limit_1k"), ("forkserver", "file_size_limit_1k"),
])
def test_output_io_failure_is_one_line_and_exit_3(launcher: str, fault: str, tmp_path: Path, cli_cache: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    popen: dict = {}
    if fault == "runs_is_a_file":
        (out / "runs").write_text("not a folder")
        expected = (f"{out / 'runs'}", "Not a directory")
    elif fault == "file_size_limit_0":
        popen["preexec_fn"] = _no_file_size
        expected = (str(out), "File too large")
    elif fault == "file_size_limit_1k":
        popen["preexec_fn"] = _file_size_1k
        expected = ("run.json.tmp", "File too large")
    else:
        (out / "results.jsonl").symlink_to("/dev/full")  # refused before any experiment runs
        expected = (f"{out / 'results.jsonl'}", "/dev/full is a device, not a regular file")
    run = invoke_cli([*COMMON, "--filter=^quick_00$", f"--launcher={launcher}"], out, cli_cache, **popen)
    assert run.returncode == 3, run.stderr
    assert "Traceback" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("experiment_runner: error: ")]
    assert len(errors) == 1 and run.stderr.strip().endswith(errors[0]), run.stderr
    assert expected[0] in errors[0] and expected[1] in errors[0], errors[0]
    assert_no_process_left(run.marker)


# ---- the fork server dies ----------------------------------------------------------------

def test_fork_server_death_is_recorded_warned_once_and_the_server_restarted(run_cli) -> None:
    run = run_cli(*COMMON, "--filter=^kill_server$", "--filter=^quick_0[01]$", "--launcher=forkserver")
    assert run.returncode == 0, run.stderr
    records = {model: rs[0] for model, rs in records_by_model(run.results_path).items()}
    dead = records["kill_server"]
    assert (dead["status"], dead["error"]["type"]) == ("crashed", "LauncherDied")
    assert "the fork server was killed by SIGKILL while this experiment ran" in dead["error"]["message"]
    for model in ("quick_00", "quick_01"):
        assert records[model]["status"] == "ok"
        assert records[model]["placement"]["launcher"] == "forkserver"  # a new server forked them
    warnings = [line for line in run.stderr.splitlines() if "warning" in line and "fork server" in line]
    assert len(warnings) == 1, run.stderr
    assert_no_process_left(run.marker)


def test_kill_server_refuses_without_a_fork_server(run_cli) -> None:
    """The subprocess launcher has no server to lose: the model says so, as an error record."""
    run = run_cli(*COMMON, "--filter=^kill_server$", "--launcher=subprocess")
    [record] = run.records()
    assert record["status"] == "error" and "needs --launcher=forkserver" in record["error"]["message"]


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_sigkill_is_not_called_oom_without_evidence(launcher: str, run_cli) -> None:
    run = run_cli(*COMMON, "--filter=^sigkill$", f"--launcher={launcher}")
    [record] = run.records()
    assert (record["status"], record["error"]["type"]) == ("crashed", "Killed"), record["error"]
    assert record["error"]["message"].startswith("killed by SIGKILL, not by the runner")


def test_a_foreign_lock_on_the_results_file_is_said_and_sigterm_ends_the_wait(tmp_path: Path,
                                                                              cli_cache: Path) -> None:
    """Another program holding the results file flock'd (a backup, a reader of its own): the
    runner says who, waits without blocking in a system call, and SIGTERM ends it with one
    line (exit 3), the file untouched."""
    import fcntl
    import threading

    out = tmp_path / "out"
    out.mkdir()
    results = out / "results.jsonl"
    results.write_bytes(b"")
    holder = os.open(results, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        runner, marker = start_cli([*COMMON, "--filter=^quick_00$"], out, cli_cache)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(runner.stderr), daemon=True)
        reader.start()
        wait_for(lambda: any("is locked by" in line for line in lines), what="the lock warning")
        (warning,) = [line for line in lines if "is locked by" in line]
        assert warning.startswith(f"experiment_runner: warning: {results} is locked by pid {os.getpid()} (")
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=120) == 3
        reader.join(timeout=30)
    finally:
        os.close(holder)
    errors = [line for line in lines if line.startswith("experiment_runner: error:")]
    assert len(errors) == 1 and "Traceback" not in "".join(lines), lines
    assert errors[0].startswith(f"experiment_runner: error: the run was stopped while {results} was locked by pid "
                                f"{os.getpid()}") and "the record of quick_00" in errors[0]
    assert results.read_bytes() == b""
    assert_no_process_left(marker)


# ---- what a dead attempt leaves ---------------------------------------------------------

def leftovers(out: Path) -> list[str]:
    """Files of the run that are not evidence: AOT Inductor packages and scratch folders."""
    return sorted(str(path.relative_to(out)) for pattern in (f"runs/**/{AOT_PACKAGE}", "runs/**/scratch")
                  for path in out.glob(pattern))


def package_written(out: Path) -> Path | None:
    return next(out.glob(f"runs/*/aot_hang-*/{AOT_PACKAGE}"), None)


def test_a_child_killed_with_its_aot_package_built_leaves_no_package(tmp_path: Path, run_cli,
                                                                     cli_cache: Path) -> None:
    """Issue 53: an AOT Inductor child SIGKILLed once its package existed was recorded as
    crashed, but the package (the weights' size) stayed, and --retry-failed wrote attempt_2/
    beside it."""
    args = [*COMMON, "--filter=^aot_hang$", "--subprocess-timeout=600"]
    env = {"FAULTY_STATE_DIR": str(tmp_path)}
    out = tmp_path / "out"
    proc, marker = start_cli(args, out, cli_cache, env)
    wait_for(lambda: package_written(out) is not None, what="the AOT Inductor package")
    os.kill(int(package_written(out).read_text()), signal.SIGKILL)  # the experiment's child, started by this test
    proc.communicate(timeout=300)
    assert proc.returncode == 0
    [record] = read_records(out / "results.jsonl")
    assert (record["status"], record["error"]["signal"]) == ("crashed", "SIGKILL")
    assert leftovers(out) == []
    assert (out / record["artifacts"]["log"]).is_file(), "the log is evidence: it stays"
    retried = run_cli(*args, "--retry-failed", output_dir=out, env=env)
    assert retried.returncode == 0, retried.stderr
    assert [r["status"] for r in retried.records()] == ["crashed", "ok"]
    assert leftovers(out) == []
    assert_no_process_left(marker)


def test_the_resume_removes_what_an_attempt_dead_with_its_runner_left(tmp_path: Path, run_cli,
                                                                      cli_cache: Path) -> None:
    """Issue 53: the runner SIGKILLed while an AOT Inductor child held its package: after the
    resume, the package and scratch/tmp/aotinductor_* stayed. The resume removes them; the
    dead attempt's log stays."""
    args = [*COMMON, "--filter=^aot_hang$", "--subprocess-timeout=600"]
    env = {"FAULTY_STATE_DIR": str(tmp_path)}
    out = tmp_path / "out"
    proc, marker = start_cli(args, out, cli_cache, env)
    wait_for(lambda: package_written(out) is not None, what="the AOT Inductor package")
    dead = package_written(out).parent
    proc.kill()
    proc.communicate()
    assert_no_process_left(marker)
    assert [path.name for path in (dead / "scratch" / "tmp").glob("aotinductor_*")] == ["aotinductor_unpacked"]
    resumed = run_cli(*args, output_dir=out, env=env)
    assert resumed.returncode == 0, resumed.stderr
    [record] = resumed.records()
    assert record["status"] == "ok" and record["artifacts"]["dir"].endswith("/attempt_2")
    assert leftovers(out) == []
    assert (dead / "child.log").is_file(), "the dead attempt's log is evidence: it stays"
