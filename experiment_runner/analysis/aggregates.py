"""The dashboard's figures between two runs, over the models both runs measured.

A geomean speedup or pass rate moves when five models time out on a busy night, though no
compiler changed. `compare` therefore puts the two runs' geomean speedup and pass rate side by
side over the models present (with a speedup, or at least a record) on both sides, and lists
every model that counts on one side only, with why: infrastructure (timeout, crash, runner
interruption, out of memory), compiler (the compiled experiment failed or verified FAIL), or
model (its eager baseline failed, or it was skipped).

Each side's geomean says how its speedups were measured (paired in the compiled experiment's
process, isolated across processes, or mixed), and a change of method between the runs is
named: the methods differ by several percent on the same build (docs/timing.md), so a move
that comes with one is not the compiler's alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from experiment_runner.analysis.baselines import ModelResult, pair_with_baselines
from experiment_runner.analysis.loader import Row, speedup_method
from experiment_runner.analysis.stats import geomean

INFRASTRUCTURE = ("timeout", "crashed", "interrupted", "oom")


def why_missing(result: ModelResult) -> str:
    """Why a model has no speedup (or does not pass) in one run: infrastructure, compiler or model."""
    row, base = result.row, result.baseline
    if row.status in INFRASTRUCTURE:
        return f"infrastructure ({row.status})"
    if row.status == "skipped" or base is None or base.status != "ok":
        return f"model ({'skipped' if row.status == 'skipped' else 'eager baseline ' + (base.status if base else 'absent')})"
    if row.status != "ok":
        return f"compiler ({row.status})"
    return f"compiler (verification {row.verification_code})"


@dataclass
class FairFigures:
    """One configuration of one group (suite, accelerator, test, precision) in both runs."""

    group: tuple[str, str, str, str]
    configuration: str
    common: int = 0  # models with a speedup on both sides
    speedups_a: list[float] = field(default_factory=list)
    speedups_b: list[float] = field(default_factory=list)
    paired_a: int = 0  # of the common speedups, how many were paired (ModelResult.method)
    paired_b: int = 0
    harness_a: int = 0  # and how many were timed as PyTorch's harness times them
    harness_b: int = 0
    present: int = 0  # models with a record on both sides
    passed_a: int = 0
    passed_b: int = 0
    checked_a: int = 0  # of those, how many carry a verdict: a record never checked is no pass
    checked_b: int = 0
    missing: list[tuple[str, str, str]] = field(default_factory=list)  # model, side lacking it, why

    def as_dict(self) -> dict[str, Any]:
        return {"suite": self.group[0], "accelerator": self.group[1], "test": self.group[2],
                "precision": self.group[3], "configuration": self.configuration, "common_models": self.common,
                "speedup_geomean_a": geomean(self.speedups_a), "speedup_geomean_b": geomean(self.speedups_b),
                "speedup_method_a": self.method_a, "speedup_method_b": self.method_b,
                "models_on_both_sides": self.present,
                "pass_rate_a": self.passed_a / self.present if self.checked_a else None,
                "pass_rate_b": self.passed_b / self.present if self.checked_b else None,
                "one_side_only": [{"model": m, "lacking_in": side, "why": why} for m, side, why in self.missing]}

    @property
    def method_a(self) -> str | None:
        return speedup_method(self.paired_a, self.common, self.harness_a)

    @property
    def method_b(self) -> str | None:
        return speedup_method(self.paired_b, self.common, self.harness_b)


def fair_figures(rows_a: Sequence[Row], rows_b: Sequence[Row], fixed: dict[str, str | None]) -> list[FairFigures]:
    """Per compiled configuration: speedups and pass rates over the models both runs have."""
    def results(rows: Sequence[Row]) -> dict[tuple, ModelResult]:
        return {(*r.group, r.row.configuration, r.row.model): r for r in pair_with_baselines(rows, fixed)
                if r.baseline is not r.row}

    a, b = results(rows_a), results(rows_b)
    table: dict[tuple, FairFigures] = {}
    for key in sorted(a.keys() | b.keys(), key=lambda k: tuple(map(str, k))):
        group, configuration, model = key[:4], key[4], key[5]
        figures = table.setdefault(key[:5], FairFigures(group, configuration))
        ra, rb = a.get(key), b.get(key)
        if ra is not None and rb is not None:
            figures.present += 1
            figures.passed_a += ra.row.passed
            figures.passed_b += rb.row.passed
            figures.checked_a += ra.row.checked
            figures.checked_b += rb.row.checked
        if ra is not None and rb is not None and ra.speedup is not None and rb.speedup is not None:
            figures.common += 1
            figures.speedups_a.append(ra.speedup)
            figures.speedups_b.append(rb.speedup)
            figures.paired_a += ra.method == "paired"
            figures.paired_b += rb.method == "paired"
            figures.harness_a += ra.method == "harness"
            figures.harness_b += rb.method == "harness"
            continue
        if (ra is None or ra.speedup is None) and (rb is None or rb.speedup is None):
            continue  # in neither geomean: nothing moved
        lacking, side = ("A", ra) if rb is not None and rb.speedup is not None else ("B", rb)
        figures.missing.append((str(model), lacking, "no record" if side is None else why_missing(side)))
    return list(table.values())


def side_pass(passed: int, checked: int, present: int) -> str:
    """One run's pass count: `3/4`, `3/4 (1 not checked)`, or `not checked`."""
    if not checked:
        return "not checked"
    return f"{passed}/{present}" + (f" ({present - checked} not checked)" if checked < present else "")


def render_fair(figures: Sequence[FairFigures]) -> list[str]:
    """The text section of `compare`."""
    if not figures:
        return []
    out = ["dashboard over the models both runs measured (geomean speedup over the eager baseline, pass rate):"]
    for f in figures:
        ga, gb = geomean(f.speedups_a), geomean(f.speedups_b)
        speed = "-" if ga is None or gb is None else f"{ga:.3f}x {f.method_a} -> {gb:.3f}x {f.method_b}"
        passed = "-" if not f.present else f"{side_pass(f.passed_a, f.checked_a, f.present)} -> " \
                                           f"{side_pass(f.passed_b, f.checked_b, f.present)}"
        out.append(f"  {' '.join(f.group)} {f.configuration}: {f.common} model(s) with a speedup in both, "
                   f"{speed}; pass {passed}")
        if f.method_a != f.method_b:
            out.append(f"    the speedups were measured differently ({f.method_a} in A, {f.method_b} in B): "
                       "part of this move is the method's, not the compiler's")
        out.extend(f"    {model}: counts in one run only, lacking in {side}: {why}" for model, side, why in f.missing)
    return out + [""]
