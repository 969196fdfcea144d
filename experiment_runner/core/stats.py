"""Robust summaries of timing samples: medians with spread and an instability flag."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

# A run whose interquartile range exceeds this fraction of its median is flagged
# `unstable`: its median is still reported, but should not be trusted for a 5% call.
UNSTABLE_RELATIVE_IQR = 0.10


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted values."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    pos = (len(sorted_values) - 1) * q
    low = int(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)


def summarize(samples: Sequence[float]) -> dict[str, float | bool | int] | None:
    """Median, quartiles, relative IQR and the unstable flag of a list of samples."""
    values = sorted(float(v) for v in samples if v is not None)
    if not values:
        return None
    median = statistics.median(values)
    q1, q3 = quantile(values, 0.25), quantile(values, 0.75)
    relative_iqr = (q3 - q1) / median if median > 0 else 0.0
    return {
        "n": len(values),
        "median": median,
        "min": values[0],
        "max": values[-1],
        "q1": q1,
        "q3": q3,
        "relative_iqr": relative_iqr,
        "unstable": len(values) >= 3 and relative_iqr > UNSTABLE_RELATIVE_IQR,
    }


def _binomial_cdf(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    from math import comb

    return sum(comb(n, i) for i in range(0, k + 1)) / 2 ** n


@lru_cache(maxsize=None)
def _interval_rank(n: int) -> int:
    """The k of the median's 95% order-statistics interval over n values: the largest with
    P(Binomial(n, 1/2) < k) <= 2.5% (0: no interval). Cached: the stopping rule asks after
    every pair."""
    k = 0
    while k + 1 <= n and _binomial_cdf(k, n) <= 0.025:
        k += 1
    return k


def paired_speedup(baseline: Sequence[float], compiled: Sequence[float]) -> dict[str, object]:
    """Speedup from interleaved pairs (baseline time / compiled time of the same pair).

    The median of the per-pair ratios; its 95% distribution-free confidence interval (order
    statistics of the ratios: the interval between the k-th smallest and k-th largest, k the
    largest with P(Binomial(n, 1/2) < k) <= 2.5%; None under 6 pairs, where none exists); and
    the two-sided exact sign test of "no speedup" (ratio 1): pairs carry the host's drift
    together, so each ratio is judged on its own and nothing is assumed about their spread.
    """
    ratios = sorted(b / c for b, c in zip(baseline, compiled) if c > 0)
    n = len(ratios)
    if not n:
        return {"pairs": 0, "ratios": [], "median_ratio": None, "ci95": None, "p_value": None}
    k = _interval_rank(n)
    ci95 = [ratios[k - 1], ratios[n - k]] if k >= 1 else None
    above = sum(r > 1.0 for r in ratios)
    below = sum(r < 1.0 for r in ratios)
    decided = above + below
    p_value = min(1.0, 2 * _binomial_cdf(min(above, below), decided)) if decided else 1.0
    return {"pairs": n, "ratios": [b / c for b, c in zip(baseline, compiled) if c > 0],
            "median_ratio": statistics.median(ratios), "ci95": ci95, "p_value": p_value,
            "test": "two-sided exact sign test of the per-pair ratios against 1"}


# Why a series of pairs stopped (measurements.paired.stop_reason).
CONVERGED, CEILING, FIXED = "converged", "ceiling", "fixed"


def relative_half_width(summary: dict[str, object]) -> float | None:
    """The wider side of a paired_speedup summary's 95% interval, as a share of its median
    ratio; None while there is no interval."""
    ci95, median = summary["ci95"], summary["median_ratio"]
    if ci95 is None or not median:
        return None
    low, high = ci95  # type: ignore[misc]
    return max(median - low, high - median) / median  # type: ignore[operator]


@dataclass(frozen=True)
class PairsRule:
    """When to stop timing pairs: a fixed count (floor == ceiling, PyTorch's harness's 30), or
    sequentially, once the median ratio's 95% interval lies within `half_width` of it (relative),
    never before `floor` pairs and never after `ceiling`. The interval is re-read after every
    `step` pairs (2: whole ABBA rounds, so neither order gets one pair more). Whatever stops it,
    the interval reported is paired_speedup over every pair timed, so a noisy series ends at its
    ceiling with the wide interval its data give, never a tighter one."""

    floor: int
    ceiling: int
    half_width: float | None = None  # None: a fixed count of `ceiling` pairs
    step: int = 2

    def stop_reason(self, baseline: Sequence[float], compiled: Sequence[float]) -> str | None:
        """Why to stop after these pairs, or None to time more."""
        n = min(len(baseline), len(compiled))
        if n >= self.ceiling:
            return FIXED if self.half_width is None else CEILING
        if self.half_width is None or n < self.floor or (n - self.floor) % self.step:
            return None
        width = relative_half_width(paired_speedup(baseline[:n], compiled[:n]))
        return CONVERGED if width is not None and width <= self.half_width else None

    def describe(self) -> dict[str, object]:
        """The rule's parameters, for the record."""
        if self.half_width is None:
            return {"kind": "fixed", "pairs": self.ceiling}
        return {"kind": "sequential", "half_width": self.half_width, "floor": self.floor, "ceiling": self.ceiling,
                "step": self.step, "interval": "ci95 of paired_speedup (order statistics of the ratios)"}
