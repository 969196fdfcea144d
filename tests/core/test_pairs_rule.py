"""The sequential rule for paired timing (core/stats.py PairsRule): it stops once the median
ratio's 95% interval is tight enough, never before its floor or after its ceiling, and the
interval it reports is the one the pairs it timed support. Synthetic series, fixed seeds."""

from __future__ import annotations

import math
import random
from typing import Callable

import pytest

from experiment_runner.child.paired import HARNESS_PAIRS, pairs_rule
from experiment_runner.core.options import RunOptions
from experiment_runner.core.stats import CEILING, CONVERGED, FIXED, PairsRule, paired_speedup, relative_half_width

RULE = PairsRule(floor=10, ceiling=100, half_width=0.02)


def noisy_pairs(ratio: float, spread: float, seed: int) -> Callable[[], tuple[float, float]]:
    """Pairs of a compiled step `ratio` times faster than its baseline: each sample off by a
    log-normal factor of `spread`, and both of a pair moved alike by a slowly drifting host."""
    rng = random.Random(seed)
    host = [1.0]

    def draw() -> tuple[float, float]:
        host[0] *= math.exp(rng.gauss(0, 0.01))
        return (ratio * host[0] * math.exp(rng.gauss(0, spread)), host[0] * math.exp(rng.gauss(0, spread)))

    return draw


def run(rule: PairsRule, draw: Callable[[], tuple[float, float]]) -> tuple[list[float], list[float], str]:
    """Time pairs from `draw` as the child does, until the rule says why to stop."""
    baseline: list[float] = []
    compiled: list[float] = []
    while (reason := rule.stop_reason(baseline, compiled)) is None:
        b, c = draw()
        baseline.append(b)
        compiled.append(c)
    return baseline, compiled, reason


def test_a_quiet_series_stops_at_its_floor_converged() -> None:
    baseline, compiled, reason = run(RULE, noisy_pairs(1.5, 0.001, seed=1))
    assert reason == CONVERGED and len(baseline) == RULE.floor < HARNESS_PAIRS
    assert relative_half_width(paired_speedup(baseline, compiled)) <= RULE.half_width


def test_a_moderate_series_stops_between_floor_and_ceiling_once_tight_enough() -> None:
    baseline, compiled, reason = run(RULE, noisy_pairs(1.5, 0.03, seed=2))
    n = len(baseline)
    assert reason == CONVERGED and RULE.floor < n < RULE.ceiling and (n - RULE.floor) % RULE.step == 0
    assert relative_half_width(paired_speedup(baseline, compiled)) <= RULE.half_width
    # two pairs fewer were not enough: it stopped at the first whole round that was
    assert relative_half_width(paired_speedup(baseline[:n - 2], compiled[:n - 2])) > RULE.half_width


def test_a_noisy_series_runs_to_its_ceiling_and_reports_the_wide_interval_it_has() -> None:
    baseline, compiled, reason = run(RULE, noisy_pairs(1.5, 0.25, seed=3))
    assert reason == CEILING and len(baseline) == RULE.ceiling
    summary = paired_speedup(baseline, compiled)
    assert relative_half_width(summary) > RULE.half_width  # never a tighter interval than its data give


def test_never_below_the_floor_even_without_any_spread() -> None:
    for floor in (6, 7, 10, 31):
        baseline, _, reason = run(PairsRule(floor=floor, ceiling=100, half_width=0.02), lambda: (2.0, 1.0))
        assert (len(baseline), reason) == (floor, CONVERGED)
    assert RULE.stop_reason([2.0] * 9, [1.0] * 9) is None


def test_a_fixed_count_is_the_harness_s_thirty_whatever_the_spread() -> None:
    rule = pairs_rule(RunOptions(speedup="harness"))
    assert rule == PairsRule(floor=HARNESS_PAIRS, ceiling=HARNESS_PAIRS) and rule.describe()["kind"] == "fixed"
    for spread in (0.0, 0.3):
        baseline, _, reason = run(rule, noisy_pairs(1.2, spread, seed=4))
        assert (len(baseline), reason) == (HARNESS_PAIRS, FIXED)
    assert pairs_rule(RunOptions(speedup="harness", repeat=40)).ceiling == 40  # max(--repeat, 30), as before


def test_which_modes_are_adaptive() -> None:
    assert pairs_rule(RunOptions(speedup="paired")) == PairsRule(floor=10, ceiling=100, half_width=0.02)
    assert pairs_rule(RunOptions(speedup="harness", adaptive_pairs=True, min_pairs=8, max_pairs=40,
                                 pairs_half_width=0.05)) == PairsRule(floor=8, ceiling=40, half_width=0.05)
    assert pairs_rule(RunOptions(speedup="paired", adaptive_pairs=False)).half_width is None


@pytest.mark.parametrize("spread", [0.02, 0.05])
def test_the_stopped_interval_covers_the_true_ratio(spread: float) -> None:
    """Stopping when the interval looks tight could pick lucky, too narrow intervals: over 200
    series with a known ratio, the interval it stops with still covers that ratio in >= 90%."""
    true_ratio = 1.3
    covered = stopped_early = 0
    for seed in range(200):
        baseline, compiled, reason = run(RULE, noisy_pairs(true_ratio, spread, seed=1000 + seed))
        low, high = paired_speedup(baseline, compiled)["ci95"]
        covered += low <= true_ratio <= high
        stopped_early += reason == CONVERGED and len(baseline) < RULE.ceiling
    assert covered >= 0.90 * 200, covered
    assert stopped_early >= 100, "the rule must actually stop early on these series for the check to mean anything"
