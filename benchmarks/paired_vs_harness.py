"""Our paired speedups beside PyTorch's dynamo harness, on the same models and host.

PyTorch's harness (benchmarks/dynamo in pytorch/pytorch, synced as
userbenchmark/dynamo/dynamobench in pytorch/benchmark) interleaves eager and compiled runs in one
process and reports the ratio of their medians. This script runs it (from a checkout the user
points to) and `experiment_runner --verify` on the same timm models, alternating, and prints:

- the harness's speedup beside ours with `--speedup=harness` (the same method, eager at the
  batches the harness times it at), with both machine times for the same two answers: the
  harness's --accuracy and --performance runs, and our one run of the compiled experiment with
  --verify (the paired speedup needs no eager experiment of its own);
- the harness with its eager batch held at the nominal size (its timed() patched in its own
  process) beside ours with `--speedup=paired`, the same-batch figure, and the isolated speedup
  of that run's eager and compiled experiments.

Nothing is downloaded: the harness's timm models are built with pretrained=False, as ours are,
by patching timm.create_model in the harness's process. Each harness process compiles cold, on
an inductor cache of its own, as each of our experiments does.

    python benchmarks/paired_vs_harness.py --harness PATH/userbenchmark/dynamo/dynamobench \\
        --model mobilenetv3_large_100 --model tf_efficientnet_b0 --rounds 2

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


def ours(model: str, batch_size: int, out: Path, env: dict[str, str], method: str,
         with_eager: bool) -> dict[str, object]:
    """One run of ours. The paired speedup needs no eager experiment of its own (the compiled
    experiment times its baseline); with_eager adds it, for the isolated speedup beside."""
    folder = out / f"ours_{method}_{model}"
    spent, proc = machine_seconds(
        [sys.executable, "-m", "experiment_runner", "--suite-name=timm", f"--filter=^{model}$", "--accelerator=cpu",
         *(["--dynamo=None"] if with_eager else []), "--dynamo=inductor", "--test=eval", "--precision=fp32",
         f"--batch-size={batch_size}", f"--speedup={method}", "--verify", "--no-progress-bar",
         f"--output-dirname={folder}"], env)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"experiment_runner failed: {proc.stderr.strip().splitlines()[-1:]}")
    records = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    compiled = next(r for r in records if r["experiment"]["dynamo"] == "inductor")
    eager = next((r for r in records if r["experiment"]["dynamo"] is None), None)
    isolated = (eager["stats"]["per_iter_time"]["median"] / compiled["stats"]["per_iter_time"]["median"]
                if eager is not None else None)
    return {"speedup": compiled["measurements"]["paired"]["speedup"], "isolated": isolated,
            "accuracy": compiled["verification_code"], "machine_s": spent,
            "timings": {r["experiment"]["dynamo"]: r["timings"] for r in records}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--harness", type=Path, required=True, help="the dynamobench (or benchmarks/dynamo) folder")
    parser.add_argument("--model", action="append", required=True, help="timm model names (repeatable)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1, help="times each model runs, both sides alternating")
    parser.add_argument("--no-same-batch", action="store_true",
                        help="only the harness beside --speedup=harness (no same-batch pair of runs)")
    parser.add_argument("--keep", type=Path, help="keep both sides' outputs in this folder (default: a temporary one)")
    args = parser.parse_args()
    repo = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    print("| round | model | harness | ours harness | ratio | harness, same batch | ours paired | ratio | "
          "ours isolated | harness accuracy | ours verification | harness machine s | ours machine s | "
          "ours / harness time |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows: dict[str, list[dict[str, float]]] = {model: [] for model in args.model}
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(1, args.rounds + 1):
            for model in args.model:
                out = Path(args.keep or scratch) / f"round{round_}"
                out.mkdir(parents=True, exist_ok=True)
                started = time.time()
                theirs = harness(args.harness, model, args.batch_size, out, env)
                mine = ours(model, args.batch_size, out, env, "harness", with_eager=False)
                same = paired = None
                if not args.no_same_batch:
                    same = harness(args.harness, model, args.batch_size, out, env, ("performance",), "same-batch")
                    paired = ours(model, args.batch_size, out, env, "paired", with_eager=True)
                row = {"harness": theirs["speedup"], "ours": mine["speedup"], "harness_s": theirs["machine_s"],
                       "ours_s": mine["machine_s"]}
                if same is not None and paired is not None:
                    row.update(same=same["speedup"], paired=paired["speedup"], isolated=paired["isolated"])
                rows[model].append(row)
                print(f"| {round_} | {model} | {figures(row)} | {theirs['accuracy']} | {mine['accuracy']} | "
                      f"{row['harness_s']:.1f} | {row['ours_s']:.1f} | {row['ours_s'] / row['harness_s']:.2f} |",
                      flush=True)
                print(f"<!-- {model}: {time.time() - started:.0f} s wall; timings of ours (harness) "
                      f"{json.dumps(mine['timings'])} -->", file=sys.stderr)
    for model, found in rows.items():
        median = {key: statistics.median(r[key] for r in found if key in r) for key in found[0]}
        print(f"| median of {len(found)} | {model} | {figures(median)} | | | {median['harness_s']:.1f} | "
              f"{median['ours_s']:.1f} | {median['ours_s'] / median['harness_s']:.2f} |")
    return 0


def figures(row: dict[str, float]) -> str:
    """The speedup columns of one table row (the same-batch ones '-' when not run)."""
    cells = [f"{row['harness']:.3f}", f"{row['ours']:.3f}", f"{row['ours'] / row['harness']:.3f}"]
    if "same" in row:
        cells += [f"{row['same']:.3f}", f"{row['paired']:.3f}", f"{row['paired'] / row['same']:.3f}",
                  f"{row['isolated']:.3f}"]
    else:
        cells += ["-"] * 4
    return " | ".join(cells)


if __name__ == "__main__":
    sys.exit(main())
