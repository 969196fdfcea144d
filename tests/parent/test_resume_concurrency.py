"""Interrupted runs and concurrent writers: no experiment lost, none duplicated, every line whole.

- the runner killed with SIGKILL mid-run, a torn last line appended, then `--resume`;
- Ctrl-C (SIGINT): the running child is killed and recorded as `interrupted`, exit 130;
- `--resume --retry-failed` runs failures again and nothing else;
- two runners appending to one results file at the same time.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from conftest import (
    assert_no_process_left,
    cli_command,
    cli_env,
    marked_processes,
    new_marker,
    read_records,
    start_cli,
    wait_for,
)

pytestmark = pytest.mark.e2e

COMMON = ("--suite-name=faulty", "--accelerator=cpu", "--dynamo=None", "--test=eval", "--repeat=1",
          "--warmup-iterations=0")
TORN = b'{"schema_version": 1, "run_id": "torn-by-a-crash", "experiment_id": "faulty/na'


def line_count(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


@pytest.mark.parametrize("launcher", ["forkserver", "subprocess"])
def test_sigkill_then_resume_loses_and_duplicates_nothing(launcher: str, tmp_path: Path, run_cli,
                                                          cli_cache: Path) -> None:
    args = [*COMMON, "--filter=^nap_0[0-5]$", f"--launcher={launcher}"]
    out = tmp_path / "out"
    results = out / "results.jsonl"
    proc, marker = start_cli(args, out, cli_cache)
    wait_for(lambda: line_count(results) >= 2, what="two records")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert_no_process_left(marker)  # the experiment running at the kill went with the runner
    with open(results, "ab") as handle:
        handle.write(TORN)
    before = results.read_bytes()

    resumed = run_cli(*args, "--resume", output_dir=out)
    assert resumed.returncode == 0, resumed.stderr
    assert results.read_bytes().startswith(before)  # earlier bytes untouched
    lines = results.read_bytes().splitlines()
    assert lines.count(TORN) == 1
    records = [json.loads(line) for line in lines if line != TORN]
    assert len({r["run_id"] for r in records}) == 1
    counts = Counter(r["model"]["model_name"] for r in records)
    assert counts == Counter({f"nap_0{i}": 1 for i in range(6)})
    assert all(r["status"] == "ok" for r in records)
    assert_no_process_left(resumed.marker)


@pytest.mark.parametrize("launcher", ["forkserver", "subprocess"])
def test_ctrl_c_records_the_current_experiment_as_interrupted(launcher: str, tmp_path: Path,
                                                              cli_cache: Path) -> None:
    out = tmp_path / "out"
    proc, marker = start_cli([*COMMON, "--filter=^hang$", "--filter=^quick_00$", f"--launcher={launcher}",
                              "--subprocess-timeout=600"], out, cli_cache)
    # The hang model starts a SIGTERM-proof grandchild once it runs: the experiment is under way.
    wait_for(lambda: any("signal.SIG_IGN" in line for line in marked_processes(marker)),
             what="the hang experiment to run")
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "Interrupted" in stdout  # the summary, with the hint to resume
    records = read_records(out / "results.jsonl")
    assert [(r["model"]["model_name"], r["status"]) for r in records] == [("hang", "interrupted")]
    assert_no_process_left(marker)


def test_resume_retry_failed_reruns_only_failures(run_cli, tmp_path: Path) -> None:
    args = (*COMMON, "--filter=^raise_run$", "--filter=^quick_00$")
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr
    assert sorted(r["status"] for r in first.records()) == ["error", "ok"]

    again = run_cli(*args)
    assert again.returncode == 0 and "nothing to run: all 2 experiment(s)" in again.stdout
    retried = run_cli(*args, "--resume", "--retry-failed")
    assert retried.returncode == 0, retried.stderr
    records = retried.records()
    assert len({r["run_id"] for r in records}) == 1
    assert Counter(r["model"]["model_name"] for r in records) == Counter({"raise_run": 2, "quick_00": 1})


def test_two_runners_on_one_file_one_runs_and_one_waits_for_it(tmp_path: Path, cli_cache: Path) -> None:
    """Two overlapping cron jobs: the second waits (--wait-for-lock), then resumes the first's
    run and finds nothing left to run; without waiting it exits 2 at once."""
    out = tmp_path / "out"
    args = [*COMMON, "--filter=^hang$", "--filter=^quick_00$", "--subprocess-timeout=15"]
    first, first_marker = start_cli(args, out, cli_cache)
    wait_for(lambda: any("signal.SIG_IGN" in line for line in marked_processes(first_marker)),
             what="the first runner's hang experiment")
    refused = subprocess.run(cli_command(args, out), env=cli_env(cli_cache, new_marker("refused")), capture_output=True,
                             text=True, timeout=300)
    assert refused.returncode == 2 and "is being written by pid" in refused.stderr, refused.stderr
    waiting, waiting_marker = start_cli([*args, "--wait-for-lock=600"], out, cli_cache)
    said = {}
    for name, proc in (("first", first), ("waiting", waiting)):
        said[name] = proc.communicate(timeout=600)
        assert proc.returncode == 0, said[name][1]
    assert ("nothing to run: all 2 experiment(s) already have a record" in said["waiting"][0]
            and "1 of them failed (--retry-failed runs those again)" in said["waiting"][0]), said["waiting"]
    records = read_records(out / "results.jsonl")
    assert sorted(r["status"] for r in records) == ["ok", "timeout"] and len({r["run_id"] for r in records}) == 1
    for marker in (first_marker, waiting_marker):
        assert_no_process_left(marker)
