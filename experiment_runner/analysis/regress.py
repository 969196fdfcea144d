"""`experiment_runner compare`: did anything regress between two runs?

Each experiment present on both sides is judged on its raw per_iter_time samples: the
ratio of medians says how much, a two-sided Mann-Whitney U test says whether it is more
than noise. Rank-based on purpose: benchmark timings are skewed and have outliers, and
the test needs no normality. scipy is imported only here.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NoReturn, Sequence

from experiment_runner.analysis.loader import Row, RunInfo, comparison_key, runs_of
from experiment_runner.analysis.report import read_rows, render_csv
from experiment_runner.errors import EXIT_OK, EXIT_REGRESSION, ReportError

EXACT_MAX_SAMPLES = 50

DESCRIPTION = """\
Compare run A (before) with run B (after), experiment by experiment.

  compare A.jsonl B.jsonl            latest run of A against latest run of B
  compare FILE                       the run before the latest against the latest
  compare FILE --run-a X --run-b Y   two runs of one file (either flag also works with two files)

For each experiment that is ok on both sides: change = median(B) / median(A) - 1 of
metrics.per_iter_time (timed repeats only, warm-up excluded) and the p-value of a
two-sided Mann-Whitney U test on the raw samples. A change beyond +threshold with
p < alpha is a regression, beyond -threshold with p < alpha an improvement; a change
beyond the threshold without significance is shown as not significant. With few
samples significance is unreachable (10 vs 10 samples reach p ~ 1.1e-5; 3 vs 3 only
0.1) and the output says so. Experiments only on one side, and experiments that were
ok in A but fail in B (new failures) or the reverse, are listed.

Exit status: 0 no significant regression; 1 a significant regression or a new failure;
2 bad flags, no such run or scipy missing; 3 a file cannot be read."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ReportError(f"{message} (see --help)")


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
    median_a_s: float | None
    median_b_s: float | None
    change: float | None  # median(B) / median(A) - 1: positive is slower
    p_value: float | None
    verdict: str


def min_two_sided_p(n_a: int, n_b: int) -> float:
    """The smallest exact two-sided Mann-Whitney p-value n_a vs n_b samples can give."""
    return min(1.0, 2.0 / math.comb(n_a + n_b, n_a)) if n_a and n_b else 1.0


def _comparable(a: Row, b: Row) -> bool:
    """Both ok with timings, at the same batch size (a model's default may change between
    versions of its suite; per-iteration times at two sizes are different measurements)."""
    return (a.status == b.status == "ok" and bool(a.median_per_iter_time_s) and bool(b.median_per_iter_time_s)
            and a.batch_size == b.batch_size)


def mann_whitney_ps(pairs: Sequence[tuple[Sequence[float], Sequence[float]]]) -> list[float]:
    """Two-sided Mann-Whitney U p-values, one scipy call per batch of equal-sized pairs.

    Batching matters: one call costs about half a millisecond of scipy overhead, which on
    tens of thousands of experiments would dwarf reading the file. Exact when valid (no
    ties) and cheap, so 10 vs 10 samples can reach p ~ 1.1e-5; scipy's 'auto' switches to
    the normal approximation above 8 samples.
    """
    try:
        import numpy as np
        from scipy.stats import mannwhitneyu
    except ImportError:
        raise ReportError("compare needs scipy: pip install 'experiment_runner[reports]'") from None
    batches: dict[tuple[int, int, bool], list[int]] = {}
    for i, (a, b) in enumerate(pairs):
        exact = len(set(a) | set(b)) == len(a) + len(b) and max(len(a), len(b)) <= EXACT_MAX_SAMPLES
        batches.setdefault((len(a), len(b), exact), []).append(i)
    ps = [1.0] * len(pairs)
    for (_, _, exact), members in batches.items():
        a = np.array([pairs[i][0] for i in members], dtype=float)
        b = np.array([pairs[i][1] for i in members], dtype=float)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # identical samples: scipy warns and returns nan
            result = mannwhitneyu(a, b, axis=1, alternative="two-sided", method="exact" if exact else "asymptotic")
        for i, p in zip(members, np.atleast_1d(result.pvalue).tolist()):
            ps[i] = 1.0 if math.isnan(p) else p
    return ps


def judge(a: Row, b: Row, p: float | None, threshold: float, alpha: float) -> ExperimentChange:
    """The verdict on one experiment; `p` is its Mann-Whitney p-value when comparable."""
    def make(change: float | None, verdict: str) -> ExperimentChange:
        return ExperimentChange(a.experiment_id, a.model, f"{a.accelerator} {a.configuration} {a.test} {a.precision}",
                          a.status, b.status, a.n_samples, b.n_samples, a.median_per_iter_time_s,
                          b.median_per_iter_time_s, change, p, verdict)

    if a.status == "ok" and b.status != "ok":
        return make(None, "new failure")
    if a.status != "ok" and b.status == "ok":
        return make(None, "fixed")
    if a.status == b.status == "ok" and a.batch_size != b.batch_size:
        return make(None, f"not comparable (batch size {a.batch_size} vs {b.batch_size})")
    if p is None or not _comparable(a, b):
        return make(None, "not comparable")
    change = b.median_per_iter_time_s / a.median_per_iter_time_s - 1.0
    if abs(change) <= threshold:
        verdict = "within threshold"
    elif p < alpha:
        verdict = "regression" if change > 0 else "improvement"
    elif min_two_sided_p(a.n_samples, b.n_samples) >= alpha:
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

    def count(self, verdict: str) -> int:
        # "not comparable (batch size 32 vs 16)" counts as "not comparable"
        return sum(c.verdict == verdict or (verdict == "not comparable" and c.verdict.startswith(verdict))
                   for c in self.comparisons)

    @property
    def failed(self) -> bool:
        return self.count("regression") > 0 or self.count("new failure") > 0


def pick_runs(args: argparse.Namespace) -> tuple[list[Row], RunInfo, list[Row], RunInfo]:
    rows_a = read_rows([args.a])
    rows_b = rows_a if args.b is None or args.b == args.a else read_rows([args.b])
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
    ps = dict(zip(((comparison_key(a) for a, _ in testable)),
                  mann_whitney_ps([(a.per_iter_time, b.per_iter_time) for a, b in testable])))
    comparisons = [judge(a, b, ps.get(comparison_key(a)), args.threshold, args.alpha) for a, b in pairs]
    return Outcome(run_a, run_b, comparisons, sorted(side_a.keys() - side_b.keys()),
                   sorted(side_b.keys() - side_a.keys()))


SHOWN_BY_DEFAULT = ("regression", "new failure", "improvement", "fixed", "not significant",
                    "not significant (too few samples)")


def _pct(change: float | None) -> str:
    return "-" if change is None else f"{change * 100:+.1f}%"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def render_text(outcome: Outcome, args: argparse.Namespace) -> str:
    from tabulate import tabulate

    order = {v: i for i, v in enumerate(SHOWN_BY_DEFAULT)}
    shown = [c for c in outcome.comparisons if args.all or c.verdict in order]
    shown.sort(key=lambda c: (order.get(c.verdict, len(order)), -(abs(c.change or 0.0)), c.experiment_id))
    out = [f"A: run {outcome.run_a.run_id} ({args.a})",
           f"B: run {outcome.run_b.run_id} ({args.b or args.a})",
           f"threshold {args.threshold:.1%}, significance p < {args.alpha:g} (two-sided Mann-Whitney U "
           f"on per_iter_time samples)", ""]
    if shown:
        out.append(tabulate(
            [[c.model, c.configuration, _ms(c.median_a_s), _ms(c.median_b_s), _pct(c.change),
              "-" if c.p_value is None else f"{c.p_value:.2g}", c.verdict] for c in shown],
            headers=["model", "configuration", "A ms", "B ms", "change", "p", "verdict"], tablefmt="simple"))
        out.append("")
    for label, keys in (("only in A", outcome.only_a), ("only in B", outcome.only_b)):
        if keys:
            out.append(f"{len(keys)} experiment(s) {label}:")
            out.extend(f"  {key}" for key in keys)
            out.append("")
    few = [c for c in outcome.comparisons if c.n_a and c.n_b and min_two_sided_p(c.n_a, c.n_b) >= args.alpha]
    if few:
        sizes = sorted({(c.n_a, c.n_b) for c in few})
        out.append(f"note: significance is unreachable for {len(few)} experiment(s): with "
                   f"{', '.join(f'{a} vs {b}' for a, b in sizes)} samples the smallest two-sided p is "
                   f"{min_two_sided_p(*sizes[0]):.2g} >= {args.alpha:g}; run with a larger --repeat "
                   f"(10 reaches about 1.1e-05).")
    tally = ", ".join(f"{outcome.count(v)} {v}" for v in (*SHOWN_BY_DEFAULT, "within threshold", "not comparable"))
    out.append(f"{len(outcome.comparisons)} compared: {tally}.")
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
        "alpha": args.alpha, "regression": outcome.failed, "comparisons": rows,
        "only_in_a": outcome.only_a, "only_in_b": outcome.only_b,
    }, indent=2) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="experiment_runner compare", description=DESCRIPTION,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", type=Path, metavar="A", help="results file holding run A (before)")
    p.add_argument("b", type=Path, nargs="?", metavar="B", help="results file holding run B (after); default: A")
    p.add_argument("--run-a", help="run id of A (default: latest in A, or the run before B when one file)")
    p.add_argument("--run-b", help="run id of B (default: latest)")
    p.add_argument("--threshold", type=float, default=0.05, help="relative change that matters (default 0.05)")
    p.add_argument("--alpha", type=float, default=0.01, help="significance level (default 0.01)")
    p.add_argument("--format", choices=("text", "csv", "json"), default="text",
                   help="text lists what changed; csv and json hold every compared experiment")
    p.add_argument("--all", action="store_true", help="text: also list experiments within the threshold")
    return p


def main(argv: Sequence[str]) -> int:
    try:
        args = build_parser().parse_args(list(argv))
        if not args.threshold >= 0:
            raise ReportError("--threshold must be >= 0")
        if not 0 < args.alpha < 1:
            raise ReportError("--alpha must be in (0, 1)")
        outcome = compare(args)
        sys.stdout.write(render(outcome, args))
    except ReportError as exc:
        print(f"experiment_runner compare: error: {exc}", file=sys.stderr)
        return exc.code
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    return EXIT_REGRESSION if outcome.failed else EXIT_OK

