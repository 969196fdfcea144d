"""What verification costs, before and after a change: the timings breakdown of a few models.

Issue 41 item 5 cuts what an experiment pays that its answer does not need: the float64
reference where no comparison reads it, and under AOT Inductor the verifier's second compile of
the package the timed step built. This script runs a few models with `--verify` from two source
trees (the one before the change, e.g. from `git archive`, and this one), alternating round after
round so a drift in the host's load falls on both, and prints per model and tree the median of
each verification step (`timings.verify_*`), the child's lifetime, the verification code and
whether the float64 reference was built. Each round writes to its own folders (`OUT/before/round1`,
...), since a rerun into the same folder would resume the finished run. With `--results BEFORE
AFTER` it only reads results files (each a file, or a folder whose results.jsonl files it reads)
and prints the same table.

    git archive <commit before> | tar -x -C /tmp/before
    python benchmarks/costs.py --before-tree /tmp/before [--rounds 2] [--out /tmp/costs]
    python benchmarks/costs.py --results before/results.jsonl after/results.jsonl
    python benchmarks/costs.py --rounds 1 --rows-out docs/benchmarks/data/costs/DATE.jsonl   # this tree alone, kept
    python benchmarks/costs.py --standing      # the head of docs/benchmarks/costs.md

Records from before the split have `verify_s` alone; the step columns are then empty. Quote the
host's load (printed per round) beside the figures: on a busy 2-core host, compare medians of the
same round, and expect the float64 and compile savings, not the small steps, to stand out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import kept_rows

STUDY = "costs"
ROOT = Path(__file__).resolve().parents[1]
# (label, flags): the models the figures in docs/benchmarks/costs.md were taken on.
MODELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("mobilenetv3_large_100 inductor", ("--suite-name=timm", "-k", "^mobilenetv3_large_100$", "--dynamo=inductor",
                                        "--test=eval")),
    ("DistillGPT2 inductor", ("--suite-name=huggingface", "-k", "^DistillGPT2$", "--dynamo=inductor", "--test=eval")),
    ("mobilenetv3_large_100 cpu_aot_inductor_freezing", ("--suite-name=timm", "-k", "^mobilenetv3_large_100$",
                                                         "--dashboard=cpu_aot_inductor_freezing")),
)
STEPS = ("verify_eager_s", "verify_compiled_s", "verify_float64_s", "verify_compare_s")
COLUMNS = ("verify_s", *STEPS, "child_s")


def run_model(tree: Path, flags: tuple[str, ...], out: Path, batch_size: int) -> None:
    env = dict(os.environ, PYTHONPATH=str(tree))
    subprocess.run([sys.executable, "-m", "experiment_runner", *flags, f"--batch-size={batch_size}", "--verify",
                    "--no-progress-bar", f"--output-dirname={out}"], cwd=tree, env=env, check=True,
                   stdout=subprocess.DEVNULL)


def label_of(record: dict[str, Any]) -> str:
    experiment = record["experiment"]
    return f"{record['model']['model_name']} {experiment.get('dashboard') or experiment['dynamo']}"


def summarize(path: Path) -> dict[str, dict[str, Any]]:
    """Per model: each column's median over its records (in `path`, or in every results.jsonl under
    it), the codes, and where the reference was needed."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for results in sorted(path.rglob("results.jsonl")) if path.is_dir() else [path]:
        for line in results.read_text().splitlines():
            record = json.loads(line)
            grouped.setdefault(label_of(record), []).append(record)
    out = {}
    for label, records in grouped.items():
        row: dict[str, Any] = {"n": len(records)}
        for column in COLUMNS:
            values = [r["timings"][column] for r in records if r["timings"].get(column) is not None]
            row[column] = statistics.median(values) if values else None
        details = [(r.get("verification") or {}).get("details", {}) for r in records]
        row["codes"] = "/".join(sorted({f"{r['verification_code']} {(r['verification'] or {}).get('method')}"
                                        for r in records}))
        needed = {json.dumps(d.get("reference_needed_at")) for d in details if "reference_needed_at" in d}
        row["reference"] = ("not needed" if all(d.get("reference_not_needed") for d in details) else
                            "needed at " + ", ".join(sorted(needed)) if needed else
                            "built" if all(d.get("reference") == "float64" for d in details) else "-")
        out[label] = row
    return out


def table(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> str:
    cell = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    lines = ["| model | tree | runs | " + " | ".join(COLUMNS) + " | verification | float64 reference |",
             "| --- | --- | ---: | " + " | ".join("---:" for _ in COLUMNS) + " | --- | --- |"]
    for label in sorted(set(before) | set(after)):
        for tree, rows in (("before", before), ("after", after)):
            if label in rows:
                row = rows[label]
                lines.append(f"| {label} | {tree} | {row['n']} | " + " | ".join(cell(row[c]) for c in COLUMNS)
                             + f" | {row['codes']} | {row['reference']} |")
        if label in before and label in after and before[label]["verify_s"] and after[label]["verify_s"]:
            saved = before[label]["verify_s"] - after[label]["verify_s"]
            lines.append(f"| {label} | saved | | {saved:.2f} ({saved / before[label]['verify_s']:.0%}) |"
                         + " |" * (len(COLUMNS) + 1))
    return "\n".join(lines)


def standing(rows: list[dict[str, Any]] | None = None) -> list[str]:
    """The page's present tense: what verification costs on the tree of the newest kept run, per
    model the median of each step over its rounds, its code and where the float64 reference was
    needed."""
    row = (kept_rows.read(STUDY) if rows is None else rows)[-1]
    cell = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    lines = kept_rows.table(["model", "runs", *COLUMNS, "verification", "float64 reference"],
                            [[label, str(found["n"]), *(cell(found[c]) for c in COLUMNS), found["codes"],
                              found["reference"]] for label, found in sorted(row["models"].items())])
    return lines + ["", f"Seconds, `--verify --batch-size={row['batch_size']}`, {row['rounds']} round(s); "
                        f"{kept_rows.where(row)}."]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before-tree", type=Path, help="source tree of the runner before the change")
    parser.add_argument("--after-tree", type=Path, default=ROOT, help="source tree after it (default: this one)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--first-round", type=int, default=1, help="number the rounds from here (adds rounds to OUT)")
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("/tmp/costs"))
    parser.add_argument("--results", type=Path, nargs=2, metavar=("BEFORE", "AFTER"),
                        help="only read two results files")
    kept_rows.add_arguments(parser, STUDY, standing)
    args = parser.parse_args(argv)
    where = kept_rows.host()
    if args.results:
        before_path, after_path = args.results
    else:
        # Without --before-tree: the after tree alone, what verification costs there now.
        before_path, after_path = args.out / "before", args.out / "after"
        for round_ in range(args.first_round - 1, args.first_round - 1 + args.rounds):
            trees = [("before", args.before_tree)] * (args.before_tree is not None) + [("after", args.after_tree)]
            for name, tree in trees if round_ % 2 == 0 else trees[::-1]:
                for label, flags in MODELS:
                    print(f"round {round_ + 1}, {name}: {label} (load {os.getloadavg()[0]:.2f})", file=sys.stderr)
                    run_model(tree, flags, args.out / name / f"round{round_ + 1}", args.batch_size)
    after = summarize(after_path)
    print(table(summarize(before_path) if args.results or args.before_tree is not None else {}, after))
    kept_rows.append(args.rows_out, {"host": where, "rounds": args.rounds, "batch_size": args.batch_size,
                                     "models": after})
    return 0


if __name__ == "__main__":
    sys.exit(main())
