"""core/minify.py: which records are minified and how, the minifier's output read, the sidecar."""

from __future__ import annotations

import json
import os
import re
import threading
import warnings
from pathlib import Path

import jsonschema
import pytest

from experiment_runner.core.minify import (
    LOG_FILE,
    MINIFIER_LOG,
    REPRO_FILE,
    SIDECAR,
    STATUSES,
    WORK_FOLDER,
    MinifyJob,
    error_symptom,
    exception_names,
    join_minified,
    kept_nodes,
    minified_block,
    nodes_before,
    plan,
    read_minified,
    sidecar_line,
)
from experiment_runner.core.record_schema import record_schema
from experiment_runner.core.results import RecordWarning

WRAPPED = {"type": "BackendCompilerFailed",
           "message": "backend='relu_compile_error_TESTING_ONLY' raised:\nReluCompileError: \n\n"
                      "Set TORCHDYNAMO_VERBOSE=1"}


def record(dynamo: str | None = "inductor", status: str = "ok", code: str = "FAIL", error: dict | None = None,
           **experiment: object) -> dict:
    return {"run_id": "r1", "experiment_id": "s/m/c", "status": status, "verification_code": code, "error": error,
            "experiment": {"dynamo": dynamo, "xla": None, "compile_options": "default", **experiment}}


@pytest.mark.parametrize("given, expected", [
    (record(), MinifyJob("accuracy", "aot", 4, "AccuracyError")),
    (record("aot_eager"), MinifyJob("accuracy", "dynamo", 4, "AccuracyError")),
    (record(status="error", code="VERIFIER_DIDNT_RUN", error=WRAPPED),
     MinifyJob("error", "aot", 2, "ReluCompileError")),
    (record("eager", status="error", code="VERIFIER_SKIPPED", error={"type": "RuntimeError", "message": "boom"}),
     MinifyJob("error", "dynamo", 2, "RuntimeError")),
])
def test_red_compiled_records_are_planned_by_kind_and_backend(given: dict, expected: MinifyJob) -> None:
    assert plan(given) == expected


@pytest.mark.parametrize("given", [
    record(code="PASS"),
    record(None),  # eager
    record(xla="PJRT", dynamo="openxla"),
    record(compile_options="aot-inductor"),
    record(status="timeout", code="VERIFIER_DIDNT_RUN", error={"type": "Timeout", "message": "killed"}),
    record(status="skipped", code="VERIFIER_SKIPPED", error={"type": "ModelSkipped", "message": "listed"}),
    record(code="VERIFIER_SKIPPED"),
])
def test_passing_eager_and_unminifiable_records_are_not_planned(given: dict) -> None:
    assert plan(given) is None


def test_the_symptom_is_the_innermost_named_exception() -> None:
    assert error_symptom(WRAPPED) == "ReluCompileError"
    assert error_symptom({"type": "InductorError", "message": "no inner name"}) == "InductorError"
    assert error_symptom({"type": "BackendCompilerFailed", "message": "backend='inductor' raised:\n"
                          "InductorError: CppCompileError: C++ compile error\n\nCommand:\n"}) == "CppCompileError"
    assert exception_names("Traceback\ntorch._dynamo.debug_utils.AccuracyError: Dynamo failed\n"
                           "Set TORCHDYNAMO_VERBOSE=1\n") == ["AccuracyError"]


def test_graph_sizes_are_read_from_both_minifiers(tmp_path: Path) -> None:
    after_aot = ("Started off with 16 nodes\nStrategy: Truncate suffix (G: 2) (16 nodes, 7 inputs)\n"
                 "SUCCESS: Went from 16 to 5 nodes\nStrategy: Delta Debugging (G: 1) (3 nodes, 1 inputs)\n"
                 "Made 14 queries\n")
    assert (nodes_before(after_aot), kept_nodes(after_aot, tmp_path / "none")) == (16, 3)
    (tmp_path / "minified_13_nodes.py").touch()
    (tmp_path / "minified_4_nodes.py").touch()
    assert kept_nodes("Started off with 13 nodes\n", tmp_path) == 4
    assert (nodes_before(""), kept_nodes("", tmp_path / "none")) == (None, None)


def test_the_sidecar_joins_the_newest_block_to_its_record(tmp_path: Path) -> None:
    red, other = record(), {**record(), "experiment_id": "s/other/c"}
    with open(tmp_path / SIDECAR, "wb") as sidecar:
        sidecar.write(sidecar_line(red, {"status": "timeout"}))
        sidecar.write(b'{"torn": ')
        sidecar.write(b"\n")
        sidecar.write(sidecar_line(red, {"status": "reproduced"}))
    with pytest.warns(RecordWarning, match=":2: skipped 1 line"):
        assert read_minified(tmp_path / SIDECAR) == {("r1", "s/m/c"): {"status": "reproduced"}}
    with pytest.warns(RecordWarning, match=":2: skipped 1 line"):
        joined = join_minified([red, other], tmp_path / "results.jsonl")
    assert joined == [{**red, "minified": {"status": "reproduced"}}, other]


def test_a_killed_minification_says_timeout_and_keeps_its_last_checkpoint(tmp_path: Path) -> None:
    folder = tmp_path / "exp" / "minify"
    (folder / WORK_FOLDER / "checkpoints").mkdir(parents=True)
    (folder / MINIFIER_LOG).write_text("Started off with 40 nodes\nSUCCESS: Went from 40 to 22 nodes\n")
    (folder / REPRO_FILE).write_text("# checkpoint\n")
    job = MinifyJob("accuracy", "aot", 4, "AccuracyError")
    block = minified_block(job, None, folder, 61.23456, 60.0, lambda p: str(p.relative_to(tmp_path)))
    assert block == {"status": "timeout", "kind": "accuracy", "repro_after": "aot", "repro_level": 4,
                     "symptom": "AccuracyError", "reproduces": None, "observed": [], "nodes_before": 40,
                     "nodes_after": 22, "minify_s": 61.235, "timeout_s": 60.0, "repro": "exp/minify/repro.py",
                     "log": f"exp/minify/{LOG_FILE}", "message": block["message"]}
    assert "last checkpoint, not checked" in block["message"]
    jsonschema.validate(json.loads(json.dumps(block)), record_schema()["properties"]["minified"])


def test_the_schema_lists_every_outcome() -> None:
    assert tuple(record_schema()["properties"]["minified"]["properties"]["status"]["enum"]) == STATUSES


@pytest.mark.parametrize("checked, reproduces, said", [
    ({"reproduces": True, "observed": ["AccuracyError"]}, True,
     "last checkpoint, and it reproduces AccuracyError in a fresh interpreter"),
    ({"reproduces": False, "observed": [], "message": "repro.py in a fresh interpreter exited 0, raising nothing, "
                                                      "not AccuracyError"}, False,
     "last checkpoint, and it does not reproduce: repro.py in a fresh interpreter exited 0"),
    ({"message": "its check ran past the rest of the budget (6 s) and was killed"}, None,
     "last checkpoint, not checked: its check ran past the rest of the budget"),
])
def test_a_killed_minification_says_what_checking_its_last_checkpoint_showed(
        tmp_path: Path, checked: dict, reproduces: bool | None, said: str) -> None:
    folder = tmp_path / "minify"
    folder.mkdir()
    (folder / REPRO_FILE).write_text("# checkpoint\n")
    job = MinifyJob("accuracy", "aot", 4, "AccuracyError")
    block = minified_block(job, None, folder, 60.0, 60.0, lambda p: p.name, 54.0, checked)
    assert (block["status"], block["reproduces"], block["observed"]) == (
        "timeout", reproduces, checked.get("observed", []))
    assert block["message"].startswith("ran past 54 s of its budget of 60 s and was killed")
    assert said in block["message"]
    jsonschema.validate(json.loads(json.dumps(block)), record_schema()["properties"]["minified"])


GOOD = {"run_id": "r1", "experiment_id": "s/m/c", "minified": {"status": "reproduced", "repro": "e/minify/repro.py"}}
BAD_LINES = {
    "deep": (b"[" * 200_000 + b"]" * 200_000, "JSON nested too deeply"),
    "invalid UTF-8": (b'{"run_id": "r1", "experiment_id": "s/m/\xff"}', "UnicodeDecodeError"),
    "list-valued experiment_id": (json.dumps({**GOOD, "experiment_id": ["s/m/c"]}).encode(),
                                  "run_id and experiment_id must be strings"),
    "repro 5": (json.dumps({**GOOD, "minified": {"repro": 5}}).encode(), "minified.repro is int '5', not a string"),
    "embedded NUL": (json.dumps({**GOOD, "minified": {"repro": "e/re\u0000pro.py"}}).encode(),
                     "minified.repro holds a NUL byte"),
    "no block": (json.dumps({**GOOD, "minified": [1]}).encode(), "minified must be an object"),
}


@pytest.mark.parametrize("case", BAD_LINES)
def test_a_bad_sidecar_line_is_skipped_with_a_warning_naming_file_and_line(tmp_path: Path, case: str) -> None:
    """Line 2 is no answer of ours: it is passed over, said with its file and line, and line 3's
    answer (another experiment's) is still joined."""
    line, reason = BAD_LINES[case]
    other = {**GOOD, "experiment_id": "s/other/c"}
    (tmp_path / SIDECAR).write_bytes(json.dumps(GOOD).encode() + b"\n" + line + b"\n" + json.dumps(other).encode()
                                     + b"\n")
    with pytest.warns(RecordWarning, match=re.escape(f"{tmp_path / SIDECAR}:2: skipped 1 line(s)")) as said:
        joined = join_minified([record(), {**record(), "experiment_id": "s/other/c"}], tmp_path / "results.jsonl")
    assert reason in str(said[0].message)
    assert [r.get("minified") for r in joined] == [GOOD["minified"], other["minified"]]


def test_a_record_with_ids_of_the_wrong_type_is_joined_to_nothing(tmp_path: Path) -> None:
    (tmp_path / SIDECAR).write_text(json.dumps(GOOD) + "\n")
    odd = {**record(), "experiment_id": ["s/m/c"]}
    assert join_minified([odd], tmp_path / "results.jsonl") == [odd]


def read_in_a_thread(path: Path) -> tuple[threading.Thread, list]:
    """read_minified(path) in a thread, so a reader that blocks fails the test instead of hanging it."""
    found: list = []
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        thread = threading.Thread(target=lambda: found.append((read_minified(path), list(said))), daemon=True)
        thread.start()
        thread.join(timeout=10)
    return thread, found


def test_a_fifo_sidecar_is_refused_with_a_warning_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / SIDECAR)
    thread, found = read_in_a_thread(tmp_path / SIDECAR)
    if thread.is_alive():
        with open(tmp_path / SIDECAR, "wb"):  # let the blocked reader go before failing
            pass
    assert not thread.is_alive(), "read_minified blocked on a FIFO"
    blocks, said = found[0]
    assert blocks == {}
    assert [str(w.message) for w in said] == [f"cannot read results file {tmp_path / SIDECAR}: not a regular file "
                                              "(a FIFO, a socket or a device); its minification answers are left out"]


def test_a_sidecar_linked_to_an_endless_device_is_refused_with_a_warning(tmp_path: Path) -> None:
    (tmp_path / SIDECAR).symlink_to("/dev/zero")
    with pytest.warns(RecordWarning, match="not a regular file"):
        assert read_minified(tmp_path / SIDECAR) == {}


def test_a_missing_sidecar_holds_no_answer_and_says_nothing(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_minified(tmp_path / SIDECAR) == {}
