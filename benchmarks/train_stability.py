"""Does training stay put? Train every model for N steps with the recipe a timed run uses.

Each model trains in a fresh process (eager, fp32, CPU, the suite's CPU batch size) with
the harness's own training step, so the loss and optimizer are exactly what
`experiment_runner --test=train` times; the timing loop additionally rewinds to the same
state before every timed repeat, which this script deliberately does not, to show the
recipe itself keeps values finite over many more steps than a timed run takes.

    python benchmarks/train_stability.py                        # every model of every suite
    python benchmarks/train_stability.py --suite torchbench --suite dummy --steps 100
    python benchmarks/train_stability.py --markdown             # the table of docs/benchmarks/train_stability.md
    python benchmarks/train_stability.py --suite huggingface --budget 120 --markdown  # at most ~2 min each
    python benchmarks/train_stability.py --suite huggingface --filter '^[A-D]'        # a piece of a long suite
    python benchmarks/train_stability.py --standing             # the head of docs/benchmarks/train_stability.md

With --rows-out FILE a run keeps one row (its settings and every model's figures); --standing
prints, per suite, each model's newest result (a whole run replaces the suite's, a --filter piece
adds to it): the count of models that stayed finite and those that diverged.

Per model: seconds per step, the steps N that ran (fewer than --steps only under --budget), the
loss at step 1, 10 and N; whether any parameter became non-finite; how
much the parameters grew (norm of all parameters at step N over step 0, and the largest
per-tensor ratio among tensors that did not start at zero). `diverged` is any non-finite
value or a growth above 100x. `first subnormal` is the first step after which a parameter,
gradient or optimizer-state value is subnormal (nonzero, below float's smallest normal): the
values --flush-denormal would flush. A timed run covers the steps from the rewound state up to
warm-up plus one sample's iterations, so a model whose first subnormal comes later than that
times no subnormal arithmetic, whatever the denormal mode.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kept_rows

STUDY = "train_stability"
SUITES = ("dummy", "torchbench", "huggingface", "timm")
GROWTH_LIMIT = 100.0


def subnormal_count(tensors: list[Any]) -> int:
    """Nonzero floating-point values below their dtype's smallest normal number."""
    import torch

    count = 0
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            values = t.coalesce().values() if t.is_sparse else t  # dlrm's embeddings have sparse gradients
            count += int(((values != 0) & (values.abs() < torch.finfo(t.dtype).tiny)).sum())
    return count


def train_one(suite: str, model: str, steps: int, budget_s: float | None = None) -> dict[str, Any]:
    """In this process: build the experiment's train step and run it `steps` times, or fewer
    when the steps so far took more than `budget_s` seconds (the row says how many ran)."""
    import torch

    from experiment_runner.child.devices import DeviceRuntime
    from experiment_runner.child.driver import ExperimentDriver
    from experiment_runner.core.matrix import Experiment, ExperimentConfig
    from experiment_runner.core.options import RunOptions

    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo=None, test="train",
                              precision="fp32")
    driver = ExperimentDriver(Experiment(suite, model, config), RunOptions(), DeviceRuntime(config), Path("."))
    loaded = driver.load()
    start = [p.detach().clone() for p in loaded.module.parameters()]
    step = driver.make_step(loaded)
    losses: dict[int, float] = {}
    first_nonfinite = first_subnormal = None
    optimizer = loaded.training_state.optimizer
    started = time.perf_counter()
    done = 0
    for index in range(1, steps + 1):
        value = float(step().detach().float())
        done = index
        if first_nonfinite is None and not math.isfinite(value):
            first_nonfinite = index
        if first_subnormal is None:
            params = list(loaded.module.parameters())
            state = [v for per_param in optimizer.state.values() for v in per_param.values()]
            if subnormal_count(params + [p.grad for p in params] + state):
                first_subnormal = index
        if index in (1, 10):
            losses[index] = value
        if budget_s is not None and time.perf_counter() - started > budget_s:
            break
    losses[done] = value
    seconds = time.perf_counter() - started
    end = [p.detach() for p in loaded.module.parameters()]
    finite = all(bool(torch.isfinite(p).all()) for p in end)
    norm0 = math.sqrt(sum(float(p.double().pow(2).sum()) for p in start))
    norm1 = math.sqrt(sum(float(p.double().pow(2).sum()) for p in end))
    ratios = [float(e.double().norm() / s.double().norm()) for s, e in zip(start, end)
              if float(s.double().pow(2).mean().sqrt()) > 1e-3]
    growth = norm1 / norm0 if norm0 > 0 else math.inf
    return {
        "suite": suite, "model": model, "batch_size": loaded.batch_size, "steps": done,
        "loss": loaded.recipe.loss if loaded.loss is None else "model_own",
        "optimizer": loaded.recipe.optimizer_spec,
        "loss_at": {str(k): v for k, v in losses.items()}, "first_nonfinite_step": first_nonfinite,
        "first_subnormal_step": first_subnormal,
        "finite": finite and all(math.isfinite(v) for v in losses.values()),
        "norm_growth": growth, "max_tensor_growth": max(ratios, default=None),
        "diverged": not finite or not all(math.isfinite(v) for v in losses.values()) or growth > GROWTH_LIMIT,
        "seconds_per_step": seconds / done,
    }


def models_of(suite: str) -> list[str]:
    from benchmark_models.registry import get_suite

    return get_suite(suite).model_names()


def pattern(text: str) -> re.Pattern[str]:
    """--filter's regular expression, or argparse's one line where it is not one."""
    try:
        return re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression: {exc}") from exc


def run_all(models: dict[str, list[str]], steps: int, timeout_s: float, budget_s: float | None) -> list[dict[str, Any]]:
    """Train each suite's `models`, each in a fresh process."""
    rows = []
    budget = ["--budget", str(budget_s)] if budget_s is not None else []
    for suite, names in models.items():
        for model in names:
            try:
                proc = subprocess.run([sys.executable, __file__, "--one", suite, model, "--steps", str(steps), *budget],
                                      check=False, capture_output=True, text=True, timeout=timeout_s)
            except subprocess.TimeoutExpired:
                rows.append({"suite": suite, "model": model, "error": f"no result within --timeout={timeout_s:g}s",
                             "diverged": None})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
                continue
            if proc.returncode != 0:
                tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
                if proc.returncode < 0:  # a signal leaves no traceback: say which (SIGKILL: most often the OOM killer)
                    tail = f"killed by {signal.Signals(-proc.returncode).name}; {tail}"
                rows.append({"suite": suite, "model": model, "error": tail[:200], "diverged": None})
            else:
                rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def _g(value: float | None) -> str:
    return "" if value is None else f"{value:.3g}"


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| suite | model | bs | loss | optimizer | s/step | N | loss@1 | loss@10 | loss@N | finite | norm growth | "
             "max tensor growth | diverged | first non-finite loss | first subnormal |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['suite']} | {r['model']} | | | | | | | | | | | | error: {r['error']} | | |")
            continue
        at = r["loss_at"]
        lines.append(f"| {r['suite']} | {r['model']} | {r['batch_size']} | {r['loss']} | {r['optimizer']} | "
                     f"{_g(r['seconds_per_step'])} | {r['steps']} | {_g(at.get('1'))} | {_g(at.get('10'))} | {_g(at.get(str(r['steps'])))} | "
                     f"{'yes' if r['finite'] else 'NO'} | {_g(r['norm_growth'])} | {_g(r['max_tensor_growth'])} | "
                     f"{'YES' if r['diverged'] else 'no'} | {r['first_nonfinite_step'] or ''} | "
                     f"{r['first_subnormal_step'] or ('none' if 'first_subnormal_step' in r else '')} |")
    return "\n".join(lines)


def standing(rows: list[dict[str, Any]] | None = None) -> list[str]:
    """The page's present tense: per suite, each model's newest kept result, how many stayed
    finite, which diverged (at which step), which failed to train, and how many reached a subnormal
    value. A run of the whole suite replaces what came before it; a --filter run (a piece) adds its
    models to it, so a suite too long for one sitting is taken in pieces."""
    newest: dict[str, dict[str, tuple[dict[str, Any], dict[str, Any]]]] = {}
    sizes: dict[str, int] = {}
    kept = kept_rows.read(STUDY) if rows is None else rows
    for row in kept:
        for suite in row["suites"]:
            if row.get("filter") is None:
                newest[suite] = {}
            for m in row["models"]:
                if m["suite"] == suite:
                    newest.setdefault(suite, {})[m["model"]] = (row, m)
            sizes[suite] = row.get("suite_sizes", {}).get(suite, len(newest[suite]))
    cells = []
    for suite in SUITES:
        if suite not in newest:
            cells.append([suite, "-", "-", "-", "-", "-", "-", "no row kept: the dated table below"])
            continue
        models = [m for _, m in newest[suite].values()]
        contributing = {id(row) for row, _ in newest[suite].values()}
        taken = [row for row in kept if id(row) in contributing]  # oldest first, as kept
        trained = [m for m in models if "error" not in m]
        diverged = [f"{m['model']} (step {m['first_nonfinite_step']})" if m["first_nonfinite_step"] else m["model"]
                    for m in trained if m["diverged"]]
        steps = "; ".join(sorted({f"{row['steps']}" + (f", at most {row['budget_s']:g} s each"
                                                       if row["budget_s"] is not None else "") for row in taken}))
        count = str(len(models)) + (f" of {sizes[suite]}" if len(models) < sizes[suite] else "")
        pieces = f" (and {len(taken) - 1} earlier piece(s))" if len(taken) > 1 else ""
        cells.append([suite, count, steps, str(sum(m["finite"] for m in trained)),
                      ", ".join(diverged) or "none",
                      "; ".join(f"{m['model']}: {m['error'][:60]}" for m in models if "error" in m) or "none",
                      str(sum(m["first_subnormal_step"] is not None for m in trained)),
                      kept_rows.where(taken[-1]) + pieces])
    return kept_rows.table(["suite", "models", "steps", "stayed finite", "diverged (first non-finite loss)",
                            "did not train", "reached a subnormal", "taken"], cells)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", action="append", choices=SUITES, help="suites to train (default: all)")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per model, building it included")
    parser.add_argument("--budget", type=float,
                        help="stop a model's training after the step that passes this many seconds (N says "
                             "how many steps ran): for models whose 100 steps take hours on a small host")
    parser.add_argument("--filter", type=pattern, metavar="REGEX",
                        help="only the models whose name this matches (re.search): a piece of a suite too long "
                             "for one sitting; the head adds a piece's models to the suite's earlier results")
    parser.add_argument("--markdown", action="store_true",
                        help="print the table of docs/benchmarks/train_stability.md instead of JSON")
    parser.add_argument("--one", nargs=2, metavar=("SUITE", "MODEL"), help=argparse.SUPPRESS)
    kept_rows.add_arguments(parser, STUDY, standing)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(train_one(*args.one, args.steps, args.budget)))
        return 0
    suites = args.suite or list(SUITES)
    every = {suite: models_of(suite) for suite in suites}
    chosen = {suite: [m for m in names if args.filter is None or args.filter.search(m)] for suite, names in every.items()}
    if not any(chosen.values()):
        parser.error(f"--filter {args.filter.pattern!r} matches no model of {', '.join(suites)}")
    where = kept_rows.host()
    rows = run_all(chosen, args.steps, args.timeout, args.budget)
    kept_rows.append(args.rows_out, {"host": where, "suites": suites, "steps": args.steps, "budget_s": args.budget,
                                     "filter": args.filter.pattern if args.filter else None,
                                     "suite_sizes": {suite: len(names) for suite, names in every.items()},
                                     "models": rows})
    print(markdown(rows) if args.markdown else json.dumps(rows, indent=2))
    return 1 if any(r.get("diverged") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
