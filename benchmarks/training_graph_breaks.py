"""The harness-style graph-break count of a training step, model by model, beside PyTorch's
training expected files: the check of the child's replay (harness_accuracy_counters) against the
numbers PyTorch's CI wrote, without the compile, timing and verification of a whole experiment.

    python benchmarks/training_graph_breaks.py --suite timm --job inductor --out /tmp/gb.jsonl -k 'mobilenet|resnet'
    python benchmarks/training_graph_breaks.py --out /tmp/gb.jsonl --markdown

For each model it builds the driver the child builds for `--dashboard=JOB --accelerator=cpu
--test=train --verify` at PyTorch's accuracy batch size, and calls the same function the child calls
after verification, which replays the suite's forward_and_backward_pass with the optimizer the CUDA
job takes. Graph breaks come from tracing, not the backend, so the count is the experiment's; the
device is not: a model whose trace differs on the CPU (a CUDA-only kernel path) differs here too.
Each model appends one JSON line to --out (a rerun skips the models it holds): the count, the
reasons dynamo gave (`counters["graph_break"]`, run with TORCH_LOGS=graph_breaks for each break's
source line) and the library versions; --markdown prints the table and the agreement.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiment_runner.analysis.expected import SHIPPED, read_expected, shipped_source  # noqa: E402
from experiment_runner.core import dashboards  # noqa: E402

SUITES = ("torchbench", "huggingface", "timm")


def expected_rows(job: str, suite: str) -> dict[str, dict[str, str]]:
    name = dashboards.dashboards()[job].expected_file(suite, "train")
    return read_expected(SHIPPED / name) if name and (SHIPPED / name).exists() else {}


def versions() -> dict[str, str]:
    """The libraries a count depends on (a library's own frames can break), where they import."""
    found = {}
    for name in ("torch", "timm", "transformers"):
        try:
            found[name] = importlib.import_module(name).__version__
        except Exception as exc:  # noqa: BLE001 - a library the suite does not need may not import
            found[name] = f"not imported: {type(exc).__name__}"
    return found


def count(suite: str, model: str, job: str) -> dict[str, Any]:
    """The child's own count for one model, with the reasons dynamo gave for each break and the
    library versions, or the error that stopped it."""
    from experiment_runner.child.devices import runtime_for
    from experiment_runner.child.driver import ExperimentDriver
    from experiment_runner.child.main import harness_accuracy_counters
    from experiment_runner.core.matrix import Experiment, ExperimentConfig
    from experiment_runner.core.options import RunOptions
    from torch._dynamo.utils import counters

    wanted = dashboards.dashboards()[job]
    run = wanted.run("train")
    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo=wanted.dynamo, test="train",
                              precision=run.precision, batch_size=dashboards.accuracy_batch_size(suite),
                              compile_options=wanted.compile_options, training_recipe=dashboards.HARNESS_RECIPE)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as artifacts:
        driver = ExperimentDriver(Experiment(suite, model, config), RunOptions(verify=True), runtime_for(config),
                                    Path(artifacts))
        try:
            before = Counter(counters["graph_break"])
            found, method = harness_accuracy_counters(driver)
            return {"harness_count": found["graph_breaks"], "method": method, "seconds": round(time.monotonic() - started, 1),
                    "reasons": dict(Counter(counters["graph_break"]) - before), "versions": versions()}
        except Exception as exc:  # noqa: BLE001 - one model's failure is a row, not the end of the sweep
            return {"error": f"{type(exc).__name__}: {str(exc)[:300]}",
                    "where": traceback.format_exc().strip().splitlines()[-1][:300]}


def measure(args: argparse.Namespace) -> None:
    from benchmark_models import get_suite

    done = {(r["suite"], r["model"], r["job"]) for r in read(args.out)}
    for suite in args.suite or SUITES:
        expected = expected_rows(args.job, suite)
        ours = set(get_suite(suite).model_names())
        for model in sorted(m for m in expected if m in ours and (not args.pattern or re.search(args.pattern, m))):
            if (suite, model, args.job) in done:
                continue
            row = {"suite": suite, "model": model, "job": args.job, **count(suite, model, args.job)}
            with args.out.open("a") as out:
                out.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def others(row: dict[str, Any]) -> str:
    """The model's count in the other training jobs' files, each with its commit: the same step
    (the optimizer differs for inductor's few SGD models only) counted at other PyTorch commits,
    which shows how far a count moves with the torch a file was written with."""
    found = []
    for job in dashboards.training_jobs():
        name = dashboards.dashboards()[job].expected_file(row["suite"], "train")
        value = expected_rows(job, row["suite"]).get(row["model"], {}).get("graph_breaks")
        if job != row["job"] and value is not None:
            found.append(f"{job} {value} (@{shipped_source(name) or '?'})")
    return ", ".join(found)


def markdown(path: Path) -> None:
    rows = read(path)
    print("| job | suite | model | ours (replayed) | PyTorch's | equal | optimizer replayed | s | the other jobs' files |")
    print("|---|---|---|---|---|---|---|---|---|")
    agree: dict[tuple[str, str], list[bool]] = {}
    for r in rows:
        theirs = expected_rows(r["job"], r["suite"]).get(r["model"], {}).get("graph_breaks")
        if "error" in r:
            print(f"| {r['job']} | {r['suite']} | {r['model']} | error: {r['error']} | {theirs} | | | |")
            continue
        equal = theirs is not None and int(theirs) == r["harness_count"]
        agree.setdefault((r["job"], r["suite"]), []).append(equal)
        optimizer = r["method"].removeprefix("replayed with optimizer ").split(", the harness's")[0]
        print(f"| {r['job']} | {r['suite']} | {r['model']} | {r['harness_count']} | {theirs} | "
              f"{'yes' if equal else '**no**'} | {optimizer} | {r['seconds']} | {others(r)} |")
    print()
    for (job, suite), found in sorted(agree.items()):
        print(f"- {job} {suite}: graph breaks equal for {sum(found)} of {len(found)}")
    total = [e for found in agree.values() for e in found]
    if total:
        print(f"- all: {sum(total)} of {len(total)} ({100 * sum(total) / len(total):.0f}%)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON lines, one per model (appended, resumed)")
    parser.add_argument("--suite", action="append", choices=SUITES, help="default: all three")
    parser.add_argument("--job", default="inductor", choices=dashboards.training_jobs(),
                        help="the CUDA job whose training file the counts are compared with")
    parser.add_argument("-k", dest="pattern", help="only the models this regex finds")
    parser.add_argument("--markdown", action="store_true", help="print the table of --out; measure nothing")
    args = parser.parse_args()
    if args.markdown:
        markdown(args.out)
    else:
        measure(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
