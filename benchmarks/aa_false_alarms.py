"""A/A false alarms of `compare`: the same command run twice, compared; every flag is false.

Runs a small real matrix (the dummy suite and the `aa` plugin suite of aa_suite.py, whose
models draw a memory layout and a kernel variant per process; CPU, eager) as pairs of
identical runs with `--processes N`, each a real `python -m experiment_runner` into its own
folder, and compares each pair two ways:

- with processes: `compare A B` as is (N processes per side);
- without: for each i, process i of A against process i of B, each file cut down to that
  one process per experiment. A process of a `--processes` run does exactly what the only
  process of a run without it does, so these are N single-process A/A comparisons per
  pair of separate runs, at no extra cost.

    false alarms per 100 experiment comparisons = 100 x (regressions + improvements) / comparisons

with a one-sided 95% upper bound (Clopper-Pearson), how many changes beyond the threshold
the noise floor or the test held back, how many were not judged because a record said
`noisy_host` (and how many of those the floor and the test would have flagged), and how much
an experiment's median varies between its processes (the noise `--processes` samples and
one process cannot see).

    python benchmarks/aa_false_alarms.py --pairs 3 --processes 5
    python benchmarks/aa_false_alarms.py --pairs 4 --rows-out docs/benchmarks/data/aa_false_alarms/DATE.jsonl
    python benchmarks/aa_false_alarms.py --standing     # the head of docs/benchmarks/aa_false_alarms.md
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import kept_rows
from experiment_runner.analysis.loader import load_rows
from experiment_runner.analysis.compare import NOISY_HOST

HERE = Path(__file__).resolve().parent
MATRIX = [("--suite-name=dummy",), ("--suite-name=aa",)]
COMMON = ["--accelerator=cpu", "--dynamo=None", "--warmup-iterations=2", "--no-progress-bar"]
FLAGGED = ("regression", "improvement")
# Counts kept beside the verdicts (not verdicts themselves).
TALLIES = ("beyond threshold", "old rule", "noisy, else flagged")


def run_matrix(out: Path, args: argparse.Namespace, env: dict[str, str]) -> None:
    """One A/A side: every suite of the matrix into one results file, as one would in cron."""
    for suite in MATRIX:
        cmd = [sys.executable, "-m", "experiment_runner", *suite, *COMMON, *(f"--test={t}" for t in args.test),
               f"--repeat={args.repeat}", f"--iterations-per-run={args.iterations_per_run}",
               f"--processes={args.processes}", f"--output-dirname={out}"]
        if suite != MATRIX[0]:
            cmd.append("--resume")  # the second suite joins the first one's run
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"run failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-2000:]}")


def one_process(results: Path, index: int, into: Path) -> Path:
    """The records of process `index` only: a run with one process per experiment."""
    lines = [line for line in results.read_text().splitlines()
             if json.loads(line).get("process", {}).get("index") == index]
    into.write_text("\n".join(lines) + "\n")
    return into


def compare(a: Path, b: Path) -> dict:
    cmd = [sys.executable, "-m", "experiment_runner", "compare", str(a), str(b), "--format", "json"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):
        sys.exit(f"compare failed ({done.returncode}): {done.stderr}")
    return json.loads(done.stdout)


def process_spread(out: Path) -> list[float]:
    """Per experiment: the standard deviation of log per-process medians (needs >= 2 processes)."""
    return [statistics.stdev(math.log(m) for m in row.process_medians)
            for row in load_rows([out / "results.jsonl"]) if len(row.process_medians) >= 2]


def upper_bound(alarms: int, n: int) -> float:
    """One-sided 95% Clopper-Pearson upper bound on a rate seen as alarms/n."""
    from scipy.stats import beta

    return 1.0 if alarms >= n else float(beta.ppf(0.95, alarms + 1, n - alarms))


def tally_into(counter: Counter, document: dict) -> int:
    """Count verdicts; `old rule` is what compare did before processes, the noise floor and
    Benjamini-Hochberg: raw p < alpha and beyond the threshold."""
    for c in document["comparisons"]:
        counter[c["verdict"]] += 1
        beyond = c["change"] is not None and abs(c["change"]) > document["threshold"]
        counter["beyond threshold"] += beyond
        counter["old rule"] += beyond and c["p_value"] is not None and c["p_value"] < document["alpha"]
        if c["verdict"] == NOISY_HOST:  # what the floor and the test would have said without that rule
            counter["noisy, else flagged"] += ((c["noise_floor"] is None or abs(c["change"]) > c["noise_floor"])
                                               and c["q_value"] is not None and c["q_value"] < document["alpha"])
    return sum(c["verdict"] in FLAGGED for c in document["comparisons"])


STUDY = "aa_false_alarms"
TARGET_PER_100 = 1.0


def mode_figures(tally: Counter) -> dict[str, int]:
    """One mode's counts, as a kept row holds them."""
    return {"comparisons": sum(v for k, v in tally.items() if k not in TALLIES),
            "alarms": sum(tally[v] for v in FLAGGED), "beyond": tally["beyond threshold"],
            "held_by_floor": tally["within noise floor"],
            "held_by_test": tally["not significant"] + tally["not significant (too few samples)"],
            "noisy": tally[NOISY_HOST], "noisy_else_flagged": tally["noisy, else flagged"], "old_rule": tally["old rule"]}


def standing(rows: list[dict] | None = None) -> list[str]:
    """The page's present tense: the newest kept run, per mode the false alarms per 100 with their
    95% upper bound against the target, what held back the changes beyond 5%, and the old rule."""
    row = (kept_rows.read(STUDY) if rows is None else rows)[-1]
    body = []
    for mode, found in row["modes"].items():
        rate = 100 * found["alarms"] / found["comparisons"]
        body.append([f"`compare` on {mode}", str(found["comparisons"]), str(found["alarms"]),
                     f"{rate:.2f} ({100 * upper_bound(found['alarms'], found['comparisons']):.1f})",
                     f"{found['beyond'] - found['alarms']} of {found['beyond']}: {found['held_by_floor']} by the noise "
                     f"floor, {found['held_by_test']} by the test", f"{found['noisy']}", str(found["old_rule"]),
                     "met" if rate <= TARGET_PER_100 else "not met"])
    lines = kept_rows.table(["mode", "comparisons", "false alarms", "per 100 (95% upper bound)",
                             "changes beyond 5% held back", "not judged (noisy host)", "old rule",
                             f"at most {TARGET_PER_100:.0f} per 100"], body)
    spread = row["spread"]
    return lines + ["", f"{row['pairs']} pairs of identical runs ({', '.join(row['tests'])}; {row['processes']} "
                        f"processes, repeat {row['repeat']} x {row['iterations_per_run']} iterations); an experiment's "
                        f"median moves {spread['median']:.1%} between processes (median; max {spread['max']:.1%}); "
                        f"{kept_rows.where(row)}."]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=3, help="A/A pairs of runs")
    parser.add_argument("--processes", type=int, default=5, help="processes per experiment (at least 2)")
    parser.add_argument("--test", action="append", choices=("eval", "train"), help="default: eval and train")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--iterations-per-run", type=int, default=20,
                        help="iterations per sample, so that a sample of these small models lasts milliseconds")
    kept_rows.add_arguments(parser, STUDY, standing)
    args = parser.parse_args()
    where = kept_rows.host()
    args.test = args.test or ["eval", "train"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), str(HERE), env.get("PYTHONPATH")]))
    env["EXPERIMENT_RUNNER_SUITES"] = "aa=aa_suite:AASuite"
    modes = {f"--processes {args.processes}": Counter(), "one process": Counter()}
    spreads: list[float] = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            a, b = Path(tmp) / f"{pair}-a", Path(tmp) / f"{pair}-b"
            run_matrix(a, args, env)
            run_matrix(b, args, env)
            spreads += process_spread(a) + process_spread(b)
            flagged = tally_into(modes[f"--processes {args.processes}"],
                                 compare(a / "results.jsonl", b / "results.jsonl"))
            single = sum(tally_into(modes["one process"], compare(
                one_process(a / "results.jsonl", i, Path(tmp) / "a1.jsonl"),
                one_process(b / "results.jsonl", i, Path(tmp) / "b1.jsonl"))) for i in range(args.processes))
            print(f"pair {pair + 1}/{args.pairs}: {flagged} flagged with processes, {single} with one process "
                  f"({time.perf_counter() - start:.0f} s so far, load average {os.getloadavg()[0]:.1f})", flush=True)
    print(f"\nA/A false alarms over {args.pairs} pair(s) of identical runs ({', '.join(args.test)}; repeat "
          f"{args.repeat} x {args.iterations_per_run} iterations), threshold 5%, alpha 0.01 (Benjamini-Hochberg)")
    for mode, t in modes.items():
        compared = sum(v for k, v in t.items() if k not in TALLIES)
        alarms = sum(t[v] for v in FLAGGED)
        print(f"  {mode:<14} {compared:4d} comparisons: {alarms} false alarm(s) = {100 * alarms / compared:.2f} per "
              f"100 (95% upper bound {100 * upper_bound(alarms, compared):.1f}); {t['beyond threshold']} beyond the "
              f"threshold, held back by the noise floor {t['within noise floor']}, by the test "
              f"{t['not significant'] + t['not significant (too few samples)']}, not judged (noisy host) "
              f"{t[NOISY_HOST]}, of which the floor and the test would have flagged {t['noisy, else flagged']}; "
              f"the old rule (raw p < 0.01 beyond the threshold) would have flagged {t['old rule']}")
    print(f"  process-to-process spread of an experiment's median (sd of log per-process medians): median "
          f"{statistics.median(spreads):.1%}, max {max(spreads):.1%} over {len(spreads)} experiment runs")
    kept_rows.append(args.rows_out, {
        "host": where, "pairs": args.pairs, "processes": args.processes, "tests": args.test, "repeat": args.repeat,
        "iterations_per_run": args.iterations_per_run, "modes": {mode: mode_figures(t) for mode, t in modes.items()},
        "spread": {"median": statistics.median(spreads), "max": max(spreads), "runs": len(spreads)}})


if __name__ == "__main__":
    main()
