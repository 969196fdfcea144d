"""Every column of our exported performance and accuracy rows beside the harness's own, per model.

Reads a folder kept by `paired_vs_harness.py --keep`: per round, the harness's CSVs
(harness_<suite>_<model>_{accuracy,performance}.csv) and our results (ours_harness_<suite>_<model>/),
exports ours with `experiment_runner export --format=dynamo-csv`, and prints one table per column
group: the harness's value, ours, and whether they agree within the column's tolerance
(TOLERANCES: counters exactly; timings and memory within a share, as they are measurements of
two processes; the speedup is compared by paired_vs_harness.py itself).

On the CPU the memory columns are each process's whole resident set after a warm-up (100 x GB),
so they hold what each process held before its model loaded: the harness's imports (pandas,
scipy, its benchmark modules) are not ours. Where both bases are known (the harness's
harness_*_performance_base.json, ours' measurements.harness_warmup.base_memory_bytes), the memory
columns compare above them (within ABOVE_BASE_TOLERANCE), and compression_ratio is ours' rebased
onto the harness's base; the raw figures stay in the table.

    python benchmarks/harness_columns.py /tmp/study/b8 /tmp/study/b1

Which columns agree, and by how much the measured ones differ, goes in
docs/benchmarks/paired_vs_harness.md with its date.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

# Per column: None compares exactly (dynamo's counters: the same model compiled the same way),
# a share compares |ours / harness - 1| (measurements of two processes on one host).
TOLERANCES: dict[str, float | None] = {
    "calls_captured": None, "unique_graphs": None, "graph_breaks": None, "unique_graph_breaks": None,
    "autograd_captures": None, "autograd_compiles": None, "cudagraph_skips": None, "accuracy": None,
    "abs_latency": 0.15, "compilation_latency": 0.25, "eager_peak_mem": 0.15, "dynamo_peak_mem": 0.15,
    "compression_ratio": 0.10}


def rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open() as f:
        return {row["name"]: row for row in csv.DictReader(f)}


def ours_rows(results: Path, scratch: Path) -> dict[str, dict[str, str]]:
    """Our export of one kept run: {kind: {model: row}}, kind performance or accuracy."""
    out = scratch / results.parent.name
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "experiment_runner", "export", str(results), "--format=dynamo-csv",
                    "-o", str(out)], check=False, capture_output=True)
    found: dict[str, dict[str, dict[str, str]]] = {"performance": {}, "accuracy": {}}
    for kind in found:
        for path in out.glob(f"*_{kind}.csv"):
            found[kind].update(rows(path))
    return found


# Memory above each base: a resident level after a warm-up holds what the allocator kept of the
# process's own history (how its model was built and its inputs made), which two processes do not
# share: 2026-12-03, three models, -21% to +42% (docs/benchmarks/paired_vs_harness.md).
ABOVE_BASE_TOLERANCE = 0.45

# The dynamo CSV's CPU memory unit per byte: psutil's memory_percent() x RAM / 10**9 (100 x GB).
CPU_MEMORY_UNIT = 100 / 10**9
MEMORY_COLUMNS = ("eager_peak_mem", "dynamo_peak_mem")


def harness_base(round_dir: Path, suite: str, model: str) -> float | None:
    """The harness's performance process's resident set before its model loaded, in the CSV's
    CPU unit (paired_vs_harness.py's HARNESS_BASE_FILE); None where it was not kept."""
    path = round_dir / f"harness_{suite}_{model}_performance_base.json"
    return json.loads(path.read_text())["base_memory_bytes"] * CPU_MEMORY_UNIT if path.exists() else None


def ours_base(results: Path) -> float | None:
    """Our compiled experiment's resident set before its model loaded, in the CSV's CPU unit."""
    for line in results.read_text().splitlines():
        record = json.loads(line)
        if record["experiment"]["dynamo"] is not None and record["experiment"]["accelerator"] == "cpu":
            base = (record["measurements"].get("harness_warmup") or {}).get("base_memory_bytes")
            return None if base is None else base * CPU_MEMORY_UNIT
    return None


def above_bases(theirs: dict[str, str], mine: dict[str, str], bases: tuple[float, float]) -> dict[str, tuple[str, str]]:
    """The memory columns each above its own process's base, and compression_ratio with ours
    rebased onto the harness's base: (harness's, ours') as the CSV would write them."""
    theirs_base, ours_base_ = bases
    figures: dict[str, tuple[str, str]] = {}
    for column in MEMORY_COLUMNS:
        figures[column] = (f"{float(theirs[column]) - theirs_base:.6f}", f"{float(mine[column]) - ours_base_:.6f}")
    eager, dynamo = (float(mine[column]) - ours_base_ + theirs_base for column in MEMORY_COLUMNS)
    figures["compression_ratio"] = (theirs["compression_ratio"], f"{eager / dynamo:.6f}")
    return figures


def agree(column: str, theirs: str, ours: str, above_base: bool = False) -> str:
    tolerance = ABOVE_BASE_TOLERANCE if above_base and column in MEMORY_COLUMNS else TOLERANCES[column]
    if tolerance is None:
        return "=" if theirs == ours else "differs"
    try:
        a, b = float(theirs), float(ours)
    except ValueError:
        return "no figure"
    if a == 0:
        return "=" if b == 0 else "differs"
    return f"{b / a - 1:+.0%}" + ("" if abs(b / a - 1) <= tolerance else " (beyond)")


def compare(folders: list[Path]) -> list[str]:
    lines = ["| round | model | column | harness | ours | agreement |", "|---|---|---|---|---|---|"]
    beyond: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for folder in folders:
            for round_dir in sorted(folder.glob("round*")):
                for ours_dir in sorted(round_dir.glob("ours_harness_*")):
                    suite, _, model = ours_dir.name.removeprefix("ours_harness_").partition("_")
                    ours = ours_rows(ours_dir / "results.jsonl", Path(scratch) / round_dir.name)
                    bases = (harness_base(round_dir, suite, model), ours_base(ours_dir / "results.jsonl"))
                    for kind in ("performance", "accuracy"):
                        theirs_csv = round_dir / f"harness_{suite}_{model}_{kind}.csv"
                        if not theirs_csv.exists():
                            continue
                        theirs = rows(theirs_csv).get(model)
                        mine = ours[kind].get(model)
                        if theirs is None or mine is None:
                            lines.append(f"| {round_dir.name} | {model} | ({kind} row) | "
                                         f"{'-' if theirs is None else 'row'} | {'-' if mine is None else 'row'} | "
                                         "missing |")
                            continue
                        rebased = (above_bases(theirs, mine, bases) if kind == "performance"
                                   and None not in bases else {})
                        for column in TOLERANCES:
                            if column in theirs and column in mine:
                                compared = rebased.get(column, (theirs[column], mine[column]))
                                verdict = agree(column, *compared, above_base=column in rebased)
                                beyond[column] = beyond.get(column, 0) + ("beyond" in verdict or verdict == "differs")
                                how = (" above base" if column in MEMORY_COLUMNS else " rebased") if column in rebased else ""
                                lines.append(f"| {round_dir.name} | {model} | {kind}: {column}{how} | "
                                             f"{theirs[column]}{f' ({compared[0]})' if how else ''} | "
                                             f"{mine[column]}{f' ({compared[1]})' if how else ''} | {verdict} |")
    lines += ["", "Beyond tolerance or different, per column: " +
              ", ".join(f"{column} {count}" for column, count in beyond.items())]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", type=Path, nargs="+", help="folders kept by paired_vs_harness.py --keep")
    args = parser.parse_args()
    empty = [str(folder) for folder in args.folders if not any(folder.glob("round*/ours_harness_*"))]
    if empty:
        print(f"harness_columns.py: no round of a paired_vs_harness.py --keep folder in {', '.join(empty)}",
              file=sys.stderr)
        return 2
    print("\n".join(compare(args.folders)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
