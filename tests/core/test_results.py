"""The results store: whole-line appends, strict JSON, tolerant reads, resume sets."""

import json
import math
import multiprocessing
import resource
import signal

import pytest

from experiment_runner.core.results import BadLine, ResultsFileError, final_records, iter_records
from experiment_runner.parent.store import append_record, resume_state


def record(run_id: str, exp: str, status: str = "ok", **extra) -> dict:
    return {"run_id": run_id, "experiment_id": exp, "status": status, **extra}


def test_append_writes_one_strict_json_line_per_record(tmp_path):
    path = tmp_path / "out" / "results.jsonl"
    append_record(path, record("r1", "a", metrics={"x": [1.0, math.nan, math.inf]}))
    append_record(path, record("r1", "b"))
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    assert json.loads(lines[0])["metrics"]["x"] == [1.0, None, None]  # NaN is not JSON: jq would choke


def test_a_torn_last_line_is_skipped_and_the_next_record_starts_on_its_own_line(tmp_path):
    path = tmp_path / "results.jsonl"
    append_record(path, record("r1", "a"))
    with open(path, "ab") as f:
        f.write(b'{"run_id": "r1", "experiment_id": "b", "sta')  # a writer killed mid-line
    append_record(path, record("r1", "c"))
    bad: list[BadLine] = []
    assert [r["experiment_id"] for r in iter_records(path, bad)] == ["a", "c"]
    assert [b.lineno for b in bad] == [2]


def test_corrupt_lines_warn_with_their_line_number(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text('{"run_id": "r", "experiment_id": "a", "status": "ok"}\nnot json\n[1, 2]\n')
    with pytest.warns(UserWarning, match=r"results.jsonl:2: skipped"):
        records = list(iter_records(path))
    assert len(records) == 1


def test_unreadable_file_is_a_results_file_error(tmp_path):
    with pytest.raises(ResultsFileError, match="cannot read results file"):
        list(iter_records(tmp_path / "missing.jsonl"))
    with pytest.raises(ResultsFileError, match="cannot open results file"):
        append_record(tmp_path, record("r", "a"))  # a directory, not a file


def test_resume_sets_come_from_the_latest_run_only(tmp_path):
    path = tmp_path / "results.jsonl"
    for r in [record("old", "a"), record("new", "a"), record("new", "b", "crashed"),
              record("new", "c", "interrupted"), record("new", "d", "skipped")]:
        append_record(path, r)
    state = resume_state(path, retry_failed=False)
    assert (state.run_id, state.done, state.failed) == ("new", {("a", 0), ("b", 0), ("d", 0)}, {"b"})
    retried = resume_state(path, retry_failed=True)
    assert (retried.done, retried.failed) == ({("a", 0), ("d", 0)}, set())


def test_a_timestamp_picks_the_run_it_stamped(tmp_path):
    """nightly.sh passes one --timestamp per night: a rerun continues that night only."""
    path = tmp_path / "results.jsonl"
    for r in [record("night1", "a", timestamp=1.0), record("night2", "a", timestamp=2.0),
              record("night1", "b", timestamp=1.0), {"model": {}, "metrics": {}, "timestamp": 3.0}]:
        append_record(path, r)
    state = resume_state(path, False, timestamp=2.0)
    assert (state.run_id, state.done, state.timestamp) == ("night2", {("a", 0)}, 2.0)
    state = resume_state(path, False)
    assert (state.run_id, state.done, state.timestamp) == ("night1", {("a", 0), ("b", 0)}, 1.0)
    assert resume_state(path, False, timestamp=3.0).run_id is None, "reference records are not resumed"


def test_final_records_keep_the_last_attempt(tmp_path):
    records = [record("r", "a", "crashed"), record("r", "a", "ok"), record("r", "b", "ok")]
    assert {k: v["status"] for k, v in final_records(records).items()} == {("r", "a", 0): "ok", ("r", "b", 0): "ok"}
    processes = [{**record("r", "a"), "process": {"index": i, "count": 2}} for i in (0, 1)]
    assert list(final_records(processes)) == [("r", "a", 0), ("r", "a", 1)]  # processes are not retries


def _writer(path: str, tag: str, count: int) -> None:
    from pathlib import Path

    for i in range(count):
        append_record(Path(path), record(tag, f"{tag}-{i}", payload="x" * 5000))


def test_concurrent_appends_never_interleave(tmp_path):
    path = tmp_path / "results.jsonl"
    procs = [multiprocessing.get_context("fork").Process(target=_writer, args=(str(path), t, 200))
             for t in ("a", "b", "c")]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    bad: list[BadLine] = []
    ids = [r["experiment_id"] for r in iter_records(path, bad)]
    assert not bad
    assert sorted(ids) == sorted(f"{t}-{i}" for t in "abc" for i in range(200))
    assert path.read_bytes().endswith(b"\n")


def test_a_failed_write_leaves_no_partial_line(tmp_path):
    path = tmp_path / "results.jsonl"
    append_record(path, record("r", "a"))
    before = path.read_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of dying
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 10, hard))
    try:
        with pytest.raises(ResultsFileError, match="File too large|short write"):
            append_record(path, record("r", "b", payload="x" * 1000))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert path.read_bytes() == before


def test_readers_are_bounded_and_refuse_what_is_not_a_file(tmp_path, monkeypatch):
    """Deep nesting and overlong lines are bad lines, not a crash or a memory blow-up; a FIFO
    (which would block) and a device like /dev/zero (which never ends) are refused at once."""
    import os
    from pathlib import Path

    from experiment_runner.core import results

    deep, long = tmp_path / "deep.jsonl", tmp_path / "long.jsonl"
    deep.write_bytes(b"[" * 200_000 + b"]" * 200_000 + b'\n{"ok": 1}\n')
    long.write_bytes(b'{"x": "' + b"a" * 2000 + b'"}\n{"ok": 2}\n')
    bad: list = []
    assert list(iter_records(deep, bad_lines=bad)) == [{"ok": 1}]
    monkeypatch.setattr(results, "MAX_LINE_BYTES", 1000)
    assert list(iter_records(long, bad_lines=bad)) == [{"ok": 2}]
    assert [(b.lineno, b.reason) for b in bad] == [(1, "JSON nested too deeply"), (1, "a line longer than 1000 bytes")]
    os.mkfifo(tmp_path / "fifo")
    for not_a_file in (tmp_path / "fifo", Path("/dev/zero")):
        with pytest.raises(ResultsFileError, match="not a regular file"):
            list(iter_records(not_a_file))


def test_the_records_say_whose_run_it_is_whatever_the_registry_says(tmp_path):
    """A command continues the run whose records carry its fingerprint: with the registry gone
    (deleted, or the results file copied alone), or saying otherwise, another command's run is
    never continued, and its own command still continues it."""
    from experiment_runner.parent.store import RunEntry

    path = tmp_path / "results.jsonl"
    for r in [record("eval-run", "a", fingerprint="eval"), record("eval-run", "b", fingerprint="eval")]:
        append_record(path, r)
    train = resume_state(path, False, fingerprint="train", registered={})
    assert (train.run_id, train.other_runs) == (None, 1), "no registry: the records still say it is eval's"
    assert resume_state(path, False, fingerprint="eval", registered={}).run_id == "eval-run"
    moved = {"eval-run": RunEntry("eval-run", "train", 0.0, str(path), [], 0.0)}  # another run's entry, moved here
    assert resume_state(path, False, fingerprint="train", registered=moved).run_id is None
    assert resume_state(path, False, fingerprint="eval", registered=moved).done == {("a", 0), ("b", 0)}
    waiting = {"fresh": RunEntry("fresh", "train", 0.0, str(path), [], 1.0)}  # killed before its first record
    assert resume_state(path, False, fingerprint="train", registered=waiting).run_id == "fresh"


def test_only_runs_with_records_count_as_other_commands_runs(tmp_path):
    """A fresh run whose results file holds no record says nothing of other runs: a run of another
    command registered but killed before its first record left nothing to leave alone."""
    from experiment_runner.parent.store import RunEntry

    path = tmp_path / "results.jsonl"
    waiting = {"killed": RunEntry("killed", "eval", 0.0, str(path), [], 1.0)}
    fresh = resume_state(path, False, fingerprint="train", registered=waiting)
    assert (fresh.run_id, fresh.other_runs) == (None, 0)
    append_record(path, record("eval-run", "a", fingerprint="eval"))
    beside = resume_state(path, False, fingerprint="train", registered=waiting)
    assert (beside.run_id, beside.other_runs) == (None, 1), "the run with a record counts, the registered one not"


def test_a_damaged_registry_entry_is_named_not_trusted(tmp_path):
    import dataclasses

    from experiment_runner.parent.store import RunEntry, register_run, registered_runs

    results = tmp_path / "results.jsonl"
    register_run(tmp_path, RunEntry("good", "f", 0.0, str(results), ["experiment_runner"], 0.0))
    register_run(tmp_path, RunEntry("torn", "f", 0.0, str(results), ["experiment_runner"], 0.0))
    torn = tmp_path / "runs" / "torn" / "run.json"
    torn.write_text(torn.read_text()[:20])
    (tmp_path / "runs" / "odd").mkdir()
    (tmp_path / "runs" / "odd" / "run.json").write_text(json.dumps({"run_id": "odd"}))
    found, damaged = registered_runs(tmp_path, results)
    assert list(found) == ["good"] and dataclasses.asdict(found["good"])["fingerprint"] == "f"
    assert damaged == [(tmp_path / "runs" / "odd" / "run.json", "TypeError"), (torn, "JSONDecodeError")]


@pytest.mark.parametrize("fingerprint", ["missing", None, "", 7, ["eval"]])
def test_a_run_whose_records_carry_no_valid_fingerprint_is_continued_by_no_command(tmp_path, fingerprint):
    """Issue 53: with the field removed from run A's records (or null, a number, a list) and
    runs/ deleted, command B appended to A's run. Nothing says whose such a run is, so no
    command continues it; its registry entry, where one is left, still speaks."""
    from experiment_runner.parent.store import RunEntry

    path = tmp_path / "results.jsonl"
    extra = {} if fingerprint == "missing" else {"fingerprint": fingerprint}
    for r in [record("a-run", "a", **extra), record("a-run", "b", **extra)]:
        append_record(path, r)
    for command in ("train", "eval"):
        state = resume_state(path, False, fingerprint=command, registered={})
        assert (state.run_id, state.done, state.other_runs) == (None, set(), 1), command
    registered = {"a-run": RunEntry("a-run", "eval", 0.0, str(path), [], 0.0)}
    assert resume_state(path, False, fingerprint="eval", registered=registered).run_id == "a-run"
    assert resume_state(path, False, fingerprint="train", registered=registered).run_id is None
