"""The minifier on real models: one per suite, with inductor's relu broken on purpose, each
failure kind minified by `--minify` and its repro checked in a fresh interpreter.

    python benchmarks/minify_real.py OUT                       # every case not yet in OUT
    python benchmarks/minify_real.py OUT --case timm:repvgg_a2 --inject accuracy
    python benchmarks/minify_real.py OUT --markdown            # the table for docs/benchmarks/

Each case is one `experiment_runner` run (inductor, eval, fp32, --verify --minify) in OUT/CASE/,
with the plugin `inject_relu_bug` (beside this script) setting PyTorch's own fault injection,
torch._inductor.config.cpp.inject_relu_bug_TESTING_ONLY, in the experiment's and the minifier's
processes. A case whose folder holds a record is not run again. The table reads each record,
its `minified` block (minified.jsonl) and the minifier child's own timings (minify_result.json:
the launcher's shrinking and the repro's check; the rest of the wall time is loading the model
and dumping the failing graph).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
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
            "shrink_s": shrink, "check_s": check, "minify_s": total}


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def markdown(out: Path) -> str:
    lines = ["| suite | model | injection | experiment | minified | symptom | nodes | load and dump s | "
             "shrink s | check s | total min |", "| --- " * 11 + "|"]
    for suite, model, _ in CASES:
        for inject in INJECTIONS:
            found = row(case_folder(out, suite, model, inject))
            if found is None:
                continue
            nodes = (f"{found['nodes_before']} to {found['nodes_after']}"
                     if found["nodes_before"] is not None else "-")
            total = "-" if found["minify_s"] is None else f"{found['minify_s'] / 60:.1f}"
            lines.append(f"| {suite} | {model} | {inject} | {found['outcome']} | {found['status']} | "
                         f"{found['symptom']} | {nodes} | "
                         f"{seconds(found['dump_s'])} | {seconds(found['shrink_s'])} | "
                         f"{seconds(found['check_s'])} | {total} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="folder of the cases' output folders")
    parser.add_argument("--case", action="append", metavar="SUITE:MODEL",
                        help="run only these cases (default: " + ", ".join(f"{s}:{m}" for s, m, _ in CASES) + ")")
    parser.add_argument("--inject", action="append", choices=INJECTIONS, help="run only these injections")
    parser.add_argument("--minify-timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help="each minification's budget in seconds (default %(default)s)")
    parser.add_argument("--markdown", action="store_true", help="print the table of the cases in OUT and stop")
    args = parser.parse_args()
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
