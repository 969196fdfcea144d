"""`experiment_runner compare`: did anything regress between two runs?

Each experiment present on both sides is judged on its raw per_iter_time samples: the
ratio of medians says how much, a test says whether it is more than noise. What the test
can see depends on how the runs were measured:

- `--processes N >= 2` on both sides: Welch's t-test on the logarithms of the
  per-process medians. Each process is an independent draw of everything that changes
  from one process to the next (memory layout, autotuning choices, clocks, a neighbour's
  load), so the test sees the noise that matters, as pyperf does.
- one process on a side: repeats of one process are not independent of that process's
  luck, so a Mann-Whitney U test on them is overconfident. The comparison says that
  process-to-process noise is unknown and flags a change only beyond a noise floor: the
  threshold, FLOOR_FACTOR x the larger within-process relative IQR, and FLOOR_FACTOR x
  the robust spread of the log changes across the experiments compared (when there are
  enough of them: in an A/A comparison that spread *is* the process-to-process noise).

Benjamini-Hochberg controls the false discovery rate over every experiment tested at
once; the verdicts use its adjusted p-values (q). The tests are analysis.stats's, shared with bisect.

Each regression and new failure carries what else differs between its two records
(analysis.evidence: versions, host, graph breaks, compile time, memory) and the command that
runs it again; `--confirm` reruns each of them now (analysis.confirm) and exits 1 only for
those the reruns uphold.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from experiment_runner.analysis.aggregates import FairFigures, fair_figures, render_fair
from experiment_runner.analysis.baselines import DEFAULT_BASELINE, parse_baseline
from experiment_runner.analysis.confirm import DEFAULT_PROCESSES, Suspect, Verdict, confirm, render_confirmation
from experiment_runner.analysis.evidence import Difference, differences
from experiment_runner.analysis.files import render_csv
from experiment_runner.analysis.loader import (
    Row,
    RunInfo,
    comparison_key,
    read_rows,
    results_file,
    run_records,
    runs_of,
)
from experiment_runner.analysis.repro import repro_of, row_fields
from experiment_runner.analysis.stats import benjamini_hochberg, mann_whitney_ps, min_two_sided_p, welch_log_ps
from experiment_runner.errors import (
    EXIT_OK,
    EXIT_REGRESSION,
    ReportError,
    ReportParser,
    analysis_command,
    relative_change,
)

# One process per side: a change must exceed FLOOR_FACTOR times the noise we can see.
# Under normal noise 3 robust standard deviations would do; the margin is for the heavy tail
# of real hosts (a neighbour's job, a bad memory layout): on the test suite's noise model
# (tests/analysis/test_compare.py) 3 gave 1.4% false alarms, 4 0.7%, 5 0.2%.
FLOOR_FACTOR = 5.0
# Fewer experiments than this give no usable estimate of the spread of changes across them.
SPREAD_MIN_EXPERIMENTS = 10
# 1.4826 x the median absolute deviation estimates a normal standard deviation.
MAD_TO_SIGMA = 1.4826

DESCRIPTION = f"""\
Compare run A (before) with run B (after), experiment by experiment.

  compare A.jsonl B.jsonl            latest run of A against latest run of B
  compare FILE                       the run before the latest against the latest
  compare FILE --run-a X --run-b Y   two runs of one file (either flag also works with two files)

For each experiment that is ok on both sides: change = median(B) / median(A) - 1 of
metrics.per_iter_time (timed repeats only, warm-up excluded; with --processes, the median
of the per-process medians), and a p-value:

  >= 2 processes per side (runs made with --processes N): Welch's t-test on the logarithms
      of the per-process medians, so process-to-process noise is sampled.
  1 process on a side: a two-sided Mann-Whitney U test on that process's samples, which
      cannot see process-to-process noise; the change must also exceed a noise floor of
      max(threshold, {FLOOR_FACTOR:g} x the larger within-process relative IQR, {FLOOR_FACTOR:g} x the robust
      standard deviation of log changes across those experiments, when there are at least
      {SPREAD_MIN_EXPERIMENTS}). Changes under it are shown as "within noise floor".

The p-values of all experiments are adjusted together by Benjamini-Hochberg (q, false
discovery rate at alpha). A change beyond +threshold with q < alpha is a regression,
beyond -threshold with q < alpha an improvement; a change beyond the threshold without
significance is shown as not significant. With few samples of one process significance is
unreachable (10 vs 10 reach p ~ 1.1e-5; 3 vs 3 only 0.1) and the output says so.
A change beyond the threshold where either side's records say `noisy_host` (other processes used
more than --noisy-host-share of the CPUs during its timed runs) is shown as "noisy host (not
judged)", never as a regression: a neighbour's load moves a whole run. Experiments only on one
side, and experiments that were ok in A but fail in B (new failures) or the reverse, are listed.

Each regression and new failure is listed with what else differs between its two records
(versions, host, graph breaks, compile time, memory, iterations) and the command that runs it
again, alone. --confirm reruns each of them now with --confirm-processes fresh processes, into
confirm/ beside B's results file: a regression is upheld when the reruns' median is still
beyond the threshold above A's, a new failure when the reruns fail the same way.

Exit status: 0 no significant regression; 1 a significant regression or a new failure (with
--confirm: one the reruns upheld, or one they could not judge); 2 bad flags, no such run or scipy
missing; 3 a file cannot be read."""


@dataclass
class ExperimentChange:
    """One experiment on both sides."""

    experiment_id: str
    model: str | None
    configuration: str
    status_a: str
    status_b: str
    n_a: int
    n_b: int
    processes_a: int
    processes_b: int
    median_a_s: float | None
    median_b_s: float | None
    change: float | None  # median(B) / median(A) - 1: positive is slower
    test: str | None  # "welch-processes" or "mann-whitney-samples"
    p_value: float | None
    q_value: float | None  # Benjamini-Hochberg adjusted over every experiment tested
    noise_floor: float | None  # one process on a side: |change| must exceed this too
    verdict: str
    repro: str  # the command that runs B's experiment again, alone (analysis.repro)


PROCESS_TEST, SAMPLE_TEST = "welch-processes", "mann-whitney-samples"
# A change beyond the threshold where either side's timed runs shared the host with busy
# neighbours (the record's noisy_host): a neighbour's load moves every process of a run alike,
# which no test within the run can tell from a change, so it is shown and never called.
NOISY_HOST = "noisy host (not judged)"


def _comparable(a: Row, b: Row) -> bool:
    """Both ok with timings, at the same batch size (a model's default may change between
    versions of its suite; per-iteration times at two sizes are different measurements)."""
    return (a.status == b.status == "ok" and bool(a.median_per_iter_time_s) and bool(b.median_per_iter_time_s)
            and a.batch_size == b.batch_size)


def test_for(a: Row, b: Row) -> str:
    """Per-process medians when both sides have at least two, else the samples of one process."""
    return PROCESS_TEST if min(len(a.process_medians), len(b.process_medians)) >= 2 else SAMPLE_TEST


def change_spread(pairs: Sequence[tuple[Row, Row]]) -> float | None:
    """Robust standard deviation of log(median B / median A) across experiments, around its
    median; None with fewer than SPREAD_MIN_EXPERIMENTS. With one process per experiment and
    side, each change carries one draw of process-to-process noise per side, so when most
    experiments did not change this is an estimate of that noise that needs no extra runs."""
    logs = [math.log(b.median_per_iter_time_s / a.median_per_iter_time_s) for a, b in pairs]
    if len(logs) < SPREAD_MIN_EXPERIMENTS:
        return None
    center = statistics.median(logs)
    return MAD_TO_SIGMA * statistics.median(abs(x - center) for x in logs)


def noise_floor(a: Row, b: Row, threshold: float, spread: float | None) -> float:
    within = max(a.relative_iqr or 0.0, b.relative_iqr or 0.0)
    return max(threshold, FLOOR_FACTOR * within, FLOOR_FACTOR * (spread or 0.0))


def judge(a: Row, b: Row, test: str | None, p: float | None, q: float | None, floor: float | None,
          threshold: float, alpha: float) -> ExperimentChange:
    """The verdict on one experiment; `p`, `q` and (one process) `floor` when comparable."""
    def make(change: float | None, verdict: str) -> ExperimentChange:
        return ExperimentChange(a.experiment_id, a.model, f"{a.accelerator} {a.configuration} {a.test} {a.precision}",
                                a.status, b.status, a.n_samples, b.n_samples, a.processes, b.processes,
                                a.median_per_iter_time_s, b.median_per_iter_time_s, change,
                                test if change is not None else None, p, q, floor, verdict, repro_of(b))

    if a.status == "ok" and b.status != "ok":
        return make(None, "new failure")
    if a.status != "ok" and b.status == "ok":
        return make(None, "fixed")
    if a.status == b.status == "ok" and a.batch_size != b.batch_size:
        return make(None, f"not comparable (batch size {a.batch_size} vs {b.batch_size})")
    if p is None or q is None or not _comparable(a, b):
        return make(None, "not comparable")
    change = b.median_per_iter_time_s / a.median_per_iter_time_s - 1.0
    if abs(change) <= threshold:
        verdict = "within threshold"
    elif a.noisy_host or b.noisy_host:
        verdict = NOISY_HOST
    elif floor is not None and abs(change) <= floor:
        verdict = "within noise floor"
    elif q < alpha:
        verdict = "regression" if change > 0 else "improvement"
    elif test == SAMPLE_TEST and min_two_sided_p(a.n_samples, b.n_samples) >= alpha:
        verdict = "not significant (too few samples)"
    else:
        verdict = "not significant"
    return make(change, verdict)


@dataclass
class Outcome:
    run_a: RunInfo
    run_b: RunInfo
    comparisons: list[ExperimentChange]
    only_a: list[str]
    only_b: list[str]
    spread: float | None  # robust sd of log changes across the one-process experiments
    fair: list[FairFigures]  # the dashboard's figures over the models both runs measured
    rows_b: dict[str, Row] = field(default_factory=dict)  # B's rows by experiment id (repro, confirmation)
    evidence: dict[str, list[Difference]] = field(default_factory=dict)  # per flagged experiment id
    verdicts: list[Verdict] | None = None  # --confirm's, per flagged experiment
    # experiments whose samples came from pairs on one side and isolated runs on the other
    samples_differ: list[str] = field(default_factory=list)

    def count(self, verdict: str) -> int:
        # "not comparable (batch size 32 vs 16)" counts as "not comparable"
        return sum(c.verdict == verdict or (verdict == "not comparable" and c.verdict.startswith(verdict))
                   for c in self.comparisons)

    @property
    def flagged(self) -> list[ExperimentChange]:
        return [c for c in self.comparisons if c.verdict in FLAGGED]

    @property
    def failed(self) -> bool:
        if self.verdicts is not None:
            return any(v.alerts for v in self.verdicts)
        return bool(self.flagged)


FLAGGED = ("regression", "new failure")


def pick_runs(args: argparse.Namespace) -> tuple[list[Row], RunInfo, list[Row], RunInfo]:
    rows_a = read_rows([results_file(args.a)])
    rows_b = rows_a if args.b is None or args.b == args.a else read_rows([results_file(args.b)])
    runs_a, runs_b = runs_of(rows_a), runs_of(rows_b)
    if not runs_a or not runs_b:
        raise ReportError(f"no records in {args.a if not runs_a else args.b}")

    def find(runs: list[RunInfo], run_id: str, where: Path) -> RunInfo:
        for run in runs:
            if run.run_id == run_id:
                return run
        raise ReportError(f"no run {run_id!r} in {where}; runs: {', '.join(r.run_id for r in runs[-10:])}")

    where_b = args.b or args.a
    run_b = find(runs_b, args.run_b, where_b) if args.run_b else runs_b[-1]
    if args.run_a:
        run_a = find(runs_a, args.run_a, args.a)
    elif rows_b is rows_a:
        earlier = runs_a[:runs_a.index(run_b)]
        if not earlier:
            raise ReportError(f"no run in {args.a} before {run_b.run_id}: nothing to compare it with")
        run_a = earlier[-1]
    else:
        run_a = runs_a[-1]
    if rows_b is rows_a and run_a.run_id == run_b.run_id:
        raise ReportError(f"run A and run B are the same run {run_a.run_id}")
    return ([r for r in rows_a if r.run_id == run_a.run_id], run_a,
            [r for r in rows_b if r.run_id == run_b.run_id], run_b)


def compare(args: argparse.Namespace) -> Outcome:
    rows_a, run_a, rows_b, run_b = pick_runs(args)
    side_a = {comparison_key(r): r for r in rows_a}
    side_b = {comparison_key(r): r for r in rows_b}
    pairs = [(side_a[key], side_b[key]) for key in sorted(side_a.keys() & side_b.keys())]
    testable = [(a, b) for a, b in pairs if _comparable(a, b)]
    by_test: dict[str, list[tuple[Row, Row]]] = {PROCESS_TEST: [], SAMPLE_TEST: []}
    for a, b in testable:
        by_test[test_for(a, b)].append((a, b))
    ps: dict[str, float] = {}
    for test, members, samples, pvalues in (
            (PROCESS_TEST, by_test[PROCESS_TEST], lambda r: r.process_medians, welch_log_ps),
            (SAMPLE_TEST, by_test[SAMPLE_TEST], lambda r: r.per_iter_time, mann_whitney_ps)):
        ps.update(zip((comparison_key(a) for a, _ in members), pvalues([(samples(a), samples(b)) for a, b in members])))
    qs = dict(zip(ps, benjamini_hochberg(list(ps.values()))))
    spread = change_spread(by_test[SAMPLE_TEST])
    comparisons = []
    for a, b in pairs:
        test = test_for(a, b)
        floor = noise_floor(a, b, args.threshold, spread) if test == SAMPLE_TEST else None
        comparisons.append(judge(a, b, test, ps.get(comparison_key(a)), qs.get(comparison_key(a)), floor,
                                 args.threshold, args.alpha))
    return Outcome(run_a, run_b, comparisons, sorted(side_a.keys() - side_b.keys()),
                   sorted(side_b.keys() - side_a.keys()), spread,
                   fair_figures(rows_a, rows_b, parse_baseline(DEFAULT_BASELINE)),
                   rows_b={r.experiment_id: r for r in rows_b},
                   samples_differ=[a.experiment_id for a, b in pairs if a.samples_from != b.samples_from])


def add_evidence(outcome: Outcome, args: argparse.Namespace) -> None:
    """What else differs between A's and B's record of each flagged experiment (a new failure
    does not list its own status)."""
    flagged = outcome.flagged
    if not flagged:
        return
    before = run_records([args.a], outcome.run_a.run_id)
    after = run_records([args.b or args.a], outcome.run_b.run_id)
    for c in flagged:
        if c.experiment_id in before and c.experiment_id in after:
            found = differences(before[c.experiment_id], after[c.experiment_id])
            outcome.evidence[c.experiment_id] = [d for d in found if not (c.verdict == "new failure"
                                                                           and d.field == "status")]


def run_confirmation(outcome: Outcome, args: argparse.Namespace) -> list[Verdict]:
    """--confirm: rerun each regression and new failure (analysis.confirm), judged against A."""
    targets = [Suspect(c.experiment_id, "time", c.median_a_s, c.median_b_s, None) if c.verdict == "regression"
               else Suspect(c.experiment_id, "status", c.status_a, c.status_b, None) for c in outcome.flagged]
    info = {t.experiment_id: row_fields(outcome.rows_b[t.experiment_id]) for t in targets}
    b = Path(args.b or args.a)
    beside = b / "results.jsonl" if b.is_dir() else b  # confirm/ goes into B's folder
    newest_file = {t.experiment_id: beside for t in targets}
    return confirm(targets, info, newest_file, args.confirm_processes, 0.0, args.threshold)


SHOWN_BY_DEFAULT = ("regression", "new failure", "improvement", "fixed", "not significant",
                    "not significant (too few samples)", "within noise floor", NOISY_HOST)


def _pct(change: float | None) -> str:
    return "-" if change is None else f"{change * 100:+.1f}%"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def method_lines(outcome: Outcome, args: argparse.Namespace) -> list[str]:
    """How the verdicts were reached, in words: which test, which correction, which floor."""
    tested = [c for c in outcome.comparisons if c.q_value is not None]
    by_processes = sum(c.test == PROCESS_TEST for c in tested)
    one_process = len(tested) - by_processes
    lines = [(f"threshold {args.threshold:.1%}; significance: Benjamini-Hochberg adjusted p (q) < {args.alpha:g} "
              f"over the {len(tested)} experiment(s) tested (false discovery rate {args.alpha:g})")]
    if by_processes:
        lines.append(f"{by_processes} experiment(s) with >= 2 processes per side: Welch's t-test on the logs of "
                     "the per-process medians")
    if one_process:
        spread = "too few experiments to estimate" if outcome.spread is None else f"{outcome.spread:.1%}"
        lines.append(f"{one_process} experiment(s) with one process on a side: process-to-process noise is "
                     f"unknown; Mann-Whitney U on one process's samples, flagged only beyond a noise floor of "
                     f"max(threshold, {FLOOR_FACTOR:g} x within-process relative IQR, {FLOOR_FACTOR:g} x the spread "
                     f"of changes across experiments ({spread})); run with --processes 5 or more to measure it")
    if outcome.samples_differ:
        lines.append(f"{len(outcome.samples_differ)} experiment(s) took their samples differently in A and B (in "
                     "the pairs of --speedup=paired or harness on one side, isolated timed runs on the other; "
                     "measurements.samples_from): their changes mix the method's with the build's")
    return lines


def render_text(outcome: Outcome, args: argparse.Namespace) -> str:
    from tabulate import tabulate

    order = {v: i for i, v in enumerate(SHOWN_BY_DEFAULT)}
    shown = [c for c in outcome.comparisons if args.all or c.verdict in order]
    shown.sort(key=lambda c: (order.get(c.verdict, len(order)), -(abs(c.change or 0.0)), c.experiment_id))
    out = [f"A: run {outcome.run_a.run_id} ({args.a})",
           f"B: run {outcome.run_b.run_id} ({args.b or args.a})",
           *method_lines(outcome, args), ""]
    if shown:
        out.append(tabulate(
            [[c.model, c.configuration, f"{c.processes_a}/{c.processes_b}", _ms(c.median_a_s), _ms(c.median_b_s),
              _pct(c.change), "-" if c.q_value is None else f"{c.q_value:.2g}",
              "-" if c.noise_floor is None else f"{c.noise_floor:.1%}", c.verdict] for c in shown],
            headers=["model", "configuration", "processes", "A ms", "B ms", "change", "q", "floor", "verdict"],
            tablefmt="simple"))
        out.append("")
    flagged = [c for c in shown if c.verdict in FLAGGED]
    if flagged:
        out.append("to see each regression again, alone:")
        out.extend(f"  {c.model} {c.configuration}: {c.repro}" for c in flagged)
        out.append("")
        out.append("what else changed between A's and B's record:")
        for c in flagged:
            found = outcome.evidence.get(c.experiment_id)
            said = ("records not found" if found is None else "; ".join(map(str, found))
                    or "nothing else in the records (same versions, host and compiled graphs)")
            out.append(f"  {c.model} {c.configuration}: {said}")
        out.append("")
    out.extend(render_fair(outcome.fair))
    for label, keys in (("only in A", outcome.only_a), ("only in B", outcome.only_b)):
        if keys:
            out.append(f"{len(keys)} experiment(s) {label}:")
            out.extend(f"  {key}" for key in keys)
            out.append("")
    few = [c for c in outcome.comparisons if c.test == SAMPLE_TEST and min_two_sided_p(c.n_a, c.n_b) >= args.alpha]
    if few:
        sizes = sorted({(c.n_a, c.n_b) for c in few})
        out.append(f"note: significance is unreachable for {len(few)} experiment(s): with "
                   f"{', '.join(f'{a} vs {b}' for a, b in sizes)} samples the smallest two-sided p is "
                   f"{min_two_sided_p(*sizes[0]):.2g} >= {args.alpha:g}; run with a larger --repeat "
                   f"(10 reaches about 1.1e-05) and --processes.")
    tally = ", ".join(f"{outcome.count(v)} {v}" for v in (*SHOWN_BY_DEFAULT, "within threshold", "not comparable"))
    out.append(f"{len(outcome.comparisons)} compared: {tally}.")
    if outcome.verdicts is not None:
        out.append(render_confirmation(outcome.verdicts, args.confirm_processes).rstrip("\n"))
    out.append("result: REGRESSION (exit 1)" if outcome.failed else "result: no significant regression (exit 0)")
    return "\n".join(out) + "\n"


def render(outcome: Outcome, args: argparse.Namespace) -> str:
    if args.format == "text":
        return render_text(outcome, args)
    rows = [{k: (float(f"{v:.6g}") if isinstance(v, float) else v) for k, v in asdict(c).items()}
            for c in outcome.comparisons]
    if args.format == "csv":
        return render_csv(rows)
    return json.dumps({
        "run_a": outcome.run_a.run_id, "run_b": outcome.run_b.run_id, "threshold": args.threshold,
        "alpha": args.alpha, "multiple_comparisons": "benjamini-hochberg", "floor_factor": FLOOR_FACTOR,
        "change_spread": outcome.spread, "method": method_lines(outcome, args), "regression": outcome.failed,
        "comparisons": rows, "only_in_a": outcome.only_a, "only_in_b": outcome.only_b,
        "dashboard_over_common_models": [f.as_dict() for f in outcome.fair],
        "evidence": {eid: [asdict(d) for d in found] for eid, found in outcome.evidence.items()},
        **({"confirmation": [asdict(v) for v in outcome.verdicts]} if outcome.verdicts is not None else {}),
    }, indent=2) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = ReportParser(prog="experiment_runner compare", description=DESCRIPTION,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", type=Path, metavar="A", help="results file holding run A (before)")
    p.add_argument("b", type=Path, nargs="?", metavar="B", help="results file holding run B (after); default: A")
    p.add_argument("--run-a", help="run id of A (default: latest in A, or the run before B when one file)")
    p.add_argument("--run-b", help="run id of B (default: latest)")
    p.add_argument("--threshold", type=relative_change, default=0.05, metavar="CHANGE",
                   help="relative change that matters, as a fraction or a percentage: 0.05 or 5%% (default 5%%; "
                        "a bare number of 1 or more is refused: 500%% is written 500%%)")
    p.add_argument("--alpha", type=float, default=0.01,
                   help="false discovery rate: Benjamini-Hochberg adjusted p-values below it are significant "
                        "(default 0.01)")
    p.add_argument("--format", choices=("text", "csv", "json"), default="text",
                   help="text lists what changed; csv and json hold every compared experiment")
    p.add_argument("--all", action="store_true", help="text: also list experiments within the threshold")
    p.add_argument("--confirm", action="store_true",
                   help="rerun each regression and new failure now with --confirm-processes processes, into "
                        "confirm/ beside B's results file, and exit 1 only for those the reruns uphold")
    p.add_argument("--confirm-processes", type=int, default=DEFAULT_PROCESSES, metavar="N",
                   help="fresh processes per rerun (default %(default)s)")
    return p


@analysis_command("compare")
def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    if not 0 < args.alpha < 1:
        raise ReportError("--alpha must be in (0, 1)")
    if args.confirm_processes < 1:
        raise ReportError("--confirm-processes must be at least 1")
    outcome = compare(args)
    if not outcome.comparisons:
        raise ReportError(f"run A ({outcome.run_a.run_id}) and run B ({outcome.run_b.run_id}) have no experiment in "
                          f"common ({len(outcome.only_a)} only in A, {len(outcome.only_b)} only in B): nothing to "
                          "compare; compare runs of the same suite, models and configurations")
    add_evidence(outcome, args)
    if args.confirm:
        outcome.verdicts = run_confirmation(outcome, args)
    sys.stdout.write(render(outcome, args))
    return EXIT_REGRESSION if outcome.failed else EXIT_OK

