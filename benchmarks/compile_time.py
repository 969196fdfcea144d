"""Cold inductor compile of the dummy model: the runner against a bare torch.compile script.

Issue 13 measured the runner's first inductor iteration of the dummy model at 17.5-19.4 s cold and
the reference runner's at 14.4-15.4 s. The reference ran torch 2.9, we run torch 2.13, so this
script compares like with like on one torch: a bare script that does what the reference does
(build the model, `torch.compile(module)`, time the first call, cold cache) against our runner
through the CLI, varying what could make the difference:

- launcher: forkserver (default) or subprocess;
- compile scope: step (default: zero_grad..optimizer step, or the eval step) or model;
- TORCHINDUCTOR_COMPILE_THREADS: inductor's default (min(32, CPUs): a pool of compile worker
  processes, each importing torch) or 1 (compile in the experiment's own process).

With `--reference PATH` (PyTorch/XLA's benchmarks/ folder; run this script in the XLA
environment, whose torch the reference needs) the reference runner itself is a variant: its
first timed repeat of `--repeat=1 --iterations-per-run=1` holds the compile and one iteration,
which is what our `first_iter_time_s` holds, and both see a fresh cache folder.

Every variant runs in fresh processes with a fresh inductor cache folder, alternating round
after round; the load average is printed beside each figure (timings on a busy host are noise:
compare the variants measured in the same round, and re-take the figures on a quiet host).
Inductor's precompiled C++ headers are machine-wide for every variant, as torch keeps them
(experiment_runner/core/compiler_caches.py); the runner's rows say whether they were built
(`precompiled_headers_built`), in which case that compile paid about 4.5 s more on 2 cores.

    python benchmarks/compile_time.py [--rounds 3] [--test eval]
    PJRT_DEVICE=CPU .venv-xla/bin/python benchmarks/compile_time.py --reference /tmp/ref/benchmarks \
        --variant reference --variant "runner forkserver step" --variant bare
    python benchmarks/compile_time.py --rows-out docs/benchmarks/data/compile_time/DATE.jsonl   # kept
    python benchmarks/compile_time.py --standing    # the head of docs/benchmarks/compile_time.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import kept_rows

BARE = r"""
import json, sys, time, resource
t0 = time.perf_counter()
import torch
from benchmark_models import LoadRequest, get_suite
import_s = time.perf_counter() - t0
test = sys.argv[1]
torch.manual_seed(1337)
model = get_suite("dummy").load(LoadRequest(model_name="dummy", test=test, device="cpu",
                                            accelerator="cpu", precision="fp32", batch_size=None))
module = model.module.eval() if test == "eval" else model.module.train()
compiled = torch.compile(module, backend="inductor")
start = time.perf_counter()
if test == "eval":
    with torch.no_grad():
        model.run_forward(compiled, model.args, model.kwargs)
else:
    model.compute_loss(model.run_forward(compiled, model.args, model.kwargs)).backward()
first = time.perf_counter() - start
own = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"first_iter_time_s": first, "import_s": import_s, "cpu_s": own.ru_utime + own.ru_stime}))
"""

STUDY = "compile_time"
# Issue 13's target: the runner's first iteration within this share of the bare script's.
WITHIN_BARE = 0.10
OURS = "runner forkserver step"


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def bare(test: str, workdir: Path, threads: str | None) -> dict[str, Any]:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(Path(tempfile.mkdtemp(dir=workdir)) / "inductor"))
    env.pop("TORCHINDUCTOR_COMPILE_THREADS", None)
    if threads:
        env["TORCHINDUCTOR_COMPILE_THREADS"] = threads
    proc = subprocess.run([sys.executable, "-c", BARE, test], capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"bare script failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.splitlines()[-1])


def runner(test: str, workdir: Path, threads: str | None, launcher: str, scope: str) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(dir=workdir))
    env = dict(os.environ, XDG_CACHE_HOME=str(out / "xdg"))
    env.pop("TORCHINDUCTOR_COMPILE_THREADS", None)
    if threads:
        env["TORCHINDUCTOR_COMPILE_THREADS"] = threads
    proc = subprocess.run(
        [sys.executable, "-m", "experiment_runner", "--suite-name=dummy", "--accelerator=cpu", "--dynamo=inductor",
         f"--test={test}", "--repeat=1", "--iterations-per-run=1", "--warmup-iterations=1",
         f"--launcher={launcher}", f"--compile-scope={scope}", f"--output-dirname={out}"],
        capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"runner failed: {proc.stderr[-2000:]}")
    record = json.loads((out / "results.jsonl").read_text().splitlines()[-1])
    figures = {**record.get("metrics", {}), **record.get("measurements", {})}
    dynamo = figures.get("dynamo_compile") or {}
    return {"first_iter_time_s": figures["first_iter_time_s"], "import_s": record["timings"].get("import_s"),
            "dynamo_entire_frame_compile_time_s": dynamo.get("entire_frame_compile_time_s"),
            "inductor_compile_time_s": dynamo.get("inductor_compile_time_s"),
            "precompiled_headers_built": dynamo.get("precompiled_headers_built")}


def reference(test: str, workdir: Path, script: Path) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(dir=workdir))
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(out / "inductor"), XDG_CACHE_HOME=str(out / "xdg"))
    env.pop("TORCHINDUCTOR_COMPILE_THREADS", None)
    proc = subprocess.run(
        [sys.executable, str(script), "--suite-name=dummy", "--accelerator=cpu", "--xla=None", "--dynamo=inductor",
         f"--test={test}", "--repeat=1", "--iterations-per-run=1", f"--output-dirname={out}"],
        check=False, capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"reference runner failed: {proc.stderr[-2000:]}")
    record = json.loads((out / "results.jsonl").read_text().splitlines()[-1])
    return {"first_iter_time_s": record["metrics"]["total_time"][0]}


VARIANTS: dict[str, dict[str, Any]] = {
    "reference": {"reference": True},
    "bare": {},
    "bare threads=1": {"threads": "1"},
    "runner forkserver step": {"launcher": "forkserver", "scope": "step"},
    "runner forkserver model": {"launcher": "forkserver", "scope": "model"},
    "runner subprocess model": {"launcher": "subprocess", "scope": "model"},
    "runner forkserver step threads=1": {"launcher": "forkserver", "scope": "step", "threads": "1"},
}


def standing(rows: list[dict[str, Any]] | None = None) -> list[str]:
    """The page's present tense: the newest kept row of each test, per variant the first
    iteration's median and range over rounds and its median over the bare script's, then whether
    the runner (OURS) is within WITHIN_BARE of the bare script."""
    newest = {row["test"]: row for row in (kept_rows.read(STUDY) if rows is None else rows)}
    lines: list[str] = []
    for test, row in sorted(newest.items()):
        medians = {name: statistics.median(times) for name, times in row["variants"].items()}
        lines += kept_rows.table(
            [f"variant ({test}, {row['rounds']} rounds; {kept_rows.where(row)})", "first iteration s, median (min-max)",
             "median / the bare script's"],
            [[name, f"{medians[name]:.2f} ({min(times):.2f}-{max(times):.2f})",
              f"{medians[name] / medians['bare'] - 1:+.1%}" if "bare" in medians else "-"]
             for name, times in row["variants"].items()])
        if OURS in medians and "bare" in medians:
            gap = medians[OURS] / medians["bare"] - 1
            lines += ["", f"{test}: the runner ({OURS}) {gap:+.1%} against the bare script (target within "
                          f"{WITHIN_BARE:.0%}: {'met' if gap <= WITHIN_BARE else 'not met'})."]
        lines.append("")
    return lines[:-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--test", choices=("eval", "train"), default="eval")
    parser.add_argument("--variant", action="append", choices=sorted(VARIANTS),
                        help="default: every variant (the reference only with --reference)")
    parser.add_argument("--reference", type=Path, help="PyTorch/XLA's benchmarks/ folder")
    kept_rows.add_arguments(parser, STUDY, standing)
    args = parser.parse_args(argv)
    variants = args.variant or [v for v in VARIANTS if v != "reference" or args.reference]
    if "reference" in variants and (args.reference is None or not (args.reference / "experiment_runner.py").is_file()):
        parser.error("the reference variant needs --reference PATH holding experiment_runner.py")
    firsts: dict[str, list[float]] = {v: [] for v in variants}
    where = kept_rows.host()
    with tempfile.TemporaryDirectory() as tmp:
        for round_index in range(args.rounds):
            order = variants if round_index % 2 == 0 else variants[::-1]
            for name in order:
                spec = VARIANTS[name]
                before = load_average()
                if "reference" in spec:
                    figures = reference(args.test, Path(tmp), args.reference / "experiment_runner.py")
                elif "launcher" in spec:
                    figures = runner(args.test, Path(tmp), spec.get("threads"), spec["launcher"], spec["scope"])
                else:
                    figures = bare(args.test, Path(tmp), spec.get("threads"))
                firsts[name].append(figures["first_iter_time_s"])
                print(json.dumps({"round": round_index, "variant": name, "load_average_before": before,
                                  **figures}), flush=True)
    print(json.dumps({"first_iter_time_s median (min-max)": {
        name: f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" for name, v in firsts.items()}}, indent=2))
    kept_rows.append(args.rows_out, {"host": where, "test": args.test, "rounds": args.rounds, "variants": firsts})
    return 0


if __name__ == "__main__":
    sys.exit(main())
