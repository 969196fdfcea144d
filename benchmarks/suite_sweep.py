"""Every model of every suite through the runner, at batch size 1 on CPU: does it load, run
eval and train, compile with inductor, and verify? The table of docs/benchmarks/suite_sweep.md.

    python benchmarks/suite_sweep.py --output /tmp/sweep                    # eager, eval and train
    python benchmarks/suite_sweep.py --output /tmp/sweep --test train --no-verify
    python benchmarks/suite_sweep.py --output /tmp/sweep --dynamo inductor  # adds the inductor column
    python benchmarks/suite_sweep.py --output /tmp/sweep --markdown         # the table of what ran

Each suite is one `experiment_runner` run per invocation (so reruns resume, and every experiment
has its own child and record) with `--accelerator=cpu --batch-size=1 --verify` (`--no-verify`
skips verification: its float64 copy doubles the time and memory of the big models). Several
invocations into one --output (eval verified, then train without) make one table. What the harness's rules
skip on CPU is `skipped` with the rule, as in a nightly run. A failure's cause is said from its
record: the rule or the check that skipped it, oom and timeout (the host's: a 2-core VM), or
the error's own first line; docs/benchmarks/suite_sweep.md says whose each one is.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiment_runner.core.results import iter_records  # noqa: E402

SUITES = ("torchbench", "huggingface", "timm")
COLUMNS = ("eval", "train", "inductor eval", "inductor train")


def run_suite(suite: str, output: Path, dynamo: list[str], tests: list[str], timeout_s: int, verify: bool) -> float:
    """One run of the suite; the seconds it took."""
    command = [sys.executable, "-m", "experiment_runner", f"--suite-name={suite}", "--accelerator=cpu",
               "--batch-size=1", *(["--verify"] if verify else []), "--repeat=2", "--warmup-iterations=1",
               "--no-progress-bar",
               f"--subprocess-timeout={timeout_s}", f"--output-dirname={output / suite}",
               *(f"--dynamo={d}" for d in dynamo), *(f"--test={t}" for t in tests)]
    started = time.monotonic()
    subprocess.run(command, check=False)
    return time.monotonic() - started


def cause(record: dict[str, Any]) -> str:
    """A failure in one phrase, from its record."""
    error = record.get("error") or {}
    message = (error.get("message") or "").strip().splitlines()
    first = message[0] if message else ""
    if record["status"] == "skipped":
        return f"skipped: {first}"
    if record["status"] in ("timeout", "oom"):
        return f"{record['status']} (the host)"
    return f"{record['status']}: {error.get('type') or ''}: {first}"[:160]


def table(output: Path) -> list[str]:
    """One row per model: the status of each column that ran, the verification, seconds."""
    rows: dict[tuple[str, str], dict[str, Any]] = defaultdict(dict)
    for suite in SUITES:
        path = output / suite / "results.jsonl"
        if not path.is_file():
            continue
        for record in iter_records(path):
            if not isinstance(record, dict):
                continue
            exp = record["experiment"]
            column = ("inductor " if exp["dynamo"] == "inductor" else "") + exp["test"]
            row = rows[(suite, record["model"]["model_name"])]
            row[column] = record  # the latest attempt of the experiment wins
    lines = ["| suite | model | loads | " + " | ".join(COLUMNS) + " | verification (eval) | seconds | why not ok |",
             "|---|---|---|" + "---|" * len(COLUMNS) + "---|---|---|"]
    for (suite, model), row in sorted(rows.items()):
        records = list(row.values())
        loads = "yes" if any(r["status"] == "ok" for r in records) else (
            "skipped" if all(r["status"] == "skipped" for r in records) else "no")
        cells = [row[c]["status"] if c in row else "" for c in COLUMNS]
        verified = ", ".join(sorted({row[c]["verification_code"] for c in ("eval", "inductor eval") if c in row}))
        seconds = sum(r.get("timings", {}).get("wall_s") or 0 for r in records)
        why = "; ".join(sorted({f"{c}: {cause(row[c])}" if len(row) > 1 else cause(row[c])
                                for c in COLUMNS if c in row and row[c]["status"] != "ok"}))
        lines.append(f"| {suite} | {model} | {loads} | " + " | ".join(cells)
                     + f" | {verified} | {seconds:.0f} | {why.replace('|', '/')} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True, help="folder of the runs (one per suite)")
    parser.add_argument("--suite", action="append", choices=SUITES, help="default: all three")
    parser.add_argument("--dynamo", action="append", default=None,
                        help="None and/or inductor (default: None); repeat for both")
    parser.add_argument("--test", action="append", choices=("eval", "train"), help="default: both")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per experiment")
    parser.add_argument("--no-verify", action="store_true",
                        help="skip verification (its float64 copy doubles the time and memory of big models)")
    parser.add_argument("--markdown", action="store_true", help="print the table of what the runs hold; run nothing")
    args = parser.parse_args()
    if args.markdown:
        print("\n".join(table(args.output)))
        return 0
    for suite in args.suite or SUITES:
        seconds = run_suite(suite, args.output, args.dynamo or ["None"], args.test or ["eval", "train"],
                            args.timeout, not args.no_verify)
        print(f"suite_sweep: {suite}: {seconds:.0f} s, load average {os.getloadavg()[0]:.2f} at the end",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
