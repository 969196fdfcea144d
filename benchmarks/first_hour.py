"""How long the README's two commands take: the main job, and the tests as CI runs them.

`main` runs the README's main command (the last command of its setup line: four experiments of
the built-in llama) into a fresh folder with this environment, and keeps its wall time, each
experiment's, how many were flagged `noisy_host` and the load around it. `tests` clones this
tree's HEAD into a fresh folder and runs `CI=true bash .ci/run` there (every install, the
README's test command, the XLA stage), and keeps its wall time, pytest's own and its tiers'.
Either is a row for docs/benchmarks/first_hour.md's head (--rows-out); the page keeps older,
hand-taken figures below it.

    python benchmarks/first_hour.py main --rows-out docs/benchmarks/data/first_hour/DATE.jsonl
    python benchmarks/first_hour.py tests --rows-out docs/benchmarks/data/first_hour/DATE.jsonl
    python benchmarks/first_hour.py --standing      # the head of docs/benchmarks/first_hour.md
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import kept_rows

STUDY = "first_hour"
ROOT = kept_rows.ROOT
# .ci/run prints these: pytest's summary and the tier times tests/conftest.py adds to it.
SUMMARY = re.compile(r"=+ (?P<counts>.*?) in (?P<seconds>[\d.]+)s")
TIERS = re.compile(r"^time per tier: (?P<tiers>.*)$", re.M)


def main_command(readme: Path = ROOT / "README.md") -> list[str]:
    """The README's main command: the last `&&` part of the first bash block of its "Fresh
    machine" section (the parts before it set up the environment this script runs in)."""
    section = readme.read_text().split("## Fresh machine", 1)[1]
    block = re.search(r"```bash\n(.*?)\n```", section, re.S)
    if block is None:
        raise SystemExit("first_hour: no bash block in the README's Fresh machine section")
    return shlex.split(block.group(1).split("&&")[-1])


def run_main(out: Path) -> dict[str, Any]:
    """The main command into `out`, timed; its records' statuses, walls and noisy_host flags."""
    command = main_command()
    start = time.perf_counter()
    proc = subprocess.run([*command, f"--output-dirname={out}", "--no-progress-bar"], capture_output=True, text=True,
                          check=False)
    took = time.perf_counter() - start
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()] if (
        out / "results.jsonl").is_file() else []
    return {"command": "main", "argv": command, "exit": proc.returncode, "took_s": took,
            "experiments": {r["experiment_id"]: {"status": r["status"], "wall_s": r["timings"].get("wall_s")}
                            for r in records},
            "noisy_host": sum(bool((r.get("measurements") or {}).get("noisy_host")) for r in records),
            "load_after": round(os.getloadavg()[0], 2)}


def run_tests(scratch: Path) -> dict[str, Any]:
    """`CI=true bash .ci/run` in a fresh clone of HEAD, timed; pytest's counts, its own time and
    its tiers' (the first summary is the README's test command, the second the XLA stage's)."""
    clone = scratch / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    start = time.perf_counter()
    proc = subprocess.run(["bash", ".ci/run"], cwd=clone, env={**os.environ, "CI": "true"}, capture_output=True,
                          text=True, check=False)
    took = time.perf_counter() - start
    output = proc.stdout + proc.stderr
    summaries = [(m["counts"], float(m["seconds"])) for m in SUMMARY.finditer(output) if "passed" in m["counts"]
                 or "failed" in m["counts"]]
    tiers = TIERS.search(output)
    return {"command": "tests", "exit": proc.returncode, "took_s": took,
            "pytest": [{"counts": counts, "seconds": seconds} for counts, seconds in summaries],
            "tiers": tiers["tiers"] if tiers else None, "load_after": round(os.getloadavg()[0], 2)}


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:.0f} s"


def standing(rows: list[dict[str, Any]] | None = None) -> list[str]:
    """The page's present tense: the newest kept row of each command, what it ran and how long it
    took, on which host and load."""
    newest = {row["command"]: row for row in (kept_rows.read(STUDY) if rows is None else rows)}
    body = []
    if "main" in newest:
        row = newest["main"]
        statuses = [e["status"] for e in row["experiments"].values()]
        slowest = max(row["experiments"].items(), key=lambda item: item[1]["wall_s"] or 0.0)
        body.append([f"main: `{' '.join(row['argv'])}`", kept_rows.where(row), f"{row['load_after']:.1f}",
                     minutes(row["took_s"]),
                     f"exit {row['exit']}; {statuses.count('ok')} of {len(statuses)} experiments ok, "
                     f"{row['noisy_host']} flagged noisy_host; the slowest, {slowest[0]}, {slowest[1]['wall_s']:.0f} s"])
    if "tests" in newest:
        row = newest["tests"]
        runs = "; ".join(f"{run['counts']} in {minutes(run['seconds'])}" for run in row["pytest"])
        body.append(["tests: `CI=true bash .ci/run` in a fresh clone", kept_rows.where(row),
                     f"{row['load_after']:.1f}", minutes(row["took_s"]),
                     f"exit {row['exit']}; pytest: {runs} (the README's test command, then the XLA stage); "
                     f"tiers: {row['tiers']}"])
    return kept_rows.table(["command", "host (date, processor, CPUs, load before, commit)", "load after",
                            "took", "what it did"], body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs="?", choices=("main", "tests"), help="which of the README's commands to time")
    kept_rows.add_arguments(parser, STUDY, standing)
    args = parser.parse_args()
    if args.command is None:
        parser.error("say which command to time (main or tests), or --standing")
    where = kept_rows.host()
    with tempfile.TemporaryDirectory(prefix="first-hour-") as scratch:
        row = run_main(Path(scratch) / "output") if args.command == "main" else run_tests(Path(scratch))
    print(json.dumps(row, indent=2))
    kept_rows.append(args.rows_out, {"host": where, **row})
    return 0 if row["exit"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
