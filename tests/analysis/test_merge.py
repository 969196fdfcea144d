"""`experiment_runner merge`: shard files of one run become one file, one final record per experiment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiment_runner.cli import main as cli_main


def record(model: str, status: str = "ok", run_id: str = "shard0", timestamp: float = 1.0) -> dict:
    return {"run_id": run_id, "experiment_id": f"{model}-cpu-eval", "model": {"model_name": model},
            "status": status, "timestamp": timestamp, "timings": {"wall_s": 1.0}}


def write(path: Path, records: list[dict], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def merge(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = cli_main(["merge", *argv])
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_shards_merge_into_one_run_with_one_record_each(tmp_path: Path, capsys) -> None:
    a = write(tmp_path / "a.jsonl", [record("m1", "crashed"), record("m1", "ok", timestamp=2.0), record("m2")],
              tail='{"torn')
    b = write(tmp_path / "b.jsonl", [record("old", run_id="earlier"), record("m3", run_id="shard1")])
    code, out, err = merge(capsys, str(a), str(b), "-o", str(tmp_path / "all.jsonl"))
    assert code == 0, err
    merged = read(tmp_path / "all.jsonl")
    assert [(r["model"]["model_name"], r["status"]) for r in merged] == [("m1", "ok"), ("m2", "ok"), ("m3", "ok")]
    assert {r["run_id"] for r in merged} == {"shard0"}
    assert merged[2]["merged_from"] == {"path": str(b), "run_id": "shard1"}
    assert "merged 3 experiment(s) from 2 file(s)" in out and "1 record(s) of earlier runs" in out
    assert "skipped 1 corrupt or torn line(s)" in err


def test_conflicts_are_reported_and_a_final_record_wins(tmp_path: Path, capsys) -> None:
    a = write(tmp_path / "a.jsonl", [record("m1", "ok", timestamp=5.0), record("m2", "ok", timestamp=1.0)])
    b = write(tmp_path / "b.jsonl", [record("m1", "interrupted", "s1", timestamp=9.0),
                                     record("m2", "oom", "s1", timestamp=3.0)])
    code, out, err = merge(capsys, str(a), str(b), "-o", str(tmp_path / "all.jsonl"), "--run-id=nightly")
    assert code == 0
    merged = {r["model"]["model_name"]: r for r in read(tmp_path / "all.jsonl")}
    assert merged["m1"]["status"] == "ok"  # a final status beats interrupted, however late
    assert merged["m2"]["status"] == "oom"  # between final records the later one wins
    assert {r["run_id"] for r in merged.values()} == {"nightly"}
    assert err.count("conflict:") == 2 and "2 conflict(s)" in out


def test_between_attempts_of_one_run_the_later_finished_wins(tmp_path: Path, capsys) -> None:
    """Records of one run share its `timestamp`; `timings.finished_at` says which attempt came last."""
    late, early = record("m1", "error"), record("m1", "ok")
    late["timings"]["finished_at"], early["timings"]["finished_at"] = 200.0, 100.0
    a = write(tmp_path / "a.jsonl", [late])
    b = write(tmp_path / "b.jsonl", [early])
    for order in ((a, b), (b, a)):
        code, _, _ = merge(capsys, *map(str, order), "-o", str(tmp_path / "all.jsonl"))
        assert code == 0
        assert [r["status"] for r in read(tmp_path / "all.jsonl")] == ["error"]


def test_unreadable_input_is_exit_3_and_writes_nothing(tmp_path: Path, capsys) -> None:
    a = write(tmp_path / "a.jsonl", [record("m1")])
    out_path = tmp_path / "all.jsonl"
    code, _, err = merge(capsys, str(a), str(tmp_path / "missing.jsonl"), "-o", str(out_path))
    assert code == 3 and err.count("\n") == 1 and "missing.jsonl" in err
    assert err.startswith("experiment_runner merge: error: "), "the prefix every other command's errors have"
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("<html>\n")
    code, _, err = merge(capsys, str(a), str(garbage), "-o", str(out_path))
    assert code == 3 and "is not a results file" in err
    assert not out_path.exists()
    code, _, err = merge(capsys, str(a))
    assert code == 2 and "-o/--output" in err


def test_every_process_of_an_experiment_survives_the_merge(tmp_path: Path, capsys) -> None:
    """--processes N: N records of one experiment are N attempts, not retries of one."""
    shard = [{**record("m1", timestamp=float(i)), "process": {"index": i, "count": 3}} for i in range(3)]
    a = write(tmp_path / "a.jsonl", shard)
    b = write(tmp_path / "b.jsonl", [{**record("m2", run_id="shard1"), "process": {"index": 0, "count": 3}}])
    code, _, err = merge(capsys, str(a), str(b), "-o", str(tmp_path / "all.jsonl"))
    assert code == 0 and "conflict" not in err
    merged = read(tmp_path / "all.jsonl")
    assert [(r["model"]["model_name"], r["process"]["index"]) for r in merged] == [("m1", 0), ("m1", 1), ("m1", 2),
                                                                                  ("m2", 0)]


def test_the_output_is_written_through_a_symlink_and_never_replaces_a_device(tmp_path: Path, capsys) -> None:
    shard = write(tmp_path / "shard0.jsonl", [record("a")])
    target, link = tmp_path / "kept" / "all.jsonl", tmp_path / "all.jsonl"
    target.parent.mkdir()
    target.write_text("")
    link.symlink_to(target)
    code, _, err = merge(capsys, str(shard), "-o", str(link))
    assert code == 0, err
    assert link.is_symlink() and [json.loads(line)["model"] for line in target.read_text().splitlines()] == [
        {"model_name": "a"}]
    code, _, err = merge(capsys, str(shard), "-o", "/dev/null")
    assert code == 2 and err.strip().splitlines() == [
        "experiment_runner merge: error: -o /dev/null is a device, not a regular file; give a file path"]
    assert Path("/dev/null").is_char_device()
