"""How still is this host? The same fixed work, timed in fresh processes, with no runner involved.

A timing comparison cannot resolve a difference smaller than the host moves on its own. This
script times two fixed workloads that involve neither torch nor this runner: a pure-Python loop
(the interpreter alone: branch prediction, caches, clock speed) and a numpy float32 matmul (BLAS,
memory bandwidth). Each runs in `--processes` fresh interpreters, pinned to one CPU, `--samples`
samples of about `--sample-time` seconds each. It reports, per workload:

- `process_spread`: the slowest process's median over the fastest's (1.0: processes agree);
- `within_process_relative_iqr`: the range over processes of each one's relative IQR, computed
  as a record's `stats` are (core/stats.py), so the two read alike.

On a quiet bare-metal host both stay within a few percent; where `process_spread` exceeds 1.05,
no runner can show a ±5% difference between two processes there (pyperf's advice: tune the host,
or spread samples over many processes and compare their medians, as `--processes` does).

    python benchmarks/host_noise.py [--processes 8] [--samples 10] [--sample-time 0.05]
    python benchmarks/host_noise.py --rows-out docs/benchmarks/data/host_noise/DATE.jsonl   # kept for the page
    python benchmarks/host_noise.py --standing    # the head of docs/benchmarks/host_noise.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import kept_rows
from experiment_runner.core.stats import summarize

WORKLOADS = ("python_loop", "numpy_matmul")
WORKLOAD_NAMES = {"python_loop": "pure-Python loop", "numpy_matmul": "numpy matmul"}
STUDY = "host_noise"


def _python_loop(n: int) -> None:
    total = 0
    for k in range(n):
        total += k


def _workload(name: str) -> Callable[[int], None]:
    if name == "python_loop":
        return _python_loop
    import numpy as np

    a = np.random.default_rng(0).random((128, 128), dtype=np.float32)

    def matmul(n: int) -> None:
        for _ in range(n):
            a @ a

    return matmul


def calibrated_samples(run: Callable[[int], None], samples: int, sample_time: float) -> list[float]:
    """Per-unit times of `samples` samples, each `n` units long, n chosen so a sample lasts
    about `sample_time` (one untimed trial to scale from)."""
    n = 1
    while True:
        start = time.perf_counter()
        run(n)
        elapsed = time.perf_counter() - start
        if elapsed >= sample_time / 10:
            n = max(1, int(n * sample_time / elapsed))
            break
        n *= 10
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        run(n)
        times.append((time.perf_counter() - start) / n)
    return times


def child(samples: int, sample_time: float) -> dict[str, dict[str, float]]:
    out = {}
    for name in WORKLOADS:
        stats = summarize(calibrated_samples(_workload(name), samples, sample_time))  # as a record's stats
        out[name] = {"median_s": stats["median"], "relative_iqr": stats["relative_iqr"]}
    return out


def standing(rows: list[dict] | None = None) -> list[str]:
    """The page's present tense: the newest kept row of each processor, per workload the
    slowest process over the fastest and the largest relative IQR within one process."""
    newest = {row["host"]["cpu"]: row for row in (kept_rows.read(STUDY) if rows is None else rows)}
    lines = kept_rows.table(
        ["host (date, processor, CPUs, load before, commit)", "processes x samples", "work",
         "slowest process / fastest", "largest relative IQR within one process"],
        [[kept_rows.where(row), f"{row['processes']} x {row['samples']} of {1e3 * row['sample_time_s']:.0f} ms",
          WORKLOAD_NAMES[name], f"{row['workloads'][name]['process_spread']:.2f}x",
          f"{max(row['workloads'][name]['within_process_relative_iqr']):.2f}"]
         for row in newest.values() for name in WORKLOADS])
    worst = max(row["workloads"][name]["process_spread"] for row in newest.values() for name in WORKLOADS)
    return lines + ["", f"{len(newest)} processor(s); the host moves by up to {worst:.2f}x between processes "
                        f"on its own, so a difference smaller than that between two processes is not resolved "
                        f"there from one process each."]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--sample-time", type=float, default=0.05, metavar="S")
    parser.add_argument("--cpu", type=int, help="the CPU every process is pinned to (default: the last one allowed)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    kept_rows.add_arguments(parser, STUDY, standing)
    args = parser.parse_args(argv)
    if args.processes < 2 or args.samples < 2:
        parser.error("--processes and --samples must be at least 2")
    if args.child:
        os.sched_setaffinity(0, {args.cpu})
        print(json.dumps(child(args.samples, args.sample_time)))
        return 0
    cpu = args.cpu if args.cpu is not None else max(os.sched_getaffinity(0))
    where = kept_rows.host()
    per_process = []
    for index in range(args.processes):
        proc = subprocess.run([sys.executable, __file__, "--child", f"--samples={args.samples}",
                               f"--sample-time={args.sample_time}", f"--cpu={cpu}"],
                              check=False, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"host_noise: process {index} failed: {proc.stderr.strip()[-500:]}")
        per_process.append(json.loads(proc.stdout))
        print(json.dumps({"process": index, **per_process[-1]}), flush=True)
    summary = {"cpu": cpu, "processes": args.processes, "samples": args.samples}
    for name in WORKLOADS:
        medians = [p[name]["median_s"] for p in per_process]
        iqrs = [p[name]["relative_iqr"] for p in per_process]
        summary[name] = {"process_spread": max(medians) / min(medians),
                         "median_of_medians_s": statistics.median(medians),
                         "within_process_relative_iqr": [min(iqrs), max(iqrs)]}
    print(json.dumps({"summary": summary}, indent=2))
    kept_rows.append(args.rows_out, {"host": where, "processes": args.processes, "samples": args.samples,
                                     "sample_time_s": args.sample_time,
                                     "workloads": {name: summary[name] for name in WORKLOADS}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
