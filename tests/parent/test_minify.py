"""--minify and the `minify` command end to end, with PyTorch's fault injection.

The relu suite's `mlp` calls torch.relu, which dynamo's relu_*_TESTING_ONLY backends break (no
C++ compile: cheap on a CPU host); `linear` has no relu and passes. One run of both models on
both backends is shared by the module; the timeout test minifies the suite's `hang`, which
hangs with a descendant that left its process group.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import assert_no_process_left, cli_command, cli_env, invoke_cli, marked_processes, new_marker

from experiment_runner.core.matrix import Experiment, ExperimentConfig
from experiment_runner.core.minify import REPRO_FILE, SIDECAR, WORK_FOLDER, join_minified, read_minified
from experiment_runner.core.options import RunOptions
from experiment_runner.core.protocol import Task
from experiment_runner.core.record_schema import record_errors
from experiment_runner.errors import EXIT_OK, EXIT_USAGE
from experiment_runner.parent import minify

SUITES = {"EXPERIMENT_RUNNER_SUITES": "relu=relu_suite:ReluSuite"}
ACCURACY, COMPILE_ERROR = "relu_accuracy_error_TESTING_ONLY", "relu_compile_error_TESTING_ONLY"


def experiment_id(model: str, backend: str) -> str:
    return f"relu/{model}/cpu-None-{backend}-eval-fp32-bsdefault"


@pytest.fixture(scope="module")
def minified_run(tmp_path_factory: pytest.TempPathFactory, cli_cache: Path) -> Path:
    output = tmp_path_factory.mktemp("minify") / "output"
    run = invoke_cli(["--suite-name=relu", "--filter=^(linear|mlp)$", "--accelerator=cpu", "--xla=None",
                      "--test=eval", "--precision=fp32", f"--dynamo={ACCURACY}", f"--dynamo={COMPILE_ERROR}",
                      "--verify", "--repeat=1", "--warmup-iterations=1", "--iterations-per-run=1", "--minify"],
                     output, cli_cache, env=SUITES, timeout=900)
    assert run.returncode == 0, run.stderr
    return output


def records(output: Path) -> dict[str, dict]:
    lines = [json.loads(line) for line in (output / "results.jsonl").read_text().splitlines()]
    assert len(lines) == len({r["experiment_id"] for r in lines}), "one record per experiment"
    return {r["experiment_id"]: r for r in lines}


def block_of(output: Path, record: dict) -> dict:
    return read_minified(output / SIDECAR)[(record["run_id"], record["experiment_id"])]


@pytest.mark.e2e
@pytest.mark.parametrize("backend, symptom", [(ACCURACY, "AccuracyError"), (COMPILE_ERROR, "ReluCompileError")])
def test_each_failure_kind_gives_a_repro_that_reproduces(minified_run: Path, backend: str, symptom: str) -> None:
    record = records(minified_run)[experiment_id("mlp", backend)]
    block = block_of(minified_run, record)
    assert (block["status"], block["reproduces"], block["symptom"]) == ("reproduced", True, symptom)
    assert block["repro_after"] == "dynamo" and block["repro_level"] == (4 if backend == ACCURACY else 2)
    assert symptom in block["observed"]
    assert block["nodes_after"] < block["nodes_before"]
    repro = minified_run / block["repro"]
    assert repro.parent == minified_run / record["artifacts"]["dir"] / "minify"
    assert f"backend={backend!r}" in repro.read_text()
    # The record is the experiment's, as measured: minification changed nothing in it.
    assert (record["status"], record["verification_code"]) == (
        ("ok", "FAIL") if backend == ACCURACY else ("error", "VERIFIER_DIDNT_RUN"))
    assert "minified" not in record


@pytest.mark.e2e
def test_a_passing_experiment_is_never_minified(minified_run: Path) -> None:
    found = records(minified_run)
    blocks = read_minified(minified_run / SIDECAR)
    for backend in (ACCURACY, COMPILE_ERROR):
        record = found[experiment_id("linear", backend)]
        assert record["verification_code"] == "PASS"
        assert (record["run_id"], record["experiment_id"]) not in blocks
        assert not (minified_run / record["artifacts"]["dir"] / "minify").exists()
    assert len(blocks) == 2


@pytest.mark.e2e
def test_joined_records_follow_the_schema(minified_run: Path) -> None:
    joined = join_minified(records(minified_run).values(), minified_run / "results.jsonl")
    assert sum("minified" in r for r in joined) == 2
    for record in joined:
        assert record_errors(record) == []


def results_of(minified_run: Path, record: dict, output: Path, model_name: str) -> Path:
    """A results file in `output` holding `record` alone, whose experiment's folder holds its task
    with another model of the suite: what the `minify` command reloads."""
    folder = output / "experiment"
    folder.mkdir(parents=True)
    task = json.loads((minified_run / record["artifacts"]["dir"] / "task.json").read_text())
    task["experiment"]["model_name"] = model_name
    (folder / "task.json").write_text(json.dumps(task))
    results = output / "results.jsonl"
    results.write_text(json.dumps({**record, "artifacts": {"dir": "experiment", "log": "experiment/child.log"}})
                       + "\n")
    return results


@pytest.mark.e2e
def test_a_repro_that_fails_otherwise_is_kept_and_marked(minified_run: Path, cli_cache: Path,
                                                         tmp_path: Path) -> None:
    """The record says the experiment raised another exception than the one its graph raises
    again: the repro is kept, and marked as not reproducing, with what it raised instead."""
    record = records(minified_run)[experiment_id("mlp", COMPILE_ERROR)]
    record = {**record, "error": {**record["error"], "type": "RuntimeError", "message": "a failure elsewhere"}}
    output = tmp_path / "output"
    results = results_of(minified_run, record, output, model_name="mlp")
    run = invoke_cli(["minify", str(results)], output, cli_cache, env=SUITES, timeout=600)
    assert run.returncode == 0, run.stderr
    block = block_of(output, record)
    assert (block["status"], block["reproduces"], block["symptom"]) == ("not_reproduced", False, "RuntimeError")
    assert "ReluCompileError" in block["observed"] and "not RuntimeError" in block["message"]
    assert (output / block["repro"]).is_file()


@pytest.mark.e2e
def test_a_minifier_past_its_budget_is_killed_with_its_descendants(minified_run: Path, cli_cache: Path,
                                                                     tmp_path: Path) -> None:
    """The minifier reloads a model that starts a descendant in a session of its own (beyond the
    reach of a process-group kill) and hangs: at the budget, everything goes, and the sidecar
    says timeout; the results file is not touched."""
    record = records(minified_run)[experiment_id("mlp", COMPILE_ERROR)]
    output = tmp_path / "output"
    results = results_of(minified_run, record, output, model_name="hang")
    marker = new_marker("minify")
    proc = subprocess.Popen(cli_command(["minify", str(results), "--minify-timeout=40"], output),
                            env=cli_env(cli_cache, marker, SUITES), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 300
    while (proc.poll() is None and time.monotonic() < deadline
           and not any("SIG_IGN" in line for line in marked_processes(marker))):
        time.sleep(0.2)
    escaped = [line for line in marked_processes(marker) if "SIG_IGN" in line]
    _, err = proc.communicate(timeout=300)
    assert escaped, f"the hanging model's descendant never ran: {err[-2000:]}"
    assert proc.returncode == 0, err
    assert_no_process_left(marker)
    block = block_of(output, record)
    assert (block["status"], block["reproduces"], block["repro"]) == ("timeout", None, None)
    assert block["timeout_s"] == 40 and "killed with every process it started" in block["message"]
    assert results.read_text().count("\n") == 1
    assert "timeout" in err


@pytest.mark.slow
@pytest.mark.parametrize("inject, symptom, level", [("accuracy", "AccuracyError", 4),
                                                    ("compile_error", "CppCompileError", 2)])
def test_inductor_failures_minify_after_aot(tmp_path: Path, cli_cache: Path, inject: str, symptom: str,
                                            level: int) -> None:
    """Inductor's own fault injection (cpp.inject_relu_bug_TESTING_ONLY): minified after AOT, each
    step compiling C++ (minutes on a small host)."""
    output = tmp_path / "output"
    run = invoke_cli(["--suite-name=relu", "--filter=^mlp$", "--accelerator=cpu", "--xla=None", "--test=eval",
                      "--precision=fp32", "--dynamo=inductor", "--verify", "--repeat=1", "--warmup-iterations=1",
                      "--iterations-per-run=1", "--minify"],
                     output, cli_cache, env={**SUITES, "RELU_SUITE_INJECT": inject}, timeout=2400)
    assert run.returncode == 0, run.stderr
    record = records(output)[experiment_id("mlp", "inductor")]
    block = block_of(output, record)
    assert (block["status"], block["reproduces"], block["symptom"]) == ("reproduced", True, symptom)
    assert (block["repro_after"], block["repro_level"]) == ("aot", level)
    assert block["nodes_after"] < block["nodes_before"]


def test_the_command_minifies_nothing_where_nothing_is_red(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "results.jsonl"
    passed = {"run_id": "r", "experiment_id": "s/m/c", "status": "ok", "verification_code": "PASS",
              "experiment": {"dynamo": "inductor", "xla": None, "compile_options": "default"}}
    eager_error = {**passed, "experiment_id": "s/e/c", "status": "error", "error": {"type": "RuntimeError"},
                   "experiment": {**passed["experiment"], "dynamo": None}}
    results.write_text(json.dumps(passed) + "\n" + json.dumps(eager_error) + "\n")
    assert minify.main([str(results)]) == EXIT_OK
    assert "nothing to minify: none of the 2 experiment(s)" in capsys.readouterr().err
    assert not (tmp_path / SIDECAR).exists()
    assert minify.main([str(results), "--experiment-id=s/none/c"]) == EXIT_USAGE
    assert "no record of experiment 's/none/c'" in capsys.readouterr().err
    assert minify.main([str(results), "--minify-timeout=0"]) == EXIT_USAGE
    assert "--minify-timeout must be a positive finite number of seconds" in capsys.readouterr().err


def test_an_experiment_with_a_record_per_process_is_minified_once(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """--processes=N gives a FAIL experiment N records: its last one is minified, once."""
    red = {"run_id": "r", "experiment_id": "s/m/c", "status": "ok", "verification_code": "FAIL",
           "process": {"index": 0}, "artifacts": {"dir": "exp"},
           "experiment": {"dynamo": "inductor", "xla": None, "compile_options": "default"}}
    last = {**red, "process": {"index": 1}}
    passed = {**red, "experiment_id": "s/p/c", "verification_code": "PASS"}
    minified: list[dict] = []
    block = {"status": "reproduced", "nodes_before": 9, "nodes_after": 2, "minify_s": 1.0, "repro": None,
             "message": None}
    monkeypatch.setattr(minify, "minify_record", lambda record, *_: minified.append(record) or block)
    lines: list[str] = []
    assert minify.minify_records([red, last, passed], tmp_path / "results.jsonl", tmp_path, 5.0,
                                 lines.append) == [block]
    assert minified == [last]
    assert read_minified(tmp_path / SIDECAR) == {("r", "s/m/c"): block}
    assert lines[-1].strip() == "reproduced in 1 s, 2 of 9 nodes kept"


@pytest.mark.e2e
def test_a_minifier_that_dies_without_an_answer_is_recorded_as_failed(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The minifier's process ends without writing its answer (here: an interpreter that only
    exits 1): the block says failed and why, not timeout."""
    experiment = Experiment("relu", "mlp", ExperimentConfig("cpu", None, None, "inductor", "eval", "fp32"))
    Task(experiment, RunOptions(), str(tmp_path / "exp")).write()
    record = {"run_id": "r", "experiment_id": experiment.experiment_id, "status": "ok",
              "verification_code": "FAIL", "artifacts": {"dir": "exp"},
              "experiment": {"dynamo": "inductor", "xla": None, "compile_options": "default"}}
    monkeypatch.setattr(sys, "executable", shutil.which("false"))
    block = minify.minify_record(record, tmp_path, 60.0)
    assert block is not None
    assert (block["status"], block["reproduces"], block["repro"]) == ("failed", None, None)
    assert block["message"] == "the minifier's process exited 1 without an answer (minify.log says why)"
    assert block["log"] == "exp/minify/minify.log" and (tmp_path / block["log"]).is_file()


CHECKPOINTS = {
    "reproduces": ("class AccuracyError(Exception):\n    pass\n\n\nraise AccuracyError('the graph differs')\n",
                   True, "it reproduces AccuracyError in a fresh interpreter"),
    "runs clean": ("print('no failure here')\n", False,
                   "it does not reproduce: repro.py in a fresh interpreter exited 0, raising nothing"),
    "hangs": ("import threading\n\nthreading.Event().wait()\n", None,
              "not checked: its check ran past the rest of the budget"),
}


@pytest.mark.e2e
@pytest.mark.parametrize("case", CHECKPOINTS)
def test_the_last_checkpoint_of_a_killed_minifier_is_checked_in_the_rest_of_its_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    """The minifier's process writes a checkpoint repro.py, then hangs: at its share of the budget
    it is killed, and the checkpoint is run in a fresh interpreter by the real `--check` in the
    rest. The block keeps status timeout and says whether the checkpoint reproduces."""
    source, reproduces, said = CHECKPOINTS[case]
    experiment = Experiment("relu", "mlp", ExperimentConfig("cpu", None, None, "inductor", "eval", "fp32"))
    Task(experiment, RunOptions(), str(tmp_path / "exp")).write()
    record = {"run_id": "r", "experiment_id": experiment.experiment_id, "status": "ok",
              "verification_code": "FAIL", "artifacts": {"dir": "exp"},
              "experiment": {"dynamo": "inductor", "xla": None, "compile_options": "default"}}
    (tmp_path / "checkpoint.py").write_text(source)
    minifier = tmp_path / "minifier"
    minifier.write_text(f"#!/bin/sh\n[ \"$3\" = --check ] && exec {sys.executable} \"$@\"\n"
                        f"mkdir -p {WORK_FOLDER} && cp {tmp_path / 'checkpoint.py'} {WORK_FOLDER}/{REPRO_FILE}\n"
                        "exec sleep 3600\n")
    minifier.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(minifier))
    monkeypatch.setattr(minify, "CHECK_SHARE", 0.5)
    block = minify.minify_record(record, tmp_path, 8.0)
    assert block is not None
    assert (block["status"], block["reproduces"], block["repro"]) == ("timeout", reproduces, "exp/minify/repro.py")
    assert block["message"].startswith("ran past 4 s of its budget of 8 s and was killed")
    assert said in block["message"]
    assert (tmp_path / block["repro"]).read_text() == source


def hanging_results(output: Path) -> tuple[Path, dict]:
    """A results file holding one red experiment of the relu suite's `hang`, whose load starts a
    descendant in a session of its own that ignores SIGTERM, then never returns."""
    experiment = Experiment("relu", "hang", ExperimentConfig("cpu", None, None, COMPILE_ERROR, "eval", "fp32"))
    Task(experiment, RunOptions(), str(output / "exp")).write()
    record = {"run_id": "r", "experiment_id": experiment.experiment_id, "status": "error",
              "error": {"type": "ReluCompileError", "message": "relu"}, "artifacts": {"dir": "exp"},
              "experiment": {"dynamo": COMPILE_ERROR, "xla": None, "compile_options": None}}
    results = output / "results.jsonl"
    results.write_text(json.dumps(record) + "\n")
    return results, record


@pytest.mark.e2e
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=lambda s: s.name)
def test_a_stopped_minify_command_leaves_nothing_running(tmp_path: Path, cli_cache: Path,
                                                        sig: signal.Signals) -> None:
    """The command, and only the command, is signalled while its minifier hangs with a descendant
    beyond its process group: nothing it started outlives it, and Ctrl-C or SIGTERM is one line."""
    output = tmp_path / "output"
    results, _ = hanging_results(output)
    marker = new_marker("minify")
    proc = subprocess.Popen(cli_command(["minify", str(results)], output), env=cli_env(cli_cache, marker, SUITES),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while (proc.poll() is None and time.monotonic() < deadline
           and not any("SIG_IGN" in line for line in marked_processes(marker))):
        time.sleep(0.2)
    assert any("SIG_IGN" in line for line in marked_processes(marker)), proc.communicate(timeout=60)
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=120)
    assert_no_process_left(marker, within_s=30)
    if sig != signal.SIGKILL:
        assert proc.returncode == 128 + sig, err
        said = [line for line in err.splitlines() if not line.startswith("minifying")]
        assert said == [f"experiment_runner minify: stopped by {sig.name}: the minification under way was ended "
                        f"with every process it started; the answers before it are in {output / SIDECAR}"], err


def red_record(experiment_dir: str) -> dict:
    return {"run_id": "r", "experiment_id": "relu/mlp/c", "status": "ok", "verification_code": "FAIL",
            "artifacts": {"dir": experiment_dir},
            "experiment": {"dynamo": "inductor", "xla": None, "compile_options": "default"}}


@pytest.mark.parametrize("where", ["minify folder linked", "experiment folder linked", "another output folder"])
def test_minification_never_writes_outside_its_output_folder(tmp_path: Path, where: str) -> None:
    """A link at the experiment's minify folder or folder, or an artifacts.dir leading into another
    output folder: refused in one line, before anything is removed or a process started (this is
    a unit test: a started process fails it), and no answer is written."""
    output, other = tmp_path / "output", tmp_path / "other"
    (other / "exp" / "minify").mkdir(parents=True)
    (other / "exp" / "minify" / REPRO_FILE).write_text("kept\n")
    (output / "exp").mkdir(parents=True)
    experiment_dir = "exp"
    if where == "minify folder linked":
        (output / "exp" / "minify").symlink_to(other / "exp" / "minify")
    elif where == "experiment folder linked":
        (output / "linked").symlink_to(other / "exp")
        experiment_dir = "linked"
    else:
        experiment_dir = "../other/exp"
    lines: list[str] = []
    assert minify.minify_records([red_record(experiment_dir)], output / "results.jsonl", output, 5.0,
                                 lines.append) == []
    assert len(lines) == 1 and lines[0].startswith("experiment_runner minify: relu/mlp/c: ") and \
        lines[0].endswith("not minified"), lines
    assert (other / "exp" / "minify" / REPRO_FILE).read_text() == "kept\n"
    assert not (output / SIDECAR).exists()


@pytest.mark.e2e
def test_a_new_attempt_keeps_the_earlier_reproduced_repro(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The experiment's minify folder holds a repro that reproduced; a new attempt (here a minifier
    that exits 1 at once) works in a folder of its own, and the earlier repro is kept."""
    experiment = Experiment("relu", "mlp", ExperimentConfig("cpu", None, None, "inductor", "eval", "fp32"))
    Task(experiment, RunOptions(), str(tmp_path / "exp")).write()
    earlier = tmp_path / "exp" / "minify"
    earlier.mkdir()
    (earlier / REPRO_FILE).write_text("the earlier repro\n")
    (earlier / "minify_result.json").write_text(json.dumps({"status": "reproduced", "reproduces": True}))
    monkeypatch.setattr(sys, "executable", shutil.which("false"))
    block = minify.minify_record({**red_record("exp"), "experiment_id": experiment.experiment_id}, tmp_path, 60.0)
    assert block is not None and block["status"] == "failed"
    assert (earlier / REPRO_FILE).read_text() == "the earlier repro\n"
    attempt = (tmp_path / block["log"]).parent
    assert attempt.parent == tmp_path / "exp" and attempt.name.startswith("minify.") and attempt.is_dir()


@pytest.mark.e2e
def test_a_second_minification_of_an_experiment_is_refused_naming_the_holder(tmp_path: Path) -> None:
    """Another process holds the experiment's minification lock: refused in one line naming it,
    nothing started, no answer written."""
    (tmp_path / "exp").mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys; "
                               f"fd = os.open({str(tmp_path / 'exp' / 'minify.lock')!r}, os.O_RDWR | os.O_CREAT); "
                               "fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        lines: list[str] = []
        assert minify.minify_records([red_record("exp")], tmp_path / "results.jsonl", tmp_path, 5.0,
                                     lines.append) == []
        assert len(lines) == 1 and lines[0].startswith(
            f"experiment_runner minify: relu/mlp/c: another minification of it is under way (pid {holder.pid} "
            f"({sys.executable} -c import fcntl") and lines[0].endswith("); not started"), lines
    finally:
        holder.kill()
        holder.wait()
    assert not (tmp_path / SIDECAR).exists() and not (tmp_path / "exp" / "minify").exists()


MALFORMED = {
    "a list for experiment_id": {"experiment_id": ["relu/mlp/c"]},
    "a list for run_id": {"run_id": ["r"]},
    "no experiment_id": {"experiment_id": None},
    "no run_id": {"run_id": None},
    "an experiment that is no object": {"experiment": "relu/mlp/c"},
    "an error that is no object": {"status": "error", "error": "boom"},
    "a timestamp that is text": {"timestamp": "yesterday"},
}


@pytest.mark.e2e  # the command starts its reaper
@pytest.mark.parametrize("kind", MALFORMED)
def test_a_malformed_record_is_passed_over_in_one_line(tmp_path: Path, kind: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Each of these gave a traceback (select, final_records, plan, error_symptom). The record
    is passed over, said once with its line; the well-formed one beside it is still chosen (not
    minified: red_record's folder has no task, which is an answer of its own)."""
    record = {**red_record("exp"), "timestamp": 1.0, **MALFORMED[kind]}
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps({k: v for k, v in record.items() if v is not None}) + "\n"
                       + json.dumps({**red_record("exp"), "timestamp": 2.0, "experiment_id": "relu/mlp/d"}) + "\n")
    assert minify.main([str(results)]) == EXIT_OK
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"experiment_runner minify: {results}:1: passed over 1 record(s) it cannot read ("), err
    assert "minifying [1/1] relu/mlp/d" in err[1]
    [answer] = read_minified(tmp_path / SIDECAR).values()
    assert answer["status"] == "failed" and "cannot read the experiment's task" in answer["message"]


@pytest.mark.e2e  # the command starts its reaper
def test_a_disk_that_takes_no_write_gives_one_line_and_keeps_the_answer_said(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Read-only while the minification sets up: that experiment is not minified, in one line;
    full when its answer is appended: one line holding the answer, exit 3 (it was a traceback,
    and the finished answer was lost)."""
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps(red_record("exp")) + "\n")
    experiment = Experiment("relu", "mlp", ExperimentConfig("cpu", None, None, "inductor", "eval", "fp32"))
    Task(experiment, RunOptions(), str(tmp_path / "exp")).write()

    def read_only(task: Task) -> None:
        raise OSError(30, "Read-only file system", str(task.task_path))

    with monkeypatch.context() as patched:
        patched.setattr(minify.Task, "write", read_only)
        assert minify.main([str(results)]) == EXIT_USAGE
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"experiment_runner minify: relu/mlp/c: cannot write its minification "
        f"({(tmp_path / 'exp' / 'minify' / 'task.json').resolve()}: Read-only file system); not minified")
    (tmp_path / "exp" / "task.json").unlink()  # from here the answer comes at once: no task to minify

    def full(sidecar: Path, line: bytes) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(minify, "append_answer", full)
    assert minify.main([str(results)]) == 3
    said = capsys.readouterr().err.splitlines()[-1]
    assert said.startswith(f"experiment_runner minify: error: cannot append the answer for relu/mlp/c to "
                           f"{tmp_path / SIDECAR} (No space left on device); the answer, not kept there: "), said
    assert json.loads(said.split("not kept there: ", 1)[1])["minified"]["status"] == "failed"


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_the_answer_is_never_appended_to_what_is_no_regular_file(tmp_path: Path, kind: str) -> None:
    """A FIFO at the sidecar's path blocked the command (or fed its reader); a link led anywhere."""
    sidecar = tmp_path / SIDECAR
    if kind == "fifo":
        os.mkfifo(sidecar)
    else:
        (tmp_path / "elsewhere").write_text("")
        sidecar.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError, match="not a regular file"):
        minify.append_answer(sidecar, b"{}\n")
    assert kind == "fifo" or (tmp_path / "elsewhere").read_text() == ""


@pytest.mark.e2e
def test_minify_through_a_linked_results_file_finds_the_artifacts_beside_the_real_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`minify elsewhere/results.jsonl`, a link to run/results.jsonl: the experiment's folder is
    run/exp (it looked in elsewhere/exp, found no task, and answered "cannot read the
    experiment's task"); the answer goes beside the real file, where readers through either look.
    The minifier here is `false`: found, it exits 1 at once."""
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    experiment = Experiment("relu", "mlp", ExperimentConfig("cpu", None, None, "inductor", "eval", "fp32"))
    Task(experiment, RunOptions(), str(run / "exp")).write()
    (run / "results.jsonl").write_text(json.dumps(red_record("exp")) + "\n")
    elsewhere.mkdir()
    (elsewhere / "results.jsonl").symlink_to(run / "results.jsonl")
    monkeypatch.setattr(sys, "executable", shutil.which("false"))
    assert minify.main([str(elsewhere / "results.jsonl")]) == EXIT_OK
    assert not (elsewhere / SIDECAR).exists()
    [answer] = read_minified(run / SIDECAR).values()
    assert answer["status"] == "failed" and answer["message"].startswith("the minifier's process exited 1"), answer
    [joined] = join_minified([red_record("exp")], elsewhere / "results.jsonl")
    assert joined["minified"] == answer


@pytest.mark.e2e  # runs the script PyTorch generated in an interpreter of its own
def test_a_cache_path_with_a_newline_and_a_quote_survives_the_generated_launcher(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """PyTorch pastes the environment into the launcher and repro it writes, unescaped: our cache
    folder under an output folder named with a newline and a quote broke the launcher (a
    SyntaxError: no_repro). The script PyTorch generates, quoted, sets the very path."""
    import subprocess
    import sys

    from torch._dynamo.debug_utils import generate_env_vars_string

    from experiment_runner.child.minify import quote_environment

    cache = str(tmp_path / "night\n'1'" / "inductor_cache")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", cache)
    script = tmp_path / "minifier_launcher.py"
    script.write_text(generate_env_vars_string() + "\nprint(repr(os.environ['TORCHINDUCTOR_CACHE_DIR']))\n")
    with pytest.raises(SyntaxError):
        compile(script.read_text(), str(script), "exec")
    quote_environment(script, os.environ)
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == repr(cache)
