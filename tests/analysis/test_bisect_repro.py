"""`bisect --repro`: a script, not an experiment, run once per environment in a fresh process.

The "builds" are shell scripts around this interpreter; from one version on they set
REPRO_BUG, the bug the repro scripts here show (a named exception, or the minifier's
AccuracyError) only when it is set. No torch: a step is an interpreter's start, so each test
bisects five builds in seconds.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import psutil
import pytest

from experiment_runner.analysis.bisect import REPRO_HEAD_BYTES, REPRO_TAIL_BYTES, minified_symptom
from experiment_runner.cli import main as cli_main
from experiment_runner.core.minify import SIDECAR
from experiment_runner.core.results import RecordWarning

NAMED = '''
import os
class MinifiedBugError(Exception):
    pass
if os.environ.get("REPRO_BROKEN"):
    import a_module_this_build_lacks
if os.environ.get("REPRO_BUG"):
    raise MinifiedBugError("the compiled graph gives another answer")
'''
# What a minifier's accuracy repro prints when it reproduces (torch._dynamo.debug_utils.AccuracyError).
ACCURACY = '''
import os
class AccuracyError(Exception):
    pass
if os.environ.get("REPRO_BUG"):
    raise AccuracyError("Bad accuracy detected")
'''
ALWAYS = "raise RuntimeError('broken in every build')\n"
# Without the bug, hangs with a child in its process group; both pids go to `pids` in its working folder.
HANGING = '''
import os, subprocess, sys, time
if os.environ.get("REPRO_BUG"):
    sys.exit(0)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
with open("pids", "w") as out:
    out.write(f"{os.getpid()} {child.pid}\\n")
time.sleep(3600)
'''

# Exits at once, judged by REPRO_BUG, leaving a descendant in a session of its own that holds its
# stdout and stderr; the descendant's pid goes to `pids` in its working folder.
HOLDS_PIPES = '''
import os, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], start_new_session=True)
with open("pids", "w") as out:
    out.write(f"{child.pid}\\n")
if os.environ.get("REPRO_BUG"):
    raise RuntimeError("the bug")
'''
# Prints 24 MiB, then the symptom's traceback.
LOUD = '''
import os, sys
for _ in range(24):
    sys.stdout.write("x" * 2**20)
if os.environ.get("REPRO_BUG"):
    raise RuntimeError("the bug")
'''


def builds(root: Path, count: int, bug_from: int, broken: int | None = None) -> list[str]:
    """--env arguments for `count` builds, oldest first: v<bug_from> on have the bug; v<broken>
    fails otherwise (a module the repro imports is missing)."""
    root.mkdir(parents=True, exist_ok=True)
    args = []
    for version in range(count):
        exports = "".join(f"export {name}=1\n" for name, on in (("REPRO_BUG", version >= bug_from),
                                                                  ("REPRO_BROKEN", version == broken)) if on)
        python = root / f"v{version}"
        python.write_text(f'#!/bin/sh\n{exports}exec {sys.executable} "$@"\n')
        python.chmod(0o755)
        args += ["--env", f"v{version}={python}"]
    return args


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def bisect(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = cli_main(["bisect", *args, "--format", "json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


def minified_repro(root: Path, text: str, symptom: str) -> Path:
    """A repro where --minify leaves one: in the experiment's folder, named by the sidecar beside
    the results file (the block's path relative to it)."""
    repro = write(root / "exp-1" / "minify" / "repro.py", text)
    block = {"status": "reproduced", "symptom": symptom, "repro": "exp-1/minify/repro.py"}
    (root / SIDECAR).write_text(json.dumps({"run_id": "r", "experiment_id": "s/m/c", "minified": block}) + "\n")
    return repro


@pytest.mark.e2e
@pytest.mark.parametrize("source", ["--symptom", "minified.jsonl", "none"])
def test_the_first_build_where_the_repro_reproduces_is_named(source: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Bug from v3 of five: v0 good and v4 bad, then v2 good and v3 bad; each step's time said."""
    text, symptom = (ACCURACY, "AccuracyError") if source == "minified.jsonl" else (NAMED, "MinifiedBugError")
    repro = (minified_repro(tmp_path / "run", text, symptom) if source == "minified.jsonl"
             else write(tmp_path / "repro.py", text))
    extra = ["--symptom", symptom] if source == "--symptom" else []
    code, result = bisect(capsys, *builds(tmp_path / "builds", 5, bug_from=3), "--repro", str(repro),
                          "--output", str(tmp_path / "bisect"), *extra)
    assert code == 0, result
    assert (result["last_good"], result["first_bad"]) == ("v2", "v3"), result
    assert result["symptom"] == (None if source == "none" else symptom)
    steps = [(s["environment"], s["verdict"], s["exit_code"]) for s in result["steps"]]
    assert steps == [("v0", "good", 0), ("v4", "bad", 1), ("v2", "good", 0), ("v3", "bad", 1)], steps
    assert all(s["seconds"] > 0 for s in result["steps"])
    assert symptom in (tmp_path / "bisect" / "v3" / "repro.log").read_text()


@pytest.mark.e2e
def test_the_text_output_says_the_symptom_steps_and_seconds(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    repro = minified_repro(tmp_path / "run", ACCURACY, "AccuracyError")
    code = cli_main(["bisect", *builds(tmp_path / "builds", 3, bug_from=1), "--repro", str(repro),
                     "--output", str(tmp_path / "bisect")])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0, lines
    assert lines[0] == (f"bisect --repro: a step is bad when {repro} exits non-zero naming AccuracyError (from the "
                        f"minifier's check of this repro ({tmp_path / 'run' / SIDECAR}))")
    assert lines[1].startswith(f"step 1: v0 ({tmp_path / 'builds' / 'v0'}): good; exit 0 in ")
    assert lines[2].startswith("step 2: v2 (") and lines[2].endswith(" s (raised AccuracyError)")
    assert "bisect: first bad environment: v1; last good: v0" in lines
    assert f"  to see the bad end again: {tmp_path / 'builds' / 'v1'} {repro.resolve()}" in lines


@pytest.mark.e2e
def test_without_a_symptom_any_non_zero_exit_is_bad_and_said(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Relative paths too: each step runs in its own folder, and finds its interpreter and script."""
    write(tmp_path / "script.py", NAMED)
    builds(tmp_path / "builds", 2, bug_from=1)
    monkeypatch.chdir(tmp_path)
    repro = Path("script.py")
    code = cli_main(["bisect", "--env", "v0=builds/v0", "--env", "v1=builds/v1", "--repro", str(repro),
                     "--output", "bisect"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"a step is bad on any non-zero exit of {repro} (no symptom" in out
    assert "bad; exit 1 in " in out and "(no symptom to look for: any non-zero exit counts as bad)" in out


@pytest.mark.e2e
def test_another_failure_in_between_is_skipped_and_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """v2 lacks a module the repro imports: not the symptom, so neither good nor bad."""
    repro = write(tmp_path / "repro.py", NAMED)
    code, result = bisect(capsys, *builds(tmp_path / "builds", 5, bug_from=3, broken=2), "--repro", str(repro),
                          "--symptom", "MinifiedBugError", "--output", str(tmp_path / "bisect"))
    assert code == 1, result
    assert (result["last_good"], result["first_bad"], result["undetermined"]) == ("v1", "v3", ["v2"]), result
    (v2,) = [s for s in result["steps"] if s["environment"] == "v2"]
    assert v2["verdict"] == "skipped"
    assert v2["reason"] == ("exit status 1, raising ModuleNotFoundError, not MinifiedBugError: another failure")


@pytest.mark.e2e
@pytest.mark.parametrize("text, bug_from, message", [
    (ALWAYS, 99, "the ends do not differ: the repro reproduces in the oldest environment too"),
    (NAMED, 99, "the ends do not differ: the repro runs clean in the newest environment too"),
])
def test_ends_that_do_not_differ_are_said(text: str, bug_from: int, message: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    repro = write(tmp_path / "repro.py", text)
    code, result = bisect(capsys, *builds(tmp_path / "builds", 5, bug_from=bug_from), "--repro", str(repro),
                          "--output", str(tmp_path / "bisect"))
    assert code == 1 and result["first_bad"] is None and result["message"] == message, result
    assert [s["environment"] for s in result["steps"]] == ["v0", "v4"], "only the ends ran"


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.e2e
def test_a_hanging_repro_times_out_and_leaves_no_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repro = write(tmp_path / "repro.py", HANGING)
    code, result = bisect(capsys, *builds(tmp_path / "builds", 3, bug_from=1), "--repro", str(repro),
                          "--output", str(tmp_path / "bisect"), "--step-timeout=10")
    assert code == 2, result
    assert result["message"] == ("the oldest environment cannot run it: timed out after 10 s (--step-timeout); "
                                 "its processes were ended"), result
    assert result["steps"][0]["exit_code"] is None
    pids = [int(pid) for pid in (tmp_path / "bisect" / "v0" / "pids").read_text().split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 30
    while (left := [pid for pid in pids if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes left behind: {left}"


@pytest.mark.parametrize("args, message", [
    (["--", "--suite-name=dummy"], "--repro bisects a script, not an experiment: run flags after `--` do not apply"),
    (["--question=status"], "--repro bisects a script, not an experiment: --question does not apply"),
    (["--processes=3"], "--processes does not apply"),
    (["--min-change=0.1"], "--min-change does not apply"),
    (["--alpha=0.05"], "--alpha does not apply"),
])
def test_experiment_flags_with_repro_are_one_line_and_exit_2(args: list[str], message: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    repro = write(tmp_path / "repro.py", NAMED)
    code = cli_main(["bisect", "--env", "a=python", "--env", "b=python", "--output", str(tmp_path / "b"),
                     "--repro", str(repro), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0], err
    assert not (tmp_path / "b").exists(), "no step ran"


@pytest.mark.parametrize("args, message", [
    (["--repro", "missing.py"], "--repro missing.py: no such file"),
    (["--symptom", "AccuracyError", "--", "--suite-name=dummy"], "--symptom applies to --repro only"),
    (["--repro", "{tmp}/fifo"], "--repro {tmp}/fifo is a FIFO, not a script: give the repro.py to run"),
    (["--repro", "{tmp}"], "--repro {tmp} is a directory, not a script: give the repro.py to run"),
    (["--repro", "{tmp}/repro.py", "--symptom", ""], "--symptom '' is not an exception type's name"),
    (["--repro", "{tmp}/repro.py", "--symptom", "torch.AccuracyError"],
     "--symptom 'torch.AccuracyError' is not an exception type's name"),
])
def test_a_missing_repro_or_a_symptom_without_one_is_refused(args: list[str], message: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A FIFO would block the step, a directory is no script, and an empty or dotted symptom is
    named by no output: each is one line and exit 2, before any step runs."""
    os.mkfifo(tmp_path / "fifo")
    write(tmp_path / "repro.py", NAMED)
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    code = cli_main(["bisect", "--env", "a=python", "--env", "b=python", "--output", str(tmp_path / "b"), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message.replace("{tmp}", str(tmp_path)) in err[0], err
    assert not (tmp_path / "b").exists(), "no step ran"


@pytest.mark.e2e
def test_a_repro_is_judged_by_its_exit_not_by_a_descendant_holding_its_pipes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each step's repro exits at once, leaving a descendant in a session of its own that holds its
    output: the step is judged by the exit, well inside --step-timeout, and the descendant ends."""
    repro = write(tmp_path / "repro.py", HOLDS_PIPES)
    code, result = bisect(capsys, *builds(tmp_path / "builds", 3, bug_from=1), "--repro", str(repro),
                          "--output", str(tmp_path / "bisect"), "--step-timeout=30")
    assert code == 0, result
    steps = [(s["environment"], s["verdict"], s["exit_code"]) for s in result["steps"]]
    assert steps == [("v0", "good", 0), ("v2", "bad", 1), ("v1", "bad", 1)], result
    assert all(s["seconds"] < 30 for s in result["steps"]), result
    pids = [int((tmp_path / "bisect" / f"v{v}" / "pids").read_text()) for v in range(3)]
    deadline = time.monotonic() + 30
    while (left := [pid for pid in pids if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes left behind: {left}"


@pytest.mark.e2e
def test_a_repro_s_output_is_kept_head_and_tail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """24 MiB printed before the traceback: repro.log keeps its start and its end, the symptom
    among it, and says how much it left out."""
    repro = write(tmp_path / "repro.py", LOUD)
    code, result = bisect(capsys, *builds(tmp_path / "builds", 2, bug_from=1), "--repro", str(repro),
                          "--symptom", "RuntimeError", "--output", str(tmp_path / "bisect"))
    assert code == 0, result
    log = (tmp_path / "bisect" / "v1" / "repro.log").read_text()
    assert len(log) < REPRO_HEAD_BYTES + REPRO_TAIL_BYTES + 100
    assert log.startswith("x" * REPRO_HEAD_BYTES) and "bytes of output left out ...]" in log
    assert "RuntimeError: the bug" in log[-1000:]


def test_a_repro_is_ours_only_where_a_sidecar_names_its_path(tmp_path: Path) -> None:
    repro = minified_repro(tmp_path / "run", ACCURACY, "AccuracyError")
    assert minified_symptom(repro) == ("AccuracyError", tmp_path / "run" / SIDECAR)
    other = write(tmp_path / "run" / "exp-2" / "minify" / "repro.py", ACCURACY)
    assert minified_symptom(other) is None


@pytest.mark.parametrize("bad", [{"repro": 5, "symptom": "X"}, {"repro": "exp-1/minify/re\u0000po.py", "symptom": "X"}])
def test_a_sidecar_line_no_reader_can_use_is_passed_over_with_a_warning(bad: dict, tmp_path: Path) -> None:
    """Walking up from a repro, a sidecar line whose repro is no path is said and skipped; the
    line that names this repro still gives its symptom."""
    repro = minified_repro(tmp_path / "run", ACCURACY, "AccuracyError")
    with open(tmp_path / "run" / SIDECAR, "a") as sidecar:
        sidecar.write(json.dumps({"run_id": "r", "experiment_id": "s/n/c", "minified": bad}) + "\n")
    with pytest.warns(RecordWarning, match=re.escape(f"{tmp_path / 'run' / SIDECAR}:2: skipped 1 line(s)")):
        assert minified_symptom(repro) == ("AccuracyError", tmp_path / "run" / SIDECAR)
