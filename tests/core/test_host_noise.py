"""benchmarks/host_noise.py: the host-stillness check docs/timing.md and docs/benchmarks/host_noise.md cite."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "host_noise.py"


@pytest.mark.e2e
def test_reports_each_process_and_the_spread_between_them(tmp_path) -> None:
    """Each process's medians and the spread between them; with --rows-out, the same figures kept as
    one JSON line with the host and the tree they were taken on."""
    proc = subprocess.run([sys.executable, str(SCRIPT), "--processes=2", "--samples=3", "--sample-time=0.002",
                           "--cpu=0", f"--rows-out={tmp_path / 'rows.jsonl'}"],
                          check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    per_process = [json.loads(line) for line in lines[:2]]
    assert [p["process"] for p in per_process] == [0, 1]
    summary = json.loads("\n".join(lines[2:]))["summary"]
    assert (summary["cpu"], summary["processes"], summary["samples"]) == (0, 2, 3)
    for name in ("python_loop", "numpy_matmul"):
        medians = [p[name]["median_s"] for p in per_process]
        assert all(m > 0 for m in medians)
        assert summary[name]["process_spread"] == max(medians) / min(medians) >= 1.0
        low, high = summary[name]["within_process_relative_iqr"]
        assert 0 <= low <= high
    (row,) = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert row["workloads"] == {name: summary[name] for name in ("python_loop", "numpy_matmul")}
    assert set(row["host"]) == {"date", "cpu", "cpus", "load_average", "commit"} and row["host"]["commit"]


@pytest.mark.e2e
def test_fewer_than_two_processes_is_one_line_and_exit_2() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--processes=1"], check=False, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "at least 2" in proc.stderr.strip().splitlines()[-1]
