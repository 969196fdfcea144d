"""PyTorch/XLA's own runner and ours, alternately, on the same matrix: walls, overheads, ratio.

Needs the XLA environment (torch_xla) and a checkout of the reference's `benchmarks/` folder
(never committed here), e.g. from a clone of github.com/pytorch/xla at the installed version:

    git -C xla archive v2.9.0 benchmarks | tar -x -C /tmp/ref
    PJRT_DEVICE=CPU python benchmarks/vs_reference.py --reference /tmp/ref/benchmarks --rounds 3

Each round runs both commands once, in fresh output folders, the order swapped every round so
that a drift in the host's load falls on both. Per experiment it prints the wall time, the time
outside the timed repeats (wall - the sum of every record's metrics.total_time: the one
definition both runners' records allow), ours also as wall - the work our children report
(timings.work_s), the CPU seconds of the whole process tree, and the 1-minute load average
at the start. The last lines are the medians and the reference/ours ratios; --rows-out keeps them
for the page's head (--standing).

    PJRT_DEVICE=CPU .venv-xla/bin/python benchmarks/vs_reference.py --reference /tmp/ref/benchmarks \
        --reference-commit "pytorch/xla v2.9.0" --rows-out docs/benchmarks/data/vs_reference/DATE.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import kept_rows
from overhead import REFERENCE_MATRIX  # a sibling script, not a package


@dataclass(frozen=True)
class Run:
    runner: str
    experiments: int
    wall_s: float
    timed_s: float  # sum of metrics.total_time over every record
    work_s: float | None  # ours only: sum of timings.work_s
    cpu_s: float
    load: float

    @property
    def outside_timed(self) -> float:
        return (self.wall_s - self.timed_s) / self.experiments

    @property
    def overhead(self) -> float | None:
        return None if self.work_s is None else (self.wall_s - self.work_s) / self.experiments


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(runner: str, command: list[str], output: Path, env: dict[str, str]) -> Run:
    load = os.getloadavg()[0]
    cpu, start = _children_cpu(), time.perf_counter()
    proc = subprocess.run([*command, f"--output-dirname={output}"], env=env, capture_output=True, text=True,
                          check=False)
    wall, cpu = time.perf_counter() - start, _children_cpu() - cpu
    if proc.returncode != 0:
        sys.exit(f"vs_reference: {runner} failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    records = [json.loads(line) for line in (output / "results.jsonl").read_text().splitlines() if line.strip()]
    failed = [r for r in records if "error" in r["metrics"] or r.get("status", "ok") != "ok"]
    if not records or failed:
        sys.exit(f"vs_reference: {runner}: {len(failed)} of {len(records)} experiment(s) failed; "
                 "pick a matrix both runners run here")
    timed = sum(sum(r["metrics"].get("total_time", [])) for r in records)
    work = sum(r["timings"]["work_s"] for r in records) if runner == "ours" else None
    return Run(runner, len(records), wall, timed, work, cpu, load)


def row(run: Run) -> str:
    overhead = "" if run.overhead is None else f"{run.overhead:8.2f}"
    return (f"{run.runner:<9} {run.experiments:>4} {run.wall_s / run.experiments:9.2f} {run.outside_timed:9.2f} "
            f"{overhead:>8} {run.cpu_s / run.experiments:8.2f} {run.load:6.1f}")


STUDY = "vs_reference"


def standing(rows: list[dict] | None = None) -> list[str]:
    """The page's present tense: the newest kept row of each matrix, both runners' medians per
    experiment and their ratios."""
    newest = {" ".join(row["matrix"]): row for row in (kept_rows.read(STUDY) if rows is None else rows)}
    return kept_rows.table(
        ["matrix", "reference", "rounds; host", "wall s: reference / ours (ratio)",
         "outside timed repeats s: reference / ours", "our overhead s (wall - work)", "CPU s: reference / ours"],
        [[f"`{matrix}`", row["reference"], f"{row['rounds']}; {kept_rows.where(row)}",
          f"{row['wall_s']['reference']:.2f} / {row['wall_s']['ours']:.2f} "
          f"(**{row['wall_s']['reference'] / row['wall_s']['ours']:.2f}x**)",
          f"{row['outside_timed_s']['reference']:.2f} / {row['outside_timed_s']['ours']:.2f}",
          f"{row['our_overhead_s']:.2f}", f"{row['cpu_s']['reference']:.2f} / {row['cpu_s']['ours']:.2f}"]
         for matrix, row in newest.items()])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", type=Path,
                        help="the reference's benchmarks/ folder (holding experiment_runner.py)")
    parser.add_argument("--reference-commit", default="an unnamed checkout",
                        help="what the reference folder is, for the kept row (e.g. 'pytorch/xla v2.9.0')")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("matrix", nargs="*", help="flags for both runners after --; default: "
                        + " ".join(REFERENCE_MATRIX))
    kept_rows.add_arguments(parser, STUDY, standing)
    args = parser.parse_args(argv)
    if args.reference is None:
        parser.error("--reference is required (except with --standing)")
    script = args.reference / "experiment_runner.py"
    if not script.is_file():
        parser.error(f"no experiment_runner.py in {args.reference}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    matrix = args.matrix or REFERENCE_MATRIX
    commands = {"reference": [sys.executable, str(script), *matrix],
                "ours": [sys.executable, "-m", "experiment_runner", *matrix, "--no-progress-bar"]}
    runs: dict[str, list[Run]] = {"reference": [], "ours": []}
    where = kept_rows.host()
    with tempfile.TemporaryDirectory(prefix="vs-reference-") as tmp:
        folder = Path(tmp)
        env = dict(os.environ, PJRT_DEVICE=os.environ.get("PJRT_DEVICE", "CPU"),
                   XDG_CACHE_HOME=str(folder / "cache"))
        run_once("ours", commands["ours"], folder / "warm-up", env)  # untimed: fills our probe cache
        print(f"matrix: {' '.join(matrix)}; {os.cpu_count()} CPUs")
        print("seconds per experiment; overhead = wall - the children's reported work (ours only)")
        print(f"{'runner':<9} {'exps':>4} {'wall':>9} {'untimed':>9} {'overhead':>8} {'cpu':>8} {'load':>6}")
        for round_index in range(args.rounds):
            order = ("reference", "ours") if round_index % 2 == 0 else ("ours", "reference")
            for runner in order:
                run = run_once(runner, commands[runner], folder / f"{runner}-{round_index}", env)
                runs[runner].append(run)
                print(row(run), flush=True)
    ref, ours = runs["reference"], runs["ours"]
    med = statistics.median
    ref_wall, our_wall = med([r.wall_s / r.experiments for r in ref]), med([r.wall_s / r.experiments for r in ours])
    ref_untimed, our_untimed = med([r.outside_timed for r in ref]), med([r.outside_timed for r in ours])
    our_overhead = med([r.overhead for r in ours if r.overhead is not None])
    loads = [r.load for r in ref + ours]
    print(f"median over {args.rounds} round(s); load {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} CPUs")
    print(f"wall per experiment: reference {ref_wall:.2f} s, ours {our_wall:.2f} s, ratio {ref_wall / our_wall:.2f}x")
    print(f"outside the timed repeats: reference {ref_untimed:.2f} s, ours {our_untimed:.2f} s, "
          f"ratio {ref_untimed / our_untimed:.2f}x")
    print(f"our overhead (wall - work): {our_overhead:.2f} s per experiment")
    ref_cpu, our_cpu = med([r.cpu_s / r.experiments for r in ref]), med([r.cpu_s / r.experiments for r in ours])
    print(f"CPU per experiment: reference {ref_cpu:.2f} s, ours {our_cpu:.2f} s")
    print("docs row: | rounds | load | wall ref / ours (ratio) | outside timed repeats ref / ours | "
          "our overhead | CPU ref / ours |")
    print(f"| {args.rounds} | {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} CPUs | {ref_wall:.2f} / {our_wall:.2f} "
          f"({ref_wall / our_wall:.2f}x) | {ref_untimed:.2f} / {our_untimed:.2f} | {our_overhead:.2f} | "
          f"{ref_cpu:.2f} / {our_cpu:.2f} |")
    kept_rows.append(args.rows_out, {
        "host": where, "reference": args.reference_commit, "matrix": matrix, "rounds": args.rounds,
        "load": [min(loads), max(loads)], "wall_s": {"reference": ref_wall, "ours": our_wall},
        "outside_timed_s": {"reference": ref_untimed, "ours": our_untimed}, "our_overhead_s": our_overhead,
        "cpu_s": {"reference": ref_cpu, "ours": our_cpu}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
