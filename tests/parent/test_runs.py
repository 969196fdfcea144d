"""Which run a command belongs to: a run exists from its start, one runner per results file
whatever path leads to it, and a rerun continues its own command's run, not another's."""

from __future__ import annotations

import json
import signal
import subprocess
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

COMMON = ("--suite-name=faulty", "--accelerator=cpu", "--dynamo=None", "--test=eval", "--repeat=1",
          "--warmup-iterations=0")

pytestmark = pytest.mark.e2e


def hang_running(marker: str) -> bool:
    return any("signal.SIG_IGN" in line for line in marked_processes(marker))


@pytest.mark.parametrize("launcher", ["forkserver", "subprocess"])
def test_a_run_killed_before_its_first_record_is_continued(launcher: str, tmp_path: Path, run_cli,
                                                           cli_cache: Path) -> None:
    out = tmp_path / "out"
    args = [*COMMON, "--filter=^hang$", "--filter=^quick_00$", f"--launcher={launcher}"]
    proc, marker = start_cli([*args, "--subprocess-timeout=600"], out, cli_cache)
    wait_for(lambda: hang_running(marker), what="the first experiment")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert_no_process_left(marker)
    assert read_records(out / "results.jsonl") == []
    (entry,) = [json.loads(path.read_text()) for path in out.glob("runs/*/run.json")]

    # Long enough for quick_00 on a busy host (a fresh fork server imports torch first), short
    # enough that hang's timeout ends the test soon.
    resumed = run_cli(*args, "--subprocess-timeout=15", output_dir=out)
    assert resumed.returncode == 0, resumed.stderr
    records = resumed.records()
    assert {r["run_id"] for r in records} == {entry["run_id"]}
    assert sorted((r["model"]["model_name"], r["status"]) for r in records) == [("hang", "timeout"),
                                                                                ("quick_00", "ok")]


def test_a_results_file_reached_through_a_symlink_has_one_runner(tmp_path: Path, cli_cache: Path) -> None:
    first_out, second_out = tmp_path / "a", tmp_path / "b"
    second_out.mkdir()
    (second_out / "results.jsonl").symlink_to(first_out / "results.jsonl")
    args = [*COMMON, "--filter=^hang$", "--subprocess-timeout=600"]
    proc, marker = start_cli(args, first_out, cli_cache)
    wait_for(lambda: hang_running(marker), what="the first runner's experiment")
    second = subprocess.run(cli_command(args, second_out), env=cli_env(cli_cache, new_marker("second")), capture_output=True,
                            text=True, timeout=300)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=300)
    assert second.returncode == 2, second.stderr
    (line,) = second.stderr.strip().splitlines()
    assert f"{second_out / 'results.jsonl'} is being written by pid {proc.pid}" in line
    assert_no_process_left(marker)


def test_another_command_starts_its_own_run_and_a_rerun_continues_its_own(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = run_cli(*COMMON, "--filter=^quick_00$", output_dir=out)
    second = run_cli(*COMMON, "--filter=^quick_01$", output_dir=out)
    assert first.returncode == second.returncode == 0, second.stderr
    assert "starting a new run beside 1 earlier run(s) of other commands in" in second.stderr
    run_ids = [r["run_id"] for r in second.records()]
    assert len(set(run_ids)) == 2
    again = run_cli(*COMMON, "--filter=^quick_00$", output_dir=out)
    assert again.returncode == 0 and f"in run {run_ids[0]} of" in again.stdout, again.stdout
    cosmetic = run_cli(*COMMON, "--filter=^quick_00$", "--repeat=3", "--heartbeat=5", output_dir=out)
    assert "nothing to run" in cosmetic.stdout, "how experiments are measured does not make another run"
    # and the line says which flag measures otherwise (--heartbeat is how the parent reports: not said)
    assert "; this command measures otherwise (--repeat 3 (the run's: 1)), which does not make another run " \
           "(--no-resume runs everything again as a new run)" in cosmetic.stdout, cosmetic.stdout
    assert len(read_records(out / "results.jsonl")) == 2


@pytest.mark.parametrize("damage", ["deleted", "truncated", "copied alone"])
def test_a_lost_or_damaged_registry_never_hands_a_run_to_another_command(run_cli, tmp_path: Path,
                                                                         damage: str) -> None:
    out = tmp_path / "out"
    evaluated = run_cli(*COMMON, "--filter=^quick_00$", output_dir=out)
    assert evaluated.returncode == 0, evaluated.stderr
    (eval_run,) = {r["run_id"] for r in evaluated.records()}
    (entry,) = out.glob("runs/*/run.json")
    if damage == "deleted":
        entry.unlink()
    elif damage == "truncated":
        entry.write_text(entry.read_text()[:10])
    else:
        copy = tmp_path / "copy"
        copy.mkdir()
        (copy / "results.jsonl").write_bytes((out / "results.jsonl").read_bytes())
        out = copy
    train = [arg if arg != "--test=eval" else "--test=train" for arg in COMMON]
    trained = run_cli(*train, "--filter=^quick_00$", output_dir=out)
    assert trained.returncode == 0, trained.stderr
    runs = [r["run_id"] for r in trained.records()]
    assert runs[0] == eval_run and runs[1] != eval_run, "train started its own run"
    if damage == "truncated":
        assert f"warning: ignored the damaged run entry {entry} (JSONDecodeError)" in trained.stderr
    again = run_cli(*COMMON, "--filter=^quick_00$", output_dir=out)
    assert again.returncode == 0 and f"in run {eval_run} of" in again.stdout, again.stdout
    assert "nothing to run" in again.stdout and len(read_records(out / "results.jsonl")) == 2


def test_records_without_a_fingerprint_and_no_registry_are_continued_by_no_command(run_cli, tmp_path: Path) -> None:
    """Issue 53: A's records stripped of their fingerprint and runs/ deleted: command B
    appended to A's run. Now B starts its own run and A's records stay as they are."""
    import shutil

    out = tmp_path / "out"
    first = run_cli(*COMMON, "--filter=^quick_00$", output_dir=out)
    assert first.returncode == 0, first.stderr
    results = out / "results.jsonl"
    stripped = [{k: v for k, v in record.items() if k != "fingerprint"} for record in read_records(results)]
    results.write_text("".join(json.dumps(record) + "\n" for record in stripped))
    shutil.rmtree(out / "runs")
    second = run_cli(*COMMON, "--filter=^quick_01$", output_dir=out)
    assert second.returncode == 0, second.stderr
    records = read_records(results)
    assert records[:len(stripped)] == stripped
    (a_run,) = {r["run_id"] for r in stripped}
    assert [r["run_id"] != a_run for r in records[len(stripped):]] == [True]
