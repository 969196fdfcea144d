"""Our paired speedups beside PyTorch's dynamo harness, on the same models and host.

PyTorch's harness (benchmarks/dynamo in pytorch/pytorch, synced as
userbenchmark/dynamo/dynamobench in pytorch/benchmark) interleaves eager and compiled runs in one
process and reports the ratio of their medians. This script runs it (from a checkout the user
points to) and `experiment_runner --verify` on the same timm, torchbench and huggingface models, one after
the other (harness first in odd rounds, ours first in even ones), and prints:

- the harness's speedup beside ours with `--speedup=harness` (the same method), with both
  machine times for the same two answers: the harness's --accuracy and --performance runs, and
  our one run of the compiled experiment with --verify (the paired speedup needs no eager
  experiment of its own);
- with --with-paired, ours with `--speedup=paired` beside the same harness figure, and the
  isolated speedup of that run's eager and compiled experiments;
- per model, the geometric mean of ours over the harness's across rounds, with its 95% interval.

--device=cuda compares on a GPU (both sides with their CUDA defaults: TF32 matmuls and inductor's
CUDA graphs); there the machine time is wall seconds, the GPU being held throughout, where on the
CPU it is CPU seconds.

--training compares a training step as the dashboard's training jobs take it: the harness with
`--training --amp`, ours with `--test=train --precision=amp --training-recipe=dynamo_harness` (its
step: cloned inputs, no optimizer off CUDA, its loss), both verified as the harness verifies training.

--dynamic compares the dashboard's dynamic configuration (the harness's --dynamic-shapes
--dynamic-batch-only, ours --compile-options=dynamic), where the harness also times eager at
another batch (experiment_runner/child/paired.py).

Nothing is downloaded. In the harness's process, timm models are built with pretrained=False and
torchvision's builders (torchbench's vision models call them) with weights=None, as ours are, and
the five huggingface configurations the harness reads from the hub are ours, shipped as data.
torchbench models need a pytorch/benchmark checkout (`--torchbench`, the folder holding
`torchbenchmark/` and `utils/`); only its models whose code builds a torchvision model run
without its install step. Each harness process compiles cold, on an inductor cache of its own,
as each of our experiments does.

    python benchmarks/paired_vs_harness.py --harness PATH/userbenchmark/dynamo/dynamobench \\
        --torchbench PATH --model mobilenetv3_large_100 --model torchbench:resnet18 --rounds 2

Take figures on a quiet host (`uptime`): both sides time the same CPU.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from experiment_runner.analysis.stats import geomean

# Runs one of the harness's suite scripts as __main__ with random weights (no download) and with
# torchvision's pure-Python parts loadable beside a CPU torch (benchmark_models.optional). Only the
# suite's own library is imported and patched here, so the harness's process holds what it holds
# run alone. Where HARNESS_BASE_FILE is set, the process's resident set right before the harness
# loads its model is written there: the level its CPU memory columns rise from (harness_columns.py).
_HARNESS = """
import json, os, pathlib, runpy, sys
from benchmark_models.optional import patch_broken_torchvision
patch_broken_torchvision()
script = pathlib.Path(sys.argv[1])
if script.name == "timm_models.py":
    import timm, timm.models
    create = timm.models.create_model
    def offline(*args, **kwargs):
        kwargs["pretrained"] = False
        return create(*args, **kwargs)
    timm.models.create_model = offline
    timm.create_model = offline
if script.name == "torchbench.py":
    import torchvision.models
    def weightless(build):
        def built(*args, weights=None, pretrained=None, **kwargs):
            return build(*args, weights=None, **kwargs)
        return built
    for name in torchvision.models.list_models(module=torchvision.models):
        setattr(torchvision.models, name, weightless(getattr(torchvision.models, name)))
if script.name == "huggingface.py":  # it reads five configurations from the hub: ours ship as data
    import transformers
    import benchmark_models
    data = pathlib.Path(benchmark_models.__file__).parent / "data" / "huggingface.json"
    hub = json.loads(data.read_text())["hub_configs"]
    def shipped(name, *args, **kwargs):
        return transformers.AutoConfig.for_model(hub[name]["model_type"], **hub[name]["values"])
    transformers.AutoConfig.from_pretrained = shipped
sys.argv = sys.argv[1:]
sys.path.insert(0, str(script.parent))
base_file = os.environ.get("HARNESS_BASE_FILE")
if base_file:
    import common, psutil
    harness_main = common.main
    def main(runner, *args, **kwargs):
        load = runner.load_model
        written = []
        def load_model(*load_args, **load_kwargs):
            if not written:  # the first load: this process's, whatever an earlier run left in the file
                pathlib.Path(base_file).write_text(json.dumps({"base_memory_bytes": psutil.Process().memory_info().rss}))
                written.append(True)
            return load(*load_args, **load_kwargs)
        runner.load_model = load_model
        return harness_main(runner, *args, **kwargs)
    common.main = main
runpy.run_path(str(script), run_name="__main__")
"""

# The harness's script for each suite this script compares.
_SCRIPTS = {"timm": "timm_models.py", "torchbench": "torchbench.py", "huggingface": "huggingface.py"}


def machine_seconds(command: list[str], env: dict[str, str], device: str) -> tuple[float, subprocess.CompletedProcess]:
    """What the command costs the machine: on the CPU its CPU seconds (user + system, with
    everything it waited for); on a GPU its wall seconds, for which the GPU is held."""
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - started
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return (wall if device == "cuda" else cpu), proc


@dataclass(frozen=True)
class Model:
    """One model to compare: `SUITE:NAME`, or a bare timm NAME."""

    suite: str
    name: str

    @classmethod
    def parse(cls, text: str) -> Model:
        suite, _, name = text.rpartition(":")
        if (suite or "timm") not in _SCRIPTS or not name:
            raise argparse.ArgumentTypeError(f"{text!r}: expected NAME or SUITE:NAME, SUITE one of {sorted(_SCRIPTS)}")
        return cls(suite or "timm", name)

    def __str__(self) -> str:
        return self.name if self.suite == "timm" else f"{self.suite}:{self.name}"


# What each side runs for the test compared: the harness's flags, ours.
_TESTS = {"eval": (("--float32", "--inference"), ("--test=eval", "--precision=fp32")),
          "train": (("--amp", "--training"), ("--test=train", "--precision=amp", "--training-recipe=dynamo_harness"))}


def harness(path: Path, model: Model, test: str, device: str, batch_size: int, dynamic: bool, out: Path,
            env: dict[str, str]) -> dict[str, object]:
    """The harness's answers for one model: its --accuracy run, then its --performance run."""
    # On the CPU, --disable-cudagraphs, as the dashboard's CPU performance rows run it (test.sh's
    # test_perf_for_dashboard, "inductor_no_cudagraphs"): without it the harness compiles a CPU graph
    # with triton.cudagraphs=True, which reorders its kernels (docs/benchmarks/paired_vs_harness.md).
    # On CUDA both sides use CUDA graphs.
    common = ["--inductor", "--device", device, *_TESTS[test][0], "--only", model.name,
              "--batch-size", str(batch_size), *(["--dynamic-shapes", "--dynamic-batch-only"] if dynamic else []),
              *(["--disable-cudagraphs"] if device == "cpu" else [])]
    script = str(path / _SCRIPTS[model.suite])
    seconds = 0.0
    found: dict[str, object] = {}
    for mode in ("accuracy", "performance"):
        csv_path = out / f"harness_{model.suite}_{model.name}_{mode}.csv"
        # Each harness process compiles cold, as each of ours does (core/compiler_caches.py), and
        # as the dashboard's accuracy and performance jobs do on their own machines.
        cold = {**env, "TORCHINDUCTOR_CACHE_DIR": str(out / f"inductor_cache_{model.suite}_{model.name}_{mode}"),
                "HARNESS_BASE_FILE": str(out / f"harness_{model.suite}_{model.name}_{mode}_base.json")}
        spent, proc = machine_seconds([sys.executable, "-c", _HARNESS, script, *common, f"--{mode}",
                                       "--output", str(csv_path)], cold, device)
        seconds += spent
        if proc.returncode != 0 or not csv_path.exists():
            raise RuntimeError(f"the harness's --{mode} run failed: {proc.stderr.strip().splitlines()[-1:]}")
        row = next(csv.DictReader(csv_path.open()))
        found[mode] = row["accuracy"] if mode == "accuracy" else float(row["speedup"])
        if mode == "performance":  # abs_latency is its compiled median in ms; eager is that times the speedup
            found["latency_ms"] = {"eager": float(row["abs_latency"]) * float(row["speedup"]),
                                   "compiled": float(row["abs_latency"])}
    return {"speedup": found["performance"], "accuracy": found["accuracy"], "machine_s": seconds,
            "latency_ms": found["latency_ms"]}


def ours(model: Model, test: str, device: str, batch_size: int, dynamic: bool, out: Path, env: dict[str, str],
         method: str,
         with_eager: bool, adaptive: tuple[str, ...] = ()) -> dict[str, object]:
    """One run of ours. The paired speedup needs no eager experiment of its own (the compiled
    experiment times its baseline); with_eager adds it, for the isolated speedup beside."""
    folder = out / f"ours_{method}_{model.suite}_{model.name}"
    spent, proc = machine_seconds(
        [sys.executable, "-m", "experiment_runner", f"--suite-name={model.suite}", f"--filter=^{model.name}$",
         f"--accelerator={device}", *(["--dynamo=None"] if with_eager else []), "--dynamo=inductor",
         *_TESTS[test][1], f"--batch-size={batch_size}", f"--speedup={method}", "--verify", "--no-progress-bar",
         *(["--compile-options=dynamic"] if dynamic else []),
         # the isolated speedup beside needs the compiled experiment's own isolated samples
         *(["--isolated-samples"] if with_eager else []), *adaptive,
         f"--output-dirname={folder}"], env, device)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"experiment_runner failed: {proc.stderr.strip().splitlines()[-1:]}")
    records = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    compiled = next(r for r in records if r["experiment"]["dynamo"] == "inductor")
    eager = next((r for r in records if r["experiment"]["dynamo"] is None), None)
    isolated = (eager["stats"]["per_iter_time"]["median"] / compiled["stats"]["per_iter_time"]["median"]
                if eager is not None else None)
    paired = compiled["measurements"]["paired"]
    latency_ms = {side: 1e3 * statistics.median(paired[f"{key}_per_iter_time"])
                  for side, key in (("eager", "baseline"), ("compiled", "compiled"))}
    return {"speedup": paired["speedup"], "isolated": isolated, "latency_ms": latency_ms,
            "pairs": paired["pairs"], "stop_reason": paired["stop_reason"],
            "accuracy": compiled["verification_code"], "machine_s": spent,
            "timings": {r["experiment"]["dynamo"]: r["timings"] for r in records}}


# The study the head of docs/benchmarks/paired_vs_harness.md is written from (--standing): each
# model-round's row as --rows-out wrote it.
KEPT = Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "data" / "paired_vs_harness"
# What the head checks each model against: its speedup within this share of the harness's, and
# ours' machine time at most these shares of the harness's (geomean over models; any one model).
SPEEDUP_WITHIN = 0.05
TIME_GEOMEAN, TIME_MODEL = 0.5, 0.6


def kept_rows(paths: list[Path] | None) -> list[dict]:
    """The rows of PATHS (JSON lines of --rows-out), by default every file under KEPT."""
    return [json.loads(line) for path in paths or sorted(KEPT.glob("*.jsonl"))
            for line in path.read_text().splitlines() if line.strip()]


def standing(paths: list[Path] | None = None) -> list[str]:
    """The page's present tense, from kept rows (JSON lines of --rows-out): per model and test, the
    verdicts, ours' speedup over the harness's and ours' machine time over the harness's (geomean
    over rounds), then the study's totals against SPEEDUP_WITHIN, TIME_GEOMEAN and TIME_MODEL;
    by default the rows kept under KEPT."""
    rows = kept_rows(paths)
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["model"], row["test"]), []).append(row)
    out = ["| model | test | batch | rounds | verdicts (harness / ours) | ours' speedup / harness's | "
           "ours' machine time / harness's | pairs (ours) |", "|---|---|---|---|---|---|---|---|"]
    times: list[float] = []
    verdicts_equal = within = 0
    for (model, test), found in sorted(groups.items()):
        same = all((r["harness"]["accuracy"] == "pass") == (r["ours"]["accuracy"] == "PASS") for r in found)
        verdicts_equal += same
        speed = geomean([r["ours"]["speedup"] / r["harness"]["speedup"] for r in found])
        within += abs(speed - 1) <= SPEEDUP_WITHIN
        time = geomean([r["ours"]["machine_s"] / r["harness"]["machine_s"] for r in found])
        times.append(time)
        seen = sorted({f"{r['harness']['accuracy']} / {r['ours']['accuracy']}" for r in found})
        pairs = ", ".join(str(r["ours"]["pairs"]) for r in found)
        out.append(f"| {model} | {test} | {found[0]['batch_size']} | {len(found)} | {'; '.join(seen)} | "
                   f"{speed:.3f} | {time:.2f} | {pairs} |")
    total = geomean(times)
    out += ["", f"{len(groups)} model-tests, {len(rows)} model-rounds: verdicts equal in {verdicts_equal}; ours' "
            f"speedup within {SPEEDUP_WITHIN:.0%} of the harness's in {within}; ours' machine time "
            f"{total:.2f} of the harness's in geomean (target at most {TIME_GEOMEAN}: "
            f"{'met' if total <= TIME_GEOMEAN else 'not met'}), at most {max(times):.2f} for one model "
            f"(target at most {TIME_MODEL}: {'met' if max(times) <= TIME_MODEL else 'not met'})."]
    return out


# The phases of ours' child a row's timings name, in the order --phases prints them: the timed
# step's compile, the verification's compiled run (in training a second compile, under the
# harness's accuracy settings), the pairs, and the harness's graph-break replay.
PHASES = (("compile", "compile_s"), ("verification's compiled run", "verify_compiled_s"), ("pairs", "pairs_s"),
          ("graph-break replay", "harness_graph_breaks_s"))


def floor_share(row: dict) -> float:
    """The share of ours' machine time that would be left with nothing cut that makes an answer:
    the pairs down to the rule's minimum (--min-pairs) and no graph-break replay. Phases are wall
    time in the child; the share assumes each phase's CPU time is in proportion to its wall time."""
    from experiment_runner.core.options import DEFAULT_MIN_PAIRS

    timings = next(iter(row["ours"]["timings"].values()))
    spare = timings["pairs_s"] * (1 - DEFAULT_MIN_PAIRS / max(row["ours"]["pairs"], DEFAULT_MIN_PAIRS))
    return 1 - (spare + timings.get("harness_graph_breaks_s", 0.0)) / timings["child_s"]


def phases(paths: list[Path] | None = None) -> list[str]:
    """Where ours' machine time goes, per model and test (mean shares of the child's wall time over
    rounds), and the floor: ours' machine time over the harness's if every row stopped at the pair
    rule's minimum and skipped the graph-break replay (floor_share), geomean over rounds."""
    rows = kept_rows(paths)
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["model"], row["test"]), []).append(row)
    out = ["| model | test | " + " | ".join(name for name, _ in PHASES) + " | other | machine time / harness's "
           "| floor |", "|---|---|" + "---|" * (len(PHASES) + 3)]
    floors = []
    for (model, test), found in sorted(groups.items()):
        children = [next(iter(r["ours"]["timings"].values())) for r in found]
        shares = [statistics.mean(t.get(key, 0.0) / t["child_s"] for t in children) for _, key in PHASES]
        ratio = geomean([r["ours"]["machine_s"] / r["harness"]["machine_s"] for r in found])
        floor = geomean([r["ours"]["machine_s"] / r["harness"]["machine_s"] * floor_share(r) for r in found])
        floors.append(floor)
        out.append(f"| {model} | {test} | " + " | ".join(f"{share:.0%}" for share in shares) +
                   f" | {1 - sum(shares):.0%} | {ratio:.2f} | {floor:.2f} |")
    out += ["", f"Floor over {len(groups)} model-tests: {geomean(floors):.2f} in geomean, {min(floors):.2f} to "
            f"{max(floors):.2f} per model (targets {TIME_GEOMEAN} and {TIME_MODEL})."]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--harness", type=Path, help="the dynamobench (or benchmarks/dynamo) folder")
    parser.add_argument("--model", action="append", type=Model.parse,
                        help="SUITE:NAME (timm, torchbench or huggingface), or a timm NAME; repeatable")
    parser.add_argument("--torchbench", type=Path,
                        help="a pytorch/benchmark checkout (torchbenchmark/ and utils/), for torchbench models")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where both sides run")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--dynamic", action="store_true", help="the dashboard's dynamic configuration on both sides")
    parser.add_argument("--training", action="store_true",
                        help="a training step on both sides (the harness's --training --amp), not inference")
    parser.add_argument("--rounds", type=int, default=1, help="times each model runs on both sides")
    parser.add_argument("--first-round", type=int, default=1,
                        help="the number of the first round, for a run taken in pieces: round N runs the "
                             "harness first where N is odd, as one run would")
    parser.add_argument("--with-paired", action="store_true",
                        help="also run ours with --speedup=paired and an eager experiment (paired and isolated)")
    parser.add_argument("--adaptive-pairs", action="store_true",
                        help="ours times pairs until the ratio's interval is narrow enough (--adaptive-pairs), "
                             "not the harness's fixed 30: the machine time a night would spend")
    parser.add_argument("--pairs-half-width", type=float,
                        help="with --adaptive-pairs: ours' --pairs-half-width (default: the runner's)")
    parser.add_argument("--max-pairs", type=int,
                        help="with --adaptive-pairs: ours' --max-pairs (default: the runner's)")
    parser.add_argument("--dashboard-rule", action="store_true",
                        help="ours times pairs as a --dashboard run does by default (--adaptive-pairs with its "
                             "--pairs-half-width and at most the harness's 30 pairs)")
    parser.add_argument("--keep", type=Path, help="keep both sides' outputs in this folder (default: a temporary one)")
    parser.add_argument("--rows-out", type=Path,
                        help="append each model-round's figures to this file as a JSON line (what --standing reads)")
    parser.add_argument("--standing", type=Path, nargs="*",
                        help="print the page's head from kept rows (default: every file under "
                             "docs/benchmarks/data/paired_vs_harness) and run nothing")
    parser.add_argument("--phases", type=Path, nargs="*",
                        help="print where ours' machine time goes and the floor the answers allow, from kept "
                             "rows (default: as --standing), and run nothing")
    args = parser.parse_args()
    for view, print_view in ((args.standing, standing), (args.phases, phases)):
        if view is not None:
            print("\n".join(print_view(view)))
            return 0
    if args.harness is None or not args.model:
        parser.error("--harness and --model are required (except with --standing or --phases)")
    if args.dashboard_rule:
        from experiment_runner.core import dashboards

        args.adaptive_pairs, args.pairs_half_width = True, dashboards.PAIRS_HALF_WIDTH
        args.max_pairs = dashboards.HARNESS_PAIRS
    if not args.adaptive_pairs and (args.pairs_half_width is not None or args.max_pairs is not None):
        parser.error("--pairs-half-width and --max-pairs need --adaptive-pairs")
    adaptive = (("--adaptive-pairs",) if args.adaptive_pairs else ()) + tuple(
        f"--{flag}={value}" for flag, value in (("pairs-half-width", args.pairs_half_width),
                                                ("max-pairs", args.max_pairs)) if value is not None)
    if args.first_round < 1:
        parser.error("--first-round must be 1 or more")
    if args.torchbench is None and any(model.suite == "torchbench" for model in args.model):
        parser.error("torchbench models need --torchbench, a pytorch/benchmark checkout")
    needed = {_SCRIPTS[model.suite] for model in args.model} | {"common.py"}
    missing = sorted(needed - {path.name for path in args.harness.glob("*.py")})
    if missing:
        parser.error(f"--harness {args.harness}: no {', '.join(missing)} there (a dynamobench or benchmarks/dynamo folder)")
    repo = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    # Only the harness sees the checkout: with torchbenchmark importable, our torchbench suite
    # runs the checkout's own models, which download their weights.
    theirs_env = {**env, "PYTHONPATH": os.pathsep.join([env["PYTHONPATH"], str(args.torchbench.resolve())])
                  } if args.torchbench else env
    print("| round | model | harness | ours harness | ratio | ours paired | ratio | ours isolated | "
          "harness accuracy | ours verification | harness machine s | ours machine s | ours / harness time |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows: dict[Model, list[dict[str, float]]] = {model: [] for model in args.model}
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.first_round, args.first_round + args.rounds):
            for model in args.model:
                out = Path(args.keep or scratch) / f"round{round_}"
                out.mkdir(parents=True, exist_ok=True)
                started = time.time()
                where = (model, "train" if args.training else "eval", args.device, args.batch_size, args.dynamic, out)
                runs = {"theirs": partial(harness, args.harness, *where, theirs_env),
                        "mine": partial(ours, *where, env, "harness", False, adaptive)}
                if args.with_paired:
                    runs["paired"] = partial(ours, *where, env, "paired", True)
                # Odd rounds run the harness first, even rounds ours: whatever the order does to the
                # runs that come later (a host warmed or tired by the first) falls on both sides alike.
                order = list(runs) if round_ % 2 else list(runs)[::-1]
                try:
                    answers = {name: runs[name]() for name in order}
                except RuntimeError as exc:  # the rounds before it are printed and kept
                    print(f"paired_vs_harness.py: {model}, round {round_}: {exc}", file=sys.stderr)
                    return 1
                theirs, mine = answers["theirs"], answers["mine"]
                row = {"harness": theirs["speedup"], "ours": mine["speedup"], "harness_s": theirs["machine_s"],
                       "ours_s": mine["machine_s"]}
                if "paired" in answers:
                    row.update(paired=answers["paired"]["speedup"], isolated=answers["paired"]["isolated"])
                rows[model].append(row)
                if args.rows_out is not None:
                    with args.rows_out.open("a") as kept:
                        kept.write(json.dumps({
                            "round": round_, "model": str(model), "test": "train" if args.training else "eval",
                            "batch_size": args.batch_size, "device": args.device, "ours_flags": list(adaptive),
                            "harness": {key: theirs[key] for key in ("speedup", "accuracy", "machine_s", "latency_ms")},
                            "ours": {key: mine[key] for key in ("speedup", "accuracy", "machine_s", "latency_ms",
                                                                 "pairs", "stop_reason", "timings")},
                            "finished_at": time.time()}) + "\n")
                print(f"| {round_} | {model} | {figures(row)} | {theirs['accuracy']} | {mine['accuracy']} | "
                      f"{row['harness_s']:.1f} | {row['ours_s']:.1f} | {row['ours_s'] / row['harness_s']:.2f} |",
                      flush=True)
                print(f"<!-- {model}: {time.time() - started:.0f} s wall; ours timed {mine['pairs']} pairs "
                      f"({mine['stop_reason']}); median ms eager/compiled: harness "
                      f"{theirs['latency_ms']['eager']:.1f}/{theirs['latency_ms']['compiled']:.1f}, ours "
                      f"{mine['latency_ms']['eager']:.1f}/{mine['latency_ms']['compiled']:.1f}; "
                      f"timings of ours (harness) "
                      f"{json.dumps(mine['timings'])} -->", file=sys.stderr)
    for model, found in rows.items():
        median = {key: statistics.median(r[key] for r in found) for key in found[0]}
        print(f"| median of {len(found)} | {model} | {figures(median)} | | | {median['harness_s']:.1f} | "
              f"{median['ours_s']:.1f} | {median['ours_s'] / median['harness_s']:.2f} |")
    print()
    print("| model | rounds | ours harness / harness: geomean [95% interval] |")
    print("|---|---|---|")
    for model, found in rows.items():
        print(f"| {model} | {len(found)} | {ratio_interval([r['ours'] / r['harness'] for r in found])} |")
    times = [r["ours_s"] / r["harness_s"] for found in rows.values() for r in found]
    print(f"\nOurs over the harness's machine time, geomean of {len(times)} model-rounds: {geomean(times):.2f}")
    return 0


def ratio_interval(ratios: list[float]) -> str:
    """The geometric mean of per-round ratios with Student's 95% interval on their logarithms:
    each round is one independent draw of both tools' process-to-process noise."""
    logs = [math.log(r) for r in ratios]
    center = statistics.fmean(logs)
    if len(logs) < 2:
        return f"{math.exp(center):.3f}"
    from scipy.stats import t

    half = t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return f"{math.exp(center):.3f} [{math.exp(center - half):.3f}, {math.exp(center + half):.3f}]"


def figures(row: dict[str, float]) -> str:
    """The speedup columns of one table row (the paired ones '-' when not run)."""
    cells = [f"{row['harness']:.3f}", f"{row['ours']:.3f}", f"{row['ours'] / row['harness']:.3f}"]
    if "paired" in row:
        cells += [f"{row['paired']:.3f}", f"{row['paired'] / row['harness']:.3f}", f"{row['isolated']:.3f}"]
    else:
        cells += ["-"] * 3
    return " | ".join(cells)


if __name__ == "__main__":
    sys.exit(main())
