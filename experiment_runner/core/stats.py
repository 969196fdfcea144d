"""Robust summaries of timing samples: medians with spread and an instability flag."""

from __future__ import annotations

import statistics
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
