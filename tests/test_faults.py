"""Fault injection: every way a child can fail leaves exactly one record with the right
status, the run goes on to the next experiment, and no process is left behind.

Each launcher runs the `faulty` suite twice: once with every fault but the hang (generous
timeout), once with the hang alone (short timeout). The records are then checked case by
case.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import CliRun, assert_no_process_left, invoke_cli

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
    assert "in _segfault" in record["error"]["traceback_tail"]  # faulthandler's stack, from the log
    assert record["verification_code"] == "VERIFIER_DIDNT_RUN"


def test_exit_status_is_a_crash_with_its_returncode(runs) -> None:
    record = one_record(runs[1], "exit3")
    assert record["status"] == "crashed"
    assert record["error"]["returncode"] == 3
    assert record["error"]["signal"] is None
    assert record["verification_code"] == "VERIFIER_DIDNT_RUN"


def test_hang_is_killed_at_the_timeout(runs) -> None:
    _, _, hang = runs
    record = one_record(hang, "hang")
    assert record["status"] == "timeout"
    assert record["verification_code"] == "VERIFIER_DIDNT_RUN"
    # The SIGTERM-proof grandchild cost at most the grace period, not its 600 s sleep.
    assert HANG_TIMEOUT_S <= record["timings"]["wall_s"] < HANG_TIMEOUT_S + 10


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
