"""The records a study page's head is written from: one JSON line per run of a study's script,
kept under docs/benchmarks/data/STUDY/, each with the host and the tree it ran on.

A study script adds `--rows-out FILE` (append this run's row) and `--standing` (print the
page's head from the kept rows, run nothing) with add_arguments, given its standing(), writes its figures with
append, and builds its head with read and table. tests/docs/test_study_heads.py checks every
page's head against its script's standing().
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

from experiment_runner.core.cpus import cpu_identity

ROOT = Path(__file__).resolve().parents[1]
KEPT = ROOT / "docs" / "benchmarks" / "data"


def add_arguments(parser: argparse.ArgumentParser, study: str, standing: Callable[[], list[str]]) -> None:
    """--rows-out and --standing, the same on every study script. --standing prints `standing()` and
    exits as it is parsed, like --version, so a script's other arguments are not needed for it."""
    parser.add_argument("--rows-out", type=Path, metavar="FILE",
                        help=f"append this run's figures to FILE as a JSON line (keep it under "
                             f"docs/benchmarks/data/{study}/ for the page's head)")
    add_standing(parser, standing, f"print the page's head from the rows kept under docs/benchmarks/data/{study}/ "
                                   "and run nothing")


def add_standing(parser: argparse.ArgumentParser, standing: Callable[[], list[str]], help: str) -> None:
    """--standing alone, for a study whose head reads more than its kept rows."""
    parser.add_argument("--standing", action=_Standing, standing=standing, help=help)


class _Standing(argparse.Action):
    def __init__(self, option_strings: list[str], dest: str, standing: Callable[[], list[str]], help: str) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)
        self.standing = standing

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print("\n".join(self.standing()))
        parser.exit()


def host() -> dict[str, Any]:
    """Where and when a row was taken: the UTC date, the processor, its CPUs, the load average
    before the run and the commit of this tree (with `+` when it has uncommitted changes), or where
    the tree is a copy without git (a lent device's), the commit $KEPT_ROWS_COMMIT names."""
    def git(*args: str) -> str:
        proc = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False)
        return proc.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or None
    if commit and git("status", "--porcelain", "--untracked-files=no"):
        commit += "+"
    commit = commit or os.environ.get("KEPT_ROWS_COMMIT")
    return {"date": time.strftime("%Y-%m-%d", time.gmtime()), "cpu": cpu_identity()["model_name"],
            "cpus": len(os.sched_getaffinity(0)), "load_average": round(os.getloadavg()[0], 2), "commit": commit}


def append(path: Path | None, row: dict[str, Any]) -> None:
    """Add `row` to the kept rows in `path` (nothing when None); `row` carries host() already.
    A float that is not finite (a diverged loss) is kept as the string "nan", "inf" or "-inf":
    JSON has no such number, and jq and DuckDB refuse Python's NaN."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as out:
            out.write(json.dumps(_finite(row), allow_nan=False) + "\n")


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def read(study: str) -> list[dict[str, Any]]:
    """Every row kept for `study`, oldest first (by date, then file and line)."""
    rows = [json.loads(line) for path in sorted((KEPT / study).glob("*.jsonl"))
            for line in path.read_text().splitlines() if line.strip()]
    return sorted(rows, key=lambda row: row["host"]["date"])


def where(row: dict[str, Any]) -> str:
    """A row's host in a few words, for a head's table."""
    found = row["host"]
    return f"{found['date']}, {found['cpu']}, {found['cpus']} CPUs, load {found['load_average']:.1f}, {found['commit']}"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]
