"""The statistics the analysis commands share: geometric means and significance tests.

`report`, `compare`'s fair figures and `bisect` each ask the same questions of timings (how
much faster on the whole, is a change more than noise), so the answers live here, owned by
none of them. scipy and numpy are imported only when a test runs, never for a plain report.
"""

from __future__ import annotations

import math
import warnings
from typing import Sequence

from experiment_runner.core.requirements import install_command
from experiment_runner.errors import ReportError

EXACT_MAX_SAMPLES = 50


def geomean(values: Sequence[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def min_two_sided_p(n_a: int, n_b: int) -> float:
    """The smallest exact two-sided Mann-Whitney p-value n_a vs n_b samples can give."""
    return min(1.0, 2.0 / math.comb(n_a + n_b, n_a)) if n_a and n_b else 1.0


def _scipy():
    """numpy and the three scipy.stats functions the tests below use; one line and exit 2 without them."""
    try:
        import numpy as np
        from scipy.stats import false_discovery_control, mannwhitneyu, ttest_ind
    except ImportError:
        raise ReportError(f"compare needs scipy: {install_command(['scipy'])}") from None
    return np, mannwhitneyu, ttest_ind, false_discovery_control


def _batched(pairs: Sequence[tuple[Sequence[float], Sequence[float]]], key, test) -> list[float]:
    """p-values, one scipy call per batch of pairs with the same `key` (sizes, method).

    Batching matters: one call costs about half a millisecond of scipy overhead, which on
    tens of thousands of experiments would dwarf reading the file."""
    np = _scipy()[0]
    batches: dict[tuple, list[int]] = {}
    for i, (a, b) in enumerate(pairs):
        batches.setdefault(key(a, b), []).append(i)
    ps = [1.0] * len(pairs)
    for batch_key, members in batches.items():
        a = np.array([pairs[i][0] for i in members], dtype=float)
        b = np.array([pairs[i][1] for i in members], dtype=float)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # identical samples: scipy warns and returns nan
            pvalues = test(a, b, batch_key)
        for i, p in zip(members, np.atleast_1d(pvalues).tolist()):
            ps[i] = 1.0 if math.isnan(p) else p
    return ps


def mann_whitney_ps(pairs: Sequence[tuple[Sequence[float], Sequence[float]]]) -> list[float]:
    """Two-sided Mann-Whitney U p-values. Exact when valid (no ties) and cheap, so 10 vs 10
    samples can reach p ~ 1.1e-5; scipy's 'auto' switches to the normal approximation
    above 8 samples."""
    mannwhitneyu = _scipy()[1]

    def key(a: Sequence[float], b: Sequence[float]) -> tuple:
        exact = len(set(a) | set(b)) == len(a) + len(b) and max(len(a), len(b)) <= EXACT_MAX_SAMPLES
        return len(a), len(b), exact

    return _batched(pairs, key, lambda a, b, k: mannwhitneyu(
        a, b, axis=1, alternative="two-sided", method="exact" if k[2] else "asymptotic").pvalue)


def welch_log_ps(pairs: Sequence[tuple[Sequence[float], Sequence[float]]]) -> list[float]:
    """Two-sided Welch t-test p-values on the logarithms of per-process medians: timings
    are multiplicative and skewed, their logs close to normal, and the variances of the
    two sides need not be equal."""
    np, _, ttest_ind, _ = _scipy()
    return _batched(pairs, lambda a, b: (len(a), len(b)), lambda a, b, _: ttest_ind(
        np.log(a), np.log(b), axis=1, equal_var=False).pvalue)


def benjamini_hochberg(ps: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (q): q < alpha keeps the expected share of false
    discoveries among the flagged experiments at most alpha."""
    if not ps:
        return []
    false_discovery_control = _scipy()[3]
    return [float(q) for q in false_discovery_control(list(ps), method="bh")]
