"""Interrupted runs and concurrent writers: no experiment lost, none duplicated, every line whole.

- the runner killed with SIGKILL mid-run, a torn last line appended, then `--resume`;
- Ctrl-C (SIGINT): the running child is killed and recorded as `interrupted`, exit 130;
- `--resume --retry-failed` runs failures again and nothing else;
- two runners appending to one results file at the same time.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path

import pytest
from conftest import assert_no_process_left, marked_processes, read_records, start_cli, wait_for

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


def test_two_runners_append_to_one_file(tmp_path: Path, cli_cache: Path) -> None:
    out = tmp_path / "out"
    args = [*COMMON, "--filter=^quick_", "--no-resume"]  # two runs of their own, side by side
    runners = [start_cli(args, out, cli_cache) for _ in range(2)]
    for proc, _ in runners:
        _, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, stderr
    records = read_records(out / "results.jsonl")  # every line parses: none torn, none interleaved
    assert len(records) == 40
    by_run = Counter(r["run_id"] for r in records)
    assert sorted(by_run.values()) == [20, 20]
    for run_id in by_run:
        assert len({r["experiment_id"] for r in records if r["run_id"] == run_id}) == 20
    for _, marker in runners:
        assert_no_process_left(marker)
