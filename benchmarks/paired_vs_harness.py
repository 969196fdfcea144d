"""Our paired speedup beside PyTorch's dynamo harness, on the same models and host.

PyTorch's harness (benchmarks/dynamo in pytorch/pytorch, synced as
userbenchmark/dynamo/dynamobench in pytorch/benchmark) interleaves eager and compiled runs in one
process and reports the median speedup. This script runs it (from a checkout the user points to)
and `experiment_runner --speedup=paired --verify` on the same timm models, and prints both
speedups, both machine times (accuracy + performance for the harness, one run for ours), and the
ratios. Nothing is downloaded: the harness's timm models are built with pretrained=False, as ours
are, by patching timm.create_model in the harness's process.

    python benchmarks/paired_vs_harness.py --harness PATH/userbenchmark/dynamo/dynamobench \\
        --model mobilenetv3_large_100 --model resnet50.a1_in1k --batch-size 8

Take figures on a quiet host (`uptime`): both sides time the same CPU.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Runs the harness's timm_models.py as __main__ with random weights (no download) and with
# torchvision's pure-Python parts loadable beside a CPU torch (model_suites.optional).
_HARNESS = """
import runpy, sys
from model_suites.optional import patch_broken_torchvision
patch_broken_torchvision()
import timm, timm.models
create = timm.models.create_model
def offline(*args, **kwargs):
    kwargs["pretrained"] = False
    return create(*args, **kwargs)
timm.models.create_model = offline
timm.create_model = offline
same_batch = sys.argv[1] == "same-batch"
sys.argv = sys.argv[2:]
sys.path.insert(0, __import__("os").path.dirname(sys.argv[0]))
if same_batch:
    import common
    varied = common.timed
    def timed(*args, batch_size=None, **kwargs):
        return varied(*args, **kwargs)
    common.timed = timed
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def machine_seconds(command: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    """CPU seconds (user + system) of the command and everything it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc


def harness(path: Path, model: str, batch_size: int, out: Path, env: dict[str, str],
            modes: tuple[str, ...] = ("accuracy", "performance"), batch: str = "varied") -> dict[str, object]:
    """The harness's answers for one model. batch="same-batch" times its eager samples at the
    nominal batch size too (its timed() otherwise varies the eager batch by 0.8-1.2x)."""
    common = ["--inductor", "--device", "cpu", "--float32", "--inference", "--only", model,
              "--batch-size", str(batch_size)]
    script = str(path / "timm_models.py")
    seconds = 0.0
    found: dict[str, object] = {}
    for mode in modes:
        csv_path = out / f"harness_{model}_{mode}_{batch}.csv"
        # Each harness process compiles cold, as each of ours does (core/compiler_caches.py), and
        # as the dashboard's accuracy and performance jobs do on their own machines.
        cold = {**env, "TORCHINDUCTOR_CACHE_DIR": str(out / f"inductor_cache_{model}_{mode}_{batch}")}
        spent, proc = machine_seconds([sys.executable, "-c", _HARNESS, batch, script, *common, f"--{mode}",
                                       "--output", str(csv_path)], cold)
        seconds += spent
        if proc.returncode != 0 or not csv_path.exists():
            raise RuntimeError(f"the harness's --{mode} run failed: {proc.stderr.strip().splitlines()[-1:]}")
        row = next(csv.DictReader(csv_path.open()))
        found[mode] = row["accuracy"] if mode == "accuracy" else float(row["speedup"])
    return {"speedup": found["performance"], "accuracy": found.get("accuracy"), "machine_s": seconds}


def ours(model: str, batch_size: int, out: Path, env: dict[str, str], extra: list[str]) -> dict[str, object]:
    spent, proc = machine_seconds(
        [sys.executable, "-m", "experiment_runner", "--suite-name=timm", f"--filter=^{model}$", "--accelerator=cpu",
         "--dynamo=None", "--dynamo=inductor", "--test=eval", "--precision=fp32", f"--batch-size={batch_size}",
         "--speedup=paired", "--verify", "--no-progress-bar", f"--output-dirname={out / ('ours_' + model)}", *extra], env)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"experiment_runner failed: {proc.stderr.strip().splitlines()[-1:]}")
    records = [json.loads(line) for line in (out / ("ours_" + model) / "results.jsonl").read_text().splitlines()]
    compiled = next(r for r in records if r["experiment"]["dynamo"] == "inductor")
    eager = next(r for r in records if r["experiment"]["dynamo"] is None)
    isolated = eager["stats"]["per_iter_time"]["median"] / compiled["stats"]["per_iter_time"]["median"]
    paired = compiled["measurements"]["paired"]
    of_medians = statistics.median(paired["baseline_per_iter_time"]) / statistics.median(paired["compiled_per_iter_time"])
    return {"speedup": paired["speedup"], "of_medians": of_medians, "isolated": isolated,
            "accuracy": compiled["verification_code"], "machine_s": spent,
            "timings": {r["experiment"]["dynamo"]: r["timings"] for r in records}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--harness", type=Path, required=True, help="the dynamobench (or benchmarks/dynamo) folder")
    parser.add_argument("--model", action="append", required=True, help="timm model names (repeatable)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--same-batch", action="store_true",
                        help="also run the harness's --performance with its eager samples at the nominal batch "
                             "size (its timed() varies them by 0.8-1.2x): the 'harness same batch' column")
    parser.add_argument("--ours-flag", action="append", default=[], help="extra flags for our run (repeatable)")
    parser.add_argument("--keep", type=Path, help="keep both sides' outputs in this folder (default: a temporary one)")
    args = parser.parse_args()
    repo = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    print("| model | harness speedup | harness same batch | ours paired | ours isolated | paired / harness | "
          "harness accuracy | ours verification | harness machine s | ours machine s | ours / harness time |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or scratch
        for model in args.model:
            started = time.time()
            theirs = harness(args.harness, model, args.batch_size, Path(tmp), env)
            same = (harness(args.harness, model, args.batch_size, Path(tmp), env, ("performance",), "same-batch")
                    if args.same_batch else None)
            mine = ours(model, args.batch_size, Path(tmp), env, args.ours_flag)
            print(f"| {model} | {theirs['speedup']:.3f} | {same['speedup'] if same else '-'} | "
                  f"{mine['speedup']:.3f} | {mine['isolated']:.3f} | "
                  f"{mine['speedup'] / theirs['speedup']:.3f} | {theirs['accuracy']} | {mine['accuracy']} | "
                  f"{theirs['machine_s']:.1f} | {mine['machine_s']:.1f} | "
                  f"{mine['machine_s'] / theirs['machine_s']:.2f} |", flush=True)
            print(f"<!-- {model}: {time.time() - started:.0f} s wall; ours: ratio of the pairs' medians "
                  f"{mine['of_medians']:.3f}; timings {json.dumps(mine['timings'])} -->", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
