"""The runner's own overhead per experiment: what a run costs beyond the work its children do.

Runs a matrix of quick experiments (default: the dummy suite, eager, eval and train,
--repeat=1) several times per launcher, each as a real `python -m experiment_runner` in a
fresh output folder, and reports min/median/max over the runs of

    overhead per experiment = (wall time of the whole command - sum of timings.work_s) / experiments

split into its two parts: start-up paid once per run (interpreter, planning, the fork
server's imports; spread over the experiments) and the cost of each experiment's process
(record.timings.wall_s - work_s). An untimed first run fills the host-capabilities cache.

    python benchmarks/overhead.py                       # both launchers, 5 runs each
    PJRT_DEVICE=CPU python benchmarks/overhead.py --reference-matrix   # in the XLA environment
    python benchmarks/overhead.py --launcher forkserver --runs 3 -- --suite-name=dummy --dynamo=inductor
    python benchmarks/overhead.py --rows-out docs/benchmarks/data/overhead/DATE.jsonl   # kept for the page
    python benchmarks/overhead.py --standing     # the head of docs/benchmarks/overhead.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import kept_rows

STUDY = "overhead"
DEFAULT_MATRIX = ["--suite-name=dummy", "--accelerator=cpu", "--dynamo=None", "--test=eval", "--test=train",
                  "--repeat=1"]
# PyTorch/XLA's runner compared with ours on its own ground: the dummy model on the CPU, every
# valid xla/dynamo pair (None/None, None/inductor, PJRT/None, PJRT/openxla). Needs torch_xla;
# the same flags run the reference (benchmarks/vs_reference.py).
REFERENCE_MATRIX = ["--suite-name=dummy", "--accelerator=cpu", "--xla=None", "--xla=PJRT", "--dynamo=None",
                    "--dynamo=inductor", "--dynamo=openxla", "--test=eval", "--repeat=1"]


@dataclass(frozen=True)
class Sample:
    experiments: int
    wall_s: float
    work_s: float
    child_wall_s: float  # sum of the parent-measured wall time of each experiment

    @property
    def per_experiment(self) -> float:
        return (self.wall_s - self.work_s) / self.experiments

    @property
    def startup_share(self) -> float:
        return (self.wall_s - self.child_wall_s) / self.experiments

    @property
    def process_cost(self) -> float:
        return (self.child_wall_s - self.work_s) / self.experiments


def run_once(matrix: list[str], launcher: str, folder: Path, env: dict[str, str]) -> Sample:
    output = folder / f"out-{time.monotonic_ns()}"
    command = [sys.executable, "-m", "experiment_runner", *matrix, f"--launcher={launcher}",
               f"--output-dirname={output}", "--no-progress-bar"]
    start = time.perf_counter()
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"overhead: the run failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    records = [json.loads(line) for line in (output / "results.jsonl").read_text().splitlines()]
    if any(r["status"] != "ok" for r in records):
        sys.exit("overhead: an experiment did not succeed; pick a matrix that runs here")
    return Sample(len(records), wall, sum(r["timings"]["work_s"] for r in records),
                  sum(r["timings"]["wall_s"] for r in records))


def spread(values: list[float]) -> str:
    return f"{min(values):6.3f} {statistics.median(values):6.3f} {max(values):6.3f}"


def median_range(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def standing(rows: list[dict] | None = None) -> list[str]:
    """The page's present tense: the newest kept row of each matrix, per launcher the overhead per
    experiment and its two parts (median and range over the runs)."""
    newest = {" ".join(row["matrix"]): row for row in (kept_rows.read(STUDY) if rows is None else rows)}
    return kept_rows.table(
        ["matrix", "host (date, processor, CPUs, load before, commit)", "launcher", "runs x experiments",
         "overhead s per experiment", "of which start-up", "of which each experiment's process"],
        [[f"`{matrix}`", kept_rows.where(row), launcher, f"{figures['runs']} x {figures['experiments']}",
          median_range(figures["overhead_s"]), median_range(figures["startup_share_s"]),
          median_range(figures["process_cost_s"])]
         for matrix, row in newest.items() for launcher, figures in row["launchers"].items()])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="timed runs per launcher")
    parser.add_argument("--launcher", action="append", choices=("forkserver", "subprocess"),
                        help="default: both")
    parser.add_argument("--reference-matrix", action="store_true",
                        help="the reference runner's XLA matrix: " + " ".join(REFERENCE_MATRIX))
    parser.add_argument("matrix", nargs="*", help="experiment_runner flags after --; default: "
                        + " ".join(DEFAULT_MATRIX))
    kept_rows.add_arguments(parser, STUDY, standing)
    args = parser.parse_args(argv)
    matrix = args.matrix or (REFERENCE_MATRIX if args.reference_matrix else DEFAULT_MATRIX)
    row = {"host": kept_rows.host(), "matrix": matrix, "launchers": {}}
    with tempfile.TemporaryDirectory(prefix="overhead-") as tmp:
        folder = Path(tmp)
        env = dict(os.environ, XDG_CACHE_HOME=str(folder / "cache"))
        print(f"matrix: {' '.join(matrix)}; {os.cpu_count()} CPUs, load average "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        print("seconds per experiment (min median max over runs):")
        print(f"{'launcher':<11} {'runs':>4} {'exps':>4}   {'overhead':^20}   {'start-up share':^20}   "
              f"{'process cost':^20}   {'wall/run':^20}")
        for launcher in args.launcher or ["forkserver", "subprocess"]:
            run_once(matrix, launcher, folder, env)  # untimed: fills caches
            samples = [run_once(matrix, launcher, folder, env) for _ in range(args.runs)]
            print(f"{launcher:<11} {len(samples):>4} {samples[0].experiments:>4}   "
                  f"{spread([s.per_experiment for s in samples])}   {spread([s.startup_share for s in samples])}   "
                  f"{spread([s.process_cost for s in samples])}   {spread([s.wall_s for s in samples])}")
            row["launchers"][launcher] = {
                "runs": len(samples), "experiments": samples[0].experiments,
                "overhead_s": [s.per_experiment for s in samples], "startup_share_s": [s.startup_share for s in samples],
                "process_cost_s": [s.process_cost for s in samples], "wall_s": [s.wall_s for s in samples]}
    kept_rows.append(args.rows_out, row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
