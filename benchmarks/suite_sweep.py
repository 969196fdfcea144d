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
import kept_rows  # noqa: E402
from experiment_runner.core.results import iter_records  # noqa: E402

STUDY = "suite_sweep"
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


def latest(output: Path, suite: str) -> dict[str, dict[str, dict[str, Any]]]:
    """Per model of `suite`, per column, the record of its latest attempt in the suite's run folder."""
    found: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    path = output / suite / "results.jsonl"
    for record in iter_records(path) if path.is_file() else ():
        if not isinstance(record, dict):
            continue
        exp = record["experiment"]
        column = ("inductor " if exp["dynamo"] == "inductor" else "") + exp["test"]
        found[record["model"]["model_name"]][column] = record  # the latest attempt of the experiment wins
    return found


def kept_row(output: Path, suite: str, where: dict[str, Any], args: argparse.Namespace,
             seconds: float) -> dict[str, Any]:
    """What one suite's run gave, per model and column: status, verdict and the cause of a failure;
    only the columns this run planned, so an earlier run's into the same folder is not kept again."""
    dynamo, tests = args.dynamo or ["None"], args.test or ["eval", "train"]
    planned = {("inductor " if d == "inductor" else "") + test for d in dynamo for test in tests}
    return {"host": where, "suite": suite, "dynamo": dynamo, "tests": tests, "verify": not args.no_verify,
            "seconds": round(seconds),
            "models": {model: {column: {"status": r["status"], "verification_code": r.get("verification_code"),
                                        "why": None if r["status"] == "ok" else cause(r)}
                               for column, r in columns.items() if column in planned}
                       for model, columns in sorted(latest(output, suite).items()) if planned & columns.keys()}}


def standing(rows: list[dict[str, Any]] | None = None) -> list[str]:
    """The page's present tense: per suite and column (eval and train at least), the newest kept
    run's counts (ok, skipped by the harness's rules, failed; verdicts where it verified), then each
    failure with its cause."""
    newest: dict[tuple[str, str], dict[str, Any]] = {}
    for row in kept_rows.read(STUDY) if rows is None else rows:
        for column in {c for columns in row["models"].values() for c in columns}:
            newest[(row["suite"], column)] = row
    cells, failures = [], []
    for suite, column in sorted({*newest, *((suite, test) for suite in SUITES for test in ("eval", "train"))}):
        if (suite, column) not in newest:
            cells.append([suite, column, "-", "-", "-", "-", "-", "no row kept: the dated table below"])
            continue
        row = newest[(suite, column)]
        found = {model: columns[column] for model, columns in row["models"].items() if column in columns}
        statuses = [f["status"] for f in found.values()]
        codes = [f["verification_code"] for f in found.values() if f["status"] == "ok" and f["verification_code"]]
        verdicts = ", ".join(f"{code} {codes.count(code)}" for code in sorted(set(codes))) if row["verify"] else "not verified"
        cells.append([suite, column, str(len(found)), str(statuses.count("ok")), str(statuses.count("skipped")),
                      str(len(statuses) - statuses.count("ok") - statuses.count("skipped")), verdicts or "-",
                      kept_rows.where(row)])
        failures += [f"{suite} {model} ({column}): {f['why']}" for model, f in found.items()
                     if f["status"] not in ("ok", "skipped")]
    return [*kept_rows.table(["suite", "column", "models", "ok", "skipped by rule", "failed", "verification",
                              "taken"], cells), "",
            "Failures: " + ("; ".join(failures).replace("|", "/") if failures else "none.")]


def table(output: Path) -> list[str]:
    """One row per model: the status of each column that ran, the verification, seconds."""
    rows = {(suite, model): columns for suite in SUITES for model, columns in latest(output, suite).items()}
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
    parser.add_argument("--output", type=Path, required=True, help="folder of the runs (one per suite); with --rows-out a run keeps "
                                                       "the latest attempt in it of each experiment it planned")
    parser.add_argument("--suite", action="append", choices=SUITES, help="default: all three")
    parser.add_argument("--dynamo", action="append", default=None,
                        help="None and/or inductor (default: None); repeat for both")
    parser.add_argument("--test", action="append", choices=("eval", "train"), help="default: both")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per experiment")
    parser.add_argument("--no-verify", action="store_true",
                        help="skip verification (its float64 copy doubles the time and memory of big models)")
    parser.add_argument("--markdown", action="store_true", help="print the table of what the runs hold; run nothing")
    kept_rows.add_arguments(parser, STUDY, standing)
    args = parser.parse_args()
    if args.markdown:
        print("\n".join(table(args.output)))
        return 0
    for suite in args.suite or SUITES:
        where = kept_rows.host()
        seconds = run_suite(suite, args.output, args.dynamo or ["None"], args.test or ["eval", "train"],
                            args.timeout, not args.no_verify)
        print(f"suite_sweep: {suite}: {seconds:.0f} s, load average {os.getloadavg()[0]:.2f} at the end",
              file=sys.stderr)
        kept_rows.append(args.rows_out, kept_row(args.output, suite, where, args, seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
