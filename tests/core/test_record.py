"""How a record is built from what a child left: only this attempt's result counts, an
interim result keeps the timings of a child that died verifying, and a SIGKILL is `oom`
only with the kernel's word for it."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from experiment_runner.core.matrix import Experiment, ExperimentConfig
from experiment_runner.core.options import RunOptions
from experiment_runner.core.protocol import (PROTOCOL_VERSION, ChildResult, PublishedResult, Task, publish_result,
                                            read_attempt_result, write_phase)
from experiment_runner.core.record import ChildOutcome, RecordContext, build_record, classify_death

TIMED = ChildResult(status="ok", batch_size=None, precision="fp32",
                    metrics={"per_iter_time": [0.01, 0.011]}, verification_code="VERIFIER_DIDNT_RUN")


def experiment() -> Experiment:
    return Experiment("dummy", "dummy_mlp", ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo=None,
                                                             test="eval", precision="fp32"))


def task(tmp_path: Path) -> Task:
    return Task(experiment(), RunOptions(verify=True), str(tmp_path))


def record(tmp_path: Path, outcome: ChildOutcome) -> dict:
    ctx = RecordContext(run_id="r", fingerprint="0123456789ab", options=RunOptions(verify=True), output_dir=tmp_path)
    return build_record(ctx, experiment(), outcome, artifacts_dir=tmp_path, timeout_s=30)


def test_a_result_of_another_attempt_is_never_read(tmp_path: Path) -> None:
    first, second = task(tmp_path), task(tmp_path)
    assert first.attempt_id != second.attempt_id
    publish_result(first, replace(TIMED, status="error"))
    assert read_attempt_result(first).result.status == "error"
    assert read_attempt_result(second) is None  # stale: written by the first attempt
    second.clear_results()
    assert not any(tmp_path.iterdir())


def test_a_result_of_another_protocol_version_is_an_error_naming_both(tmp_path: Path) -> None:
    attempt = task(tmp_path)
    publish_result(attempt, TIMED)
    written = json.loads(attempt.result_path.read_text())
    attempt.result_path.write_text(json.dumps({**written, "protocol": PROTOCOL_VERSION - 1}))
    built = record(tmp_path, ChildOutcome(result=read_attempt_result(attempt), returncode=0))
    assert built["status"] == "error" and "per_iter_time" not in built["metrics"]
    assert built["error"]["type"] == "ProtocolMismatch"
    assert (f"result.json was written by protocol version {PROTOCOL_VERSION - 1}, and this side speaks "
            f"{PROTOCOL_VERSION}") in built["error"]["message"]


def test_a_result_file_of_this_version_without_a_result_is_an_error_too(tmp_path: Path) -> None:
    """A result.json that says this protocol's version but lacks a field every result has (written by
    hand, or by a checkout that forgot to raise the version) is an error record, not a traceback."""
    attempt = task(tmp_path)
    publish_result(attempt, TIMED)
    written = json.loads(attempt.result_path.read_text())
    del written["status"]
    attempt.result_path.write_text(json.dumps(written))
    built = record(tmp_path, ChildOutcome(result=read_attempt_result(attempt), returncode=0))
    assert built["status"] == "error" and built["error"]["type"] == "ProtocolMismatch"
    assert f"does not hold a result of protocol version {PROTOCOL_VERSION}" in built["error"]["message"]


def test_an_outcome_sent_by_a_ray_node_as_a_dict_comes_back_typed() -> None:
    """A node sends its outcome as dataclasses.asdict; the driver rebuilds the same typed value,
    leaving out a field a node of a newer checkout might add."""
    outcome = ChildOutcome(PublishedResult(replace(TIMED, verification={"code": "PASS"}), final=False), 0,
                           wall_s=2.5, launcher="forkserver")
    assert ChildOutcome.from_dict({**asdict(outcome), "field_of_a_newer_node": 1}) == outcome
    assert ChildOutcome.from_dict(asdict(ChildOutcome(None, -9, timed_out=True))) == ChildOutcome(None, -9, timed_out=True)


def test_final_result_wins_over_interim(tmp_path: Path) -> None:
    attempt = task(tmp_path)
    publish_result(attempt, TIMED, final=False)
    assert read_attempt_result(attempt).final is False
    publish_result(attempt, replace(TIMED, verification_code="PASS"))
    assert read_attempt_result(attempt).result.verification_code == "PASS"


def test_death_during_verification_keeps_the_timings(tmp_path: Path) -> None:
    attempt = task(tmp_path)
    publish_result(attempt, TIMED, final=False)
    outcome = ChildOutcome(result=read_attempt_result(attempt), returncode=-signal.SIGSEGV, log_tail="Fatal")
    built = record(tmp_path, outcome)
    assert built["status"] == "ok"
    assert built["metrics"]["per_iter_time"] == [0.01, 0.011]
    assert built["verification_code"] == "VERIFIER_DIDNT_RUN"
    assert "died during verification (crashed)" in built["verification"]["details"]["reason"]
    assert built["error"]["signal"] == "SIGSEGV" and built["error"]["phase"] == "verification"

    timed_out = record(tmp_path, ChildOutcome(result=outcome.result, returncode=-9, timed_out=True))
    assert timed_out["metrics"]["per_iter_time"] and "(timeout)" in timed_out["verification"]["details"]["reason"]
    interrupted = record(tmp_path, ChildOutcome(result=outcome.result, returncode=-9, interrupted=True))
    assert interrupted["status"] == "interrupted" and "per_iter_time" not in interrupted["metrics"]


def test_a_child_that_left_no_result_says_where_it_was(tmp_path: Path) -> None:
    attempt = task(tmp_path)
    write_phase(attempt, "timing pairs")
    announced = attempt.phase_path.stat().st_mtime
    os.utime(attempt.phase_path, (announced - 1630, announced - 1630))
    timed_out = record(tmp_path, ChildOutcome(result=None, returncode=-signal.SIGTERM, timed_out=True))
    assert timed_out["status"] == "timeout" and timed_out["error"]["last_phase"] == "timing pairs"
    assert 1630 <= timed_out["error"]["last_phase_s"] < 1630 + 60
    assert timed_out["error"]["message"].endswith("; it had been timing pairs for 1630 s")
    crashed = record(tmp_path, ChildOutcome(result=None, returncode=-signal.SIGSEGV))
    assert crashed["error"]["last_phase"] == "timing pairs" and "timing pairs" not in crashed["error"]["message"]
    attempt.clear_results()  # a child that died before announcing any phase
    assert "last_phase" not in record(tmp_path, ChildOutcome(result=None, returncode=-9, timed_out=True))["error"]


def test_sigkill_is_oom_only_with_evidence() -> None:
    killed = ChildOutcome(result=None, returncode=-signal.SIGKILL, oom_kills=0, oom_counter="/proc/vmstat")
    status, error = classify_death(killed, None)
    assert status == "crashed" and error["type"] == "Killed"
    assert error["message"].startswith("killed by SIGKILL") and "no out-of-memory kill counted" in error["message"]

    unknown = ChildOutcome(result=None, returncode=-signal.SIGKILL)
    assert classify_death(unknown, None)[0] == "crashed"

    counted = ChildOutcome(result=None, returncode=-signal.SIGKILL, oom_kills=1, oom_counter="memory.events")
    status, error = classify_death(counted, None)
    assert status == "oom" and "counted 1 out-of-memory kill(s) (memory.events)" in error["message"]

    own = ChildOutcome(result=None, returncode=1, log_tail="MemoryError")
    assert classify_death(own, None)[0] == "oom"


def test_fork_server_death_says_so() -> None:
    gone = ChildOutcome(result=None, returncode=None, launcher="forkserver",
                        launcher_note="the fork server was killed by SIGKILL while this experiment ran")
    status, error = classify_death(gone, None)
    assert status == "crashed" and error["type"] == "LauncherDied"
    assert "fork server was killed by SIGKILL" in error["message"]


def test_a_crash_stack_in_the_log_tail_keeps_its_innermost_frame(tmp_path) -> None:
    """faulthandler prints the innermost frame first: a plain tail would keep only the outermost
    ones (a forked child's stack is deeper), so the whole dump is kept."""
    from experiment_runner.core.logs import LAST_WORDS_MAX_LINES, LOG_TAIL_LINES, read_log_tail

    frames = [f'  File "/srv/runner/frame_{i}.py", line {i} in f{i}' for i in range(25)]
    log = tmp_path / "child.log"
    log.write_text("\n".join(["noise"] * 100 + ["Fatal Python error: Segmentation fault", "",
                                                  "Current thread 0x1 (most recent call first):",
                                                  '  File "/srv/models/faulty.py", line 7 in forward',
                                                  *frames, "", "Extension modules: torch._C"]) + "\n")
    tail = read_log_tail(log).splitlines()
    # the dump whole, after at most LAST_WORDS_MAX_LINES lines printed just before it
    printed = ["noise"] * LAST_WORDS_MAX_LINES
    assert tail[:LAST_WORDS_MAX_LINES + 1] == printed + ["Fatal Python error: Segmentation fault"]
    assert "faulty.py" in tail[LAST_WORDS_MAX_LINES + 3] and tail[-1].endswith("torch._C")
    dump = log.read_text().splitlines()[100:]
    # glibc's message before the dump is its cause: kept, and named in the record's message; the
    # child's header line is not a cause, nor is what a blank line separates from the dump
    for before, words in ((["experiment_runner worker: timm/repvgg_a2/x", "corrupted size vs. prev_size"],
                           "corrupted size vs. prev_size"),
                          (["experiment_runner worker: timm/repvgg_a2/x"], ""),
                          (["a warning", ""], "")):
        log.write_text("\n".join(["noise"] * 100 + before + dump) + "\n")
        tail = read_log_tail(log)
        assert tail.startswith(f"{words}\nFatal Python error" if words else "Fatal Python error"), tail
        outcome = ChildOutcome(result=None, returncode=-signal.SIGABRT, log_tail=tail)
        message = classify_death(outcome, None)[1]["message"]
        assert message == "the child died from signal SIGABRT" + (f" after printing: {words}" if words else "")
    log.write_text("\n".join(f"line {i}" for i in range(100)) + "\n")
    assert read_log_tail(log).splitlines() == [f"line {i}" for i in range(100 - LOG_TAIL_LINES, 100)]


def test_verification_code_is_decided_in_one_place() -> None:
    from experiment_runner.core.results import verification_code

    assert verification_code(True, "ok", {"code": "FAIL"}) == "FAIL"
    assert verification_code(True, "error", {"code": "PASS"}) == "PASS"  # failed after verifying
    assert verification_code(False, "error", None) == "VERIFIER_SKIPPED"
    assert verification_code(True, "skipped", None) == "VERIFIER_SKIPPED"
    assert verification_code(True, "crashed", None) == "VERIFIER_DIDNT_RUN"
    assert verification_code(True, "ok", None) == "VERIFIER_DIDNT_RUN"  # an interim result
    with pytest.raises(ValueError, match="MAYBE"):
        verification_code(True, "ok", {"code": "MAYBE"})


def test_a_record_takes_its_code_from_the_same_decision(tmp_path: Path) -> None:
    died = record(tmp_path, ChildOutcome(result=None, returncode=1))
    assert (died["status"], died["verification_code"]) == ("crashed", "VERIFIER_DIDNT_RUN")
    ctx = RecordContext(run_id="r", fingerprint="0123456789ab", options=RunOptions(verify=True), output_dir=tmp_path)
    skipped = build_record(ctx, experiment(), skip_reason="listed")
    assert skipped["verification_code"] == "VERIFIER_SKIPPED"
    passed = PublishedResult(replace(TIMED, verification={"code": "PASS"}))
    verified = record(tmp_path, ChildOutcome(result=passed, returncode=0))
    assert verified["verification_code"] == "PASS"
