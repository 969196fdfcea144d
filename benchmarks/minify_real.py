"""The minifier on real models: one per suite, with inductor's relu broken on purpose, each
failure kind minified by `--minify` and its repro checked in a fresh interpreter.

    python benchmarks/minify_real.py OUT                       # every case not yet in OUT
    python benchmarks/minify_real.py OUT --case timm:repvgg_a2 --inject accuracy
    python benchmarks/minify_real.py OUT --markdown            # the table for docs/benchmarks/
    python benchmarks/minify_real.py --standing                # the head of docs/benchmarks/minify.md

Each case is one `experiment_runner` run (inductor, eval, fp32, --verify --minify) in OUT/CASE/,
with the plugin `inject_relu_bug` (beside this script) setting PyTorch's own fault injection,
torch._inductor.config.cpp.inject_relu_bug_TESTING_ONLY, in the experiment's and the minifier's
processes. A case whose folder holds a record is not run again. The table reads each record,
its `minified` block (minified.jsonl) and the minifier child's own timings (minify_result.json:
the launcher's shrinking and the repro's check; the rest of the wall time is loading the model
and dumping the failing graph). The page's head (--standing) reads the cases kept in
docs/benchmarks/data/minify and runs nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiment_runner.core.minify import DEFAULT_TIMEOUT_S, RESULT_FILE, join_minified  # noqa: E402

HERE = Path(__file__).resolve().parent
# One model per suite with torch.relu (aten.relu) in its forward, small enough to minify in a
# budget: (suite, model, batch size). T5's feed-forward is DenseReluDense; RepVGG's blocks and
# AlexNet's layers end in ReLU.
CASES = (("torchbench", "alexnet", 2), ("timm", "repvgg_a2", 2), ("huggingface", "T5Small", 1))
INJECTIONS = ("accuracy", "compile_error")
# The study the head of docs/benchmarks/minify.md is written from (--standing): each case's folder
# as a run left it, record, minified.jsonl and the minifier's files.
KEPT = Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "data" / "minify"
# How the head words a repro's `reproduces` (the runner's check in a fresh interpreter, or none):
# in its table's column, and in its total for a case not reproduced.
REPRODUCES = {True: ("yes", "its repro reproduces"), False: ("no", "its repro does not reproduce"),
              None: ("not checked", "its repro not checked by the runner")}


def case_folder(out: Path, suite: str, model: str, inject: str) -> Path:
    return out / f"{suite}-{model}-{inject}"


def run_case(out: Path, suite: str, model: str, batch: int, inject: str, timeout_s: float) -> None:
    folder = case_folder(out, suite, model, inject)
    if (folder / "results.jsonl").exists():
        print(f"{folder.name}: already run", flush=True)
        return
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
           "EXPERIMENT_RUNNER_PLUGINS": "inject_relu_bug", "INJECT_RELU_BUG": inject}
    command = [sys.executable, "-m", "experiment_runner", f"--suite-name={suite}", f"--filter=^{model}$",
               "--accelerator=cpu", "--xla=None", "--test=eval", "--precision=fp32", "--dynamo=inductor",
               f"--batch-size={batch}", "--verify", "--repeat=1", "--warmup-iterations=1",
               "--iterations-per-run=1", "--minify", f"--minify-timeout={timeout_s:g}",
               f"--output-dirname={folder}"]
    started = time.monotonic()
    code = subprocess.run(command, env=env).returncode
    print(f"{folder.name}: exited {code} after {time.monotonic() - started:.0f} s", flush=True)


def row(folder: Path) -> dict[str, Any] | None:
    results = folder / "results.jsonl"
    if not results.exists():
        return None
    record = join_minified([json.loads(line) for line in results.read_text().splitlines()], results)[-1]
    block = record.get("minified") or {}
    try:
        child = json.loads((folder / block["log"]).with_name(RESULT_FILE).read_text())
    except (KeyError, OSError, ValueError):
        child = {}
    shrink, check = child.get("launcher_s"), child.get("check_s")
    total = block.get("minify_s")
    return {"outcome": record.get("verification_code") if record["status"] == "ok"
            else f"{record['status']} ({(record.get('error') or {}).get('type')})",
            "status": block.get("status", "not minified (yet)"), "symptom": block.get("symptom"),
            "nodes_before": block.get("nodes_before"), "nodes_after": block.get("nodes_after"),
            "dump_s": None if None in (total, shrink, check) else total - shrink - check,
            "shrink_s": shrink, "check_s": check, "minify_s": total, "reproduces": block.get("reproduces"),
            "date": datetime.fromtimestamp(record["timestamp"], timezone.utc).date().isoformat()}


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def nodes(found: dict[str, Any]) -> str:
    return "-" if found["nodes_before"] is None else f"{found['nodes_before']} to {found['nodes_after']}"


def minutes(found: dict[str, Any]) -> str:
    return "-" if found["minify_s"] is None else f"{found['minify_s'] / 60:.1f}"


def markdown(out: Path) -> str:
    lines = ["| suite | model | injection | experiment | minified | symptom | nodes | load and dump s | "
             "shrink s | check s | total min |", "| --- " * 11 + "|"]
    for suite, model, _ in CASES:
        for inject in INJECTIONS:
            found = row(case_folder(out, suite, model, inject))
            if found is None:
                continue
            lines.append(f"| {suite} | {model} | {inject} | {found['outcome']} | {found['status']} | "
                         f"{found['symptom']} | {nodes(found)} | "
                         f"{seconds(found['dump_s'])} | {seconds(found['shrink_s'])} | "
                         f"{seconds(found['check_s'])} | {minutes(found)} |")
    return "\n".join(lines)


def standing(out: Path = KEPT) -> list[str]:
    """The page's present tense, from the cases in OUT: per case its minification's outcome, whether
    the runner's check found the repro reproducing, the graph's nodes before and after, the minutes
    and the day of the run, then how many of the cases ran and reproduced; the others are named,
    so that a case left short is read in the head, not only in a dated section."""
    lines = ["| suite | model | injection | minified | repro reproduces | nodes | total min | run on |",
             "|---|---|---|---|---|---|---|---|"]
    cases = [(suite, model, inject) for suite, model, _ in CASES for inject in INJECTIONS]
    ran = reproduced = 0
    others: list[str] = []
    for suite, model, inject in cases:
        found = row(case_folder(out, suite, model, inject))
        if found is None:
            continue
        ran += 1
        lines.append(f"| {suite} | {model} | {inject} | {found['status']} | {REPRODUCES[found['reproduces']][0]} | "
                     f"{nodes(found)} | {minutes(found)} | {found['date']} |")
        if found["status"] == "reproduced":
            reproduced += 1
        else:
            others.append(f"{suite} {model} {inject} ({found['status']} at {nodes(found)} nodes, "
                          f"{REPRODUCES[found['reproduces']][1]})")
    short = f"; not reproduced: {'; '.join(others)}" if others else ""
    lines += ["", f"{ran} of {len(cases)} cases run, {reproduced} reproduced (minified to the end, the repro "
              f"checked by the runner in a fresh interpreter){short}."]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, nargs="?", help="folder of the cases' output folders")
    parser.add_argument("--case", action="append", metavar="SUITE:MODEL",
                        help="run only these cases (default: " + ", ".join(f"{s}:{m}" for s, m, _ in CASES) + ")")
    parser.add_argument("--inject", action="append", choices=INJECTIONS, help="run only these injections")
    parser.add_argument("--minify-timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help="each minification's budget in seconds (default %(default)s)")
    parser.add_argument("--markdown", action="store_true", help="print the table of the cases in OUT and stop")
    parser.add_argument("--standing", action="store_true",
                        help="print the page's head from the cases in OUT (default: the kept cases, "
                             "docs/benchmarks/data/minify) and run nothing")
    args = parser.parse_args()
    if args.standing:
        print("\n".join(standing(args.out or KEPT)))
        return 0
    if args.out is None:
        parser.error("OUT is required (except with --standing)")
    if args.markdown:
        print(markdown(args.out))
        return 0
    known = {f"{s}:{m}" for s, m, _ in CASES}
    unknown = sorted(set(args.case or ()) - known)
    if unknown:
        parser.error(f"unknown case {', '.join(unknown)}; choose from {', '.join(sorted(known))}")
    for suite, model, batch in CASES:
        for inject in args.inject or INJECTIONS:
            if args.case is None or f"{suite}:{model}" in args.case:
                run_case(args.out, suite, model, batch, inject, args.minify_timeout)
    print(markdown(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
