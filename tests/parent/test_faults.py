"""Fault injection: every way a child can fail leaves exactly one record with the right
status, the run goes on to the next experiment, and no process is left behind.

Each launcher runs the `faulty` suite twice: once with every fault but the hang (generous
timeout), once with the hang alone (short timeout). The records are then checked case by
case.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import (
    CliRun,
    assert_no_process_left,
    invoke_cli,
    marked_processes,
    read_records,
    start_cli,
    wait_for,
)

pytestmark = pytest.mark.e2e

LAUNCHERS = ("forkserver", "subprocess")
FAULTS = ("big_output", "exit3", "grandchild", "oom", "raise_load", "raise_run", "segfault")
COMMON = ("--suite-name=faulty", "--accelerator=cpu", "--dynamo=None", "--test=eval", "--repeat=1",
          "--warmup-iterations=1", "--verify")
HANG_TIMEOUT_S = 8


@pytest.fixture(scope="module", params=LAUNCHERS)
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
         cli_cache: Path) -> tuple[str, CliRun, CliRun]:
    launcher = request.param
    base = tmp_path_factory.mktemp(f"faults-{launcher}")
    faults = invoke_cli([*COMMON, f"--launcher={launcher}", "--subprocess-timeout=240",
                         *(f"--filter=^{name}$" for name in (*FAULTS, "quick_00"))], base / "out", cli_cache)
    hang = invoke_cli([*COMMON, f"--launcher={launcher}", f"--subprocess-timeout={HANG_TIMEOUT_S}",
                       "--filter=^hang$", "--filter=^quick_01$"], base / "hang", cli_cache)
    return launcher, faults, hang


def by_model(run: CliRun) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for record in run.records():
        grouped.setdefault(record["model"]["model_name"], []).append(record)
    return grouped


def one_record(run: CliRun, model: str) -> dict:
    records = by_model(run)[model]
    assert len(records) == 1, records
    return records[0]


def test_runs_complete_with_one_record_per_experiment(runs) -> None:
    launcher, faults, hang = runs
    assert faults.returncode == 0, faults.stderr
    assert hang.returncode == 0, hang.stderr
    assert len(faults.records()) + len(hang.records()) == len(FAULTS) + 1 + 2
    grouped = by_model(faults)
    assert sorted(grouped) == sorted((*FAULTS, "quick_00"))
    # Plan order is sorted by model: the quick model after every fault still ran.
    assert one_record(faults, "quick_00")["status"] == "ok"
    # A plain subprocess may spend the short timeout importing torch on a loaded machine.
    assert one_record(hang, "quick_01")["status"] in (("ok",) if launcher == "forkserver" else ("ok", "timeout"))
    assert {r["placement"]["launcher"] for r in faults.records()} == {launcher}
    assert_no_process_left(faults.marker)
    assert_no_process_left(hang.marker)


@pytest.mark.parametrize("model, status, error_type", [
    ("raise_load", "error", "RuntimeError"),
    ("raise_run", "error", "ValueError"),
    ("oom", "oom", "MemoryError"),
])
def test_exceptions_are_classified(runs, model: str, status: str, error_type: str) -> None:
    record = one_record(runs[1], model)
    assert record["status"] == status
    assert record["error"]["type"] == error_type
    assert record["verification_code"] == "VERIFIER_DIDNT_RUN"


def test_segfault_is_a_crash_with_its_signal(runs) -> None:
    record = one_record(runs[1], "segfault")
    assert record["status"] == "crashed"
    assert record["error"]["signal"] == "SIGSEGV"
    assert record["error"]["returncode"] == -11
    assert "Extension modules" in record["error"]["traceback_tail"]  # the tail of faulthandler's dump
    # what the native code printed before the dump (faulty_suite.NATIVE_LAST_WORDS) is the cause
    words = "free(): invalid pointer"
    assert record["error"]["message"] == f"the child died from signal SIGSEGV after printing: {words}"
    assert record["error"]["traceback_tail"].startswith(f"{words}\nFatal Python error: Segmentation")
    assert record["error"]["last_phase"] == "warm-up"
    log = (runs[1].output_dir / record["artifacts"]["log"]).read_text()
    assert "Fatal Python error: Segmentation fault" in log and "in _segfault" in log
    assert record["verification_code"] == "VERIFIER_DIDNT_RUN"


def test_exit_status_is_a_crash_with_its_returncode(runs) -> None:
    record = one_record(runs[1], "exit3")
    assert record["status"] == "crashed"
    assert record["error"]["returncode"] == 3
    assert record["error"]["signal"] is None
    assert record["verification_code"] == "VERIFIER_DIDNT_RUN"


EXIT_TIMEOUT_S = 20  # time for a plain subprocess to import torch and publish, even on a loaded host


@pytest.fixture(scope="module", params=LAUNCHERS)
def exits(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, cli_cache: Path) -> CliRun:
    """A child with a never-ending non-daemon thread, and one that never exits after its result."""
    return invoke_cli([*COMMON, f"--launcher={request.param}", f"--subprocess-timeout={EXIT_TIMEOUT_S}",
                       "--filter=^linger$", "--filter=^exit_hang$"],
                      tmp_path_factory.mktemp(f"exits-{request.param}") / "out", cli_cache)


def test_a_published_result_is_the_record_whatever_keeps_the_child_alive(exits) -> None:
    """Same outcome under both launchers: a lingering thread does not delay the exit, and a
    child that cannot exit after its final result is killed at the timeout, its result kept."""
    assert exits.returncode == 0, exits.stderr
    linger, exit_hang = one_record(exits, "linger"), one_record(exits, "exit_hang")
    assert linger["status"] == "ok" and "launcher_note" not in linger["placement"], linger
    assert exit_hang["status"] == "ok" and exit_hang["verification_code"] == linger["verification_code"]
    assert exit_hang["placement"]["launcher_note"] == (
        f"the child published its final result but had not exited after --subprocess-timeout={EXIT_TIMEOUT_S:.1f}s; "
        "its process group was killed")
    assert_no_process_left(exits.marker)


def test_a_stopped_fork_server_cannot_hold_the_timeout(tmp_path: Path, cli_cache: Path) -> None:
    """SIGSTOP the fork server while its child hangs: the timeout still kills the child, the
    stopped server (which can no longer report it) is killed and replaced, the record says
    `timeout` and why, and the next experiment runs on a new server."""
    import psutil

    args = [*COMMON, "--launcher=forkserver", f"--subprocess-timeout={HANG_TIMEOUT_S}", "--filter=^hang$",
            "--filter=^quick_02$"]
    runner, marker = start_cli(args, tmp_path / "out", cli_cache)

    def servers() -> list[int]:
        """Fork servers, not their forked children (which carry the same command line)."""
        forked = {int(line.split()[0]) for line in marked_processes(marker)
                  if "experiment_runner.child.forkserver" in line}
        return [pid for pid in forked if psutil.Process(pid).ppid() not in forked]

    wait_for(lambda: any("signal.SIG_IGN" in line for line in marked_processes(marker)), what="the hang experiment")
    (server,) = servers()
    psutil.Process(server).suspend()
    _, stderr = runner.communicate(timeout=300)  # before the fix: blocked until the server was resumed
    assert runner.returncode == 0, stderr
    records = {r["model"]["model_name"]: r for r in read_records(tmp_path / "out" / "results.jsonl")}
    assert records["hang"]["status"] == "timeout"
    assert records["hang"]["placement"]["launcher_note"].startswith("the fork server was stopped when it owed the "
                                                                    "status of the experiment it had timed out")
    assert records["quick_02"]["status"] == "ok" and records["quick_02"]["placement"]["launcher"] == "forkserver"
    assert "the fork server (torch) was stopped" in stderr
    assert not psutil.pid_exists(server) or psutil.Process(server).status() == psutil.STATUS_ZOMBIE
    assert_no_process_left(marker)


def test_a_full_disk_for_the_fork_servers_log_is_a_warning_not_a_crash() -> None:
    """The server's output is copied to the run's folder at close; a full disk there must not
    raise over the run's own first error (it is said once, as a warning)."""
    from experiment_runner.parent.launch.forkserver_launcher import ForkServerLauncher, default_kind

    warnings: list[str] = []
    launcher = ForkServerLauncher(server_log=Path("/dev/full"), warn=warnings.append)
    server = launcher.server_for(default_kind(False, dynamo=False))
    assert server is not None and server.wait_ready()
    launcher.close()
    assert warnings == ["the fork server's output was not saved to /dev/full: No space left on device"]
    assert server.process.poll() is not None


def test_hang_is_killed_at_the_timeout(runs) -> None:
    _, _, hang = runs
    record = one_record(hang, "hang")
    assert record["status"] == "timeout"
    assert record["verification_code"] == "VERIFIER_DIDNT_RUN"
    # Killed by the timeout, not before it; that the SIGTERM-proof grandchild did not outlive it
    # is test_sigterm_proof_grandchild_is_killed_with_its_group's.
    assert record["timings"]["wall_s"] >= HANG_TIMEOUT_S
    assert str(HANG_TIMEOUT_S) in record["error"]["message"], record["error"]
    # it hangs in its first forward, which the warm-up runs
    assert record["error"]["last_phase"] == "warm-up" and "it had been warm-up for" in record["error"]["message"]


def test_big_output_goes_to_the_log_not_the_record(runs) -> None:
    _, faults, _ = runs
    record = one_record(faults, "big_output")
    assert record["status"] == "ok"
    log = faults.output_dir / record["artifacts"]["log"]
    assert log.stat().st_size >= 20 * 1024 * 1024
    assert len(faults.results_path.read_text().splitlines()[0]) < 64 * 1024


def test_sigterm_proof_grandchild_is_killed_with_its_group(runs) -> None:
    _, faults, _ = runs
    assert one_record(faults, "grandchild")["status"] == "ok"
    assert_no_process_left(faults.marker, within_s=0)


# ---------------------------------------------------------------- bad input

SEED_RECORD = {"schema_version": 1, "run_id": "earlier-run", "status": "ok", "verification_code": "PASS",
               "model": {"suite_name": "faulty", "model_name": "quick_00"}}


def seed_results(folder: Path, copies: int = 3) -> bytes:
    """An earlier run's records, which no failure may alter."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps({**SEED_RECORD, "experiment_id": f"earlier/{i}"}) + "\n" for i in range(copies))
    (folder / "results.jsonl").write_text(data)
    return data.encode()


@pytest.mark.parametrize("args, message", [
    (["--suite-name=nope"], "unknown suite 'nope'"),
    (["--suite-name=dummy", "--filter=^resnet"], "no dummy model matches the filters; models: dummy"),
    (["--suite-name=dummy", "--dynamo=no_such_backend"], "unknown dynamo backend 'no_such_backend'"),
    (["--suite-name=dummy", "--accelerator=cuda"], "--accelerator=cuda, but CUDA is not available"),
    (["--suite-name=dummy", "--filter=mlp("], "invalid regex for --filter: 'mlp('"),
    (["--suite-name=dummy", "--xla-flags=xla_cpu_fast_math=false"], "malformed --xla-flags"),
    (["--suite-name=dummy", "--xla-flags=--xla_dump_to='/tmp"], "malformed --xla-flags"),
    (["--suite-name=dummy", "--max-parallel=0"], "--max-parallel must be at least 1"),
])
def test_bad_input_is_one_line_and_exit_2(run_cli, tmp_path: Path, args: list[str], message: str) -> None:
    before = seed_results(tmp_path / "output")
    run = run_cli(*args, "--dynamo=None" if "--dynamo" not in " ".join(args) else "--test=eval")
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and message in run.stderr, run.stderr
    assert run.results_path.read_bytes() == before


def test_resume_skips_corrupt_lines_with_a_warning(run_cli, tmp_path: Path) -> None:
    before = seed_results(tmp_path / "output") + b"\x00\xffnot json\n"
    (tmp_path / "output" / "results.jsonl").write_bytes(before)
    run = run_cli(*COMMON, "--filter=^quick_00$", "--resume")
    assert run.returncode == 0, run.stderr
    assert "skipped 1 corrupt or torn line(s)" in run.stderr and "line 4" in run.stderr
    after = run.results_path.read_bytes()
    assert after.startswith(before)
    assert after[len(before):].count(b"\n") == 1  # the new record, in a run of its own (the seeds say no command)


def test_resume_refuses_a_file_that_is_not_results(run_cli, tmp_path: Path) -> None:
    (tmp_path / "output").mkdir()
    garbage = bytes(range(256)) * 8
    (tmp_path / "output" / "results.jsonl").write_bytes(garbage)
    run = run_cli(*COMMON, "--filter=^quick_00$", "--resume")
    assert run.returncode == 3
    assert "is not a results file" in run.stderr and run.stderr.count("\n") == 1
    assert run.results_path.read_bytes() == garbage


@pytest.mark.parametrize("resume", [[], ["--resume"]])
def test_unreadable_results_file_exits_3(run_cli, tmp_path: Path, resume: list[str]) -> None:
    (tmp_path / "output" / "results.jsonl").mkdir(parents=True)
    run = run_cli(*COMMON, "--filter=^quick_00$", *resume)
    assert run.returncode == 3
    assert "Is a directory" in run.stderr and run.stderr.count("\n") == 1


def test_an_output_folder_under_a_file_is_refused_before_anything_runs(run_cli, tmp_path: Path) -> None:
    """A folder that cannot be created because a file sits in its path is bad input (exit 2),
    found before the plan runs (issue 54), not a write that fails half way (exit 3)."""
    (tmp_path / "a-file").write_text("")
    run = run_cli(*COMMON, "--filter=^quick_00$", output_dir=tmp_path / "a-file" / "output")
    assert run.returncode == 2
    errors = [line for line in run.stderr.splitlines() if "error" in line or "Traceback" in line]
    assert len(errors) == 1 and f"{tmp_path / 'a-file'} is a file, not a folder" in errors[0], run.stderr
    assert (tmp_path / "a-file").read_text() == ""


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_failed_write_exits_3_and_keeps_earlier_results(run_cli, tmp_path: Path, launcher: str) -> None:
    import resource

    before = seed_results(tmp_path / "output", copies=200)
    limit = len(before)  # the results file may not grow; the small files of the run still fit

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    run = run_cli(*COMMON, "--filter=^quick_0[01]$", f"--launcher={launcher}", preexec_fn=limit_file_size)
    assert run.returncode == 3, run.stderr
    error = [line for line in run.stderr.splitlines() if "error:" in line]
    assert len(error) == 1 and "was not written, earlier records are intact" in error[0], run.stderr
    assert "File too large" in error[0]
    assert run.results_path.read_bytes() == before
    assert_no_process_left(run.marker)
