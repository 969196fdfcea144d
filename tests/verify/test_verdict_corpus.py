"""A labelled corpus of the cases issue 52 found wrong: every case carries the answer a careful
engineer who knows the truth would give, and why, from the way it was generated (never from the
verifier's rules). The verifier must give that answer in every case, and a verdict in each.

Families: a float64 reference that is NaN/inf at no, some or all positions; losses 1-10% off
float64 with and without eager noise; references of another structure; low-precision leaves of
fewer than 16 elements; sparse and dense layouts; sets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator

import pytest
import torch

from verifier import compare


@dataclass(frozen=True)
class Labelled:
    family: str
    eager: Any
    result: Any
    fp64: Any
    tolerance: float
    answer: bool
    why: str


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def nonfinite_references() -> Iterator[Labelled]:
    """Eager off the truth by fp32 rounding; the result either as close as eager or 10% off eager
    element by element; the reference NaN or inf at none, some or all positions."""
    for seed, size in enumerate((33, 256, 1000)):
        truth = torch.randn(size, generator=gen(seed), dtype=torch.float64)
        eager = truth.float()
        right = (truth * (1 + 1e-7 * torch.randn(size, generator=gen(100 + seed), dtype=torch.float64))).float()
        wrong = eager * (1 + 0.1 * torch.randn(size, generator=gen(200 + seed)))
        for where, count in (("none", 0), ("some", size // 4), ("all", size)):
            for value in (math.nan, math.inf):
                fp64 = truth.clone()
                fp64[:count] = value
                label = f"{size} elements, reference {value} at {where}"
                yield Labelled("non-finite reference", eager, right, fp64, 1e-4, True,
                               f"{label}: the result differs from the truth by rounding, as eager does")
                yield Labelled("non-finite reference", eager, wrong, fp64, 1e-4, False,
                               f"{label}: the result is 10% off eager element by element, 1,000 tolerances")
        yield Labelled("non-finite reference", eager, wrong, None, 1e-4, False,
                       f"{size} elements, no reference: the result is 10% off eager")


def losses() -> Iterator[Labelled]:
    """A bf16 training loss near 1.75 at tolerance 4e-2: off float64 by 1-10%, eager off by 0 or
    1.5% on either side. Within the tolerance (4%) of the truth is right; 5% and beyond is wrong
    where eager itself is within it."""
    truth = 1.7453347
    for eager_off in (0.0, 0.015, -0.015):
        eager = torch.tensor(truth * (1 + eager_off), dtype=torch.bfloat16)
        for off in (0.01, 0.02, 0.03, -0.03, 0.05, -0.056, 0.07, 0.1, -0.1):
            result = torch.tensor(truth * (1 + off), dtype=torch.bfloat16)
            actual = abs(float(result) / truth - 1)
            if 0.035 < actual < 0.05:
                continue  # bf16 rounding puts it too near the 4% line to call
            yield Labelled("loss", {"loss": eager}, {"loss": result},
                           {"loss": torch.tensor(truth, dtype=torch.float64)}, 4e-2, actual <= 0.035,
                           f"loss {actual:.1%} off float64 (eager {eager_off:+.1%}) at tolerance 4%")


def other_structures() -> Iterator[Labelled]:
    """The float64 run returned another structure: the leaves it lacks are judged against eager."""
    truth = torch.randn(64, 64, generator=gen(5), dtype=torch.float64)
    eager = truth.float()
    references = {"a bare tensor": truth, "other keys": {"b": truth}, "a list": {"a": [truth]},
                  "fewer values": {"a": truth[:10]}, "integers": {"a": truth.long()}}
    for name, fp64 in references.items():
        yield Labelled("reference structure", {"a": eager}, {"a": eager * (1 + 1e-6)}, fp64, 1e-3, True,
                       f"reference holds {name}: the result is within a thousandth of the tolerance of eager")
        yield Labelled("reference structure", {"a": eager}, {"a": eager * 1.01}, fp64, 1e-3, False,
                       f"reference holds {name}: a uniform 1% scale error, ten tolerances")


def small_low_precision() -> Iterator[Labelled]:
    """bf16 leaves of 4 and 15 elements at tolerance 1e-2 (the bf16 tolerance), the reference
    finite or NaN at one position."""
    for size in (4, 15):
        truth = torch.randn(size, generator=gen(size), dtype=torch.float64)
        eager = truth.bfloat16()
        for nan_at_one in (False, True):
            fp64 = truth.clone()
            if nan_at_one:
                fp64[0] = math.nan
            label = f"bf16, {size} elements, reference {'NaN at one position' if nan_at_one else 'finite'}"
            yield Labelled("small bf16 leaf", eager, eager.clone(), fp64, 1e-2, True, f"{label}: equal to eager")
            yield Labelled("small bf16 leaf", eager, (truth * 1.3).bfloat16(), fp64, 1e-2, False,
                           f"{label}: 30% off the truth, 30 tolerances")
            yield Labelled("small bf16 leaf", eager, -eager, fp64, 1e-2, False, f"{label}: the sign flipped")


def layouts() -> Iterator[Labelled]:
    dense = torch.randn(16, 16, generator=gen(3)) * (torch.rand(16, 16, generator=gen(4)) > 0.7)
    for to_sparse in (torch.Tensor.to_sparse, torch.Tensor.to_sparse_csr):
        yield Labelled("layout", dense, to_sparse(dense), None, 1e-4, True, "a sparse result with eager's values")
        yield Labelled("layout", to_sparse(dense), dense, None, 1e-4, True, "a dense result with eager's values")
        yield Labelled("layout", dense, to_sparse(dense * 1.1), None, 1e-4, False, "a sparse result 10% off")


def sets() -> Iterator[Labelled]:
    yield Labelled("set", {"ids": {1, 2, 3}}, {"ids": {3, 2, 1}}, None, 1e-4, True, "the same elements")
    yield Labelled("set", {"ids": {1, 2, 3}}, {"ids": {1, 2, 4}}, None, 1e-4, False, "an element differs")
    yield Labelled("set", {"names": {"a", "b"}}, {"names": {"a"}}, None, 1e-4, False, "an element missing")


CORPUS = [*nonfinite_references(), *losses(), *other_structures(), *small_low_precision(), *layouts(), *sets()]


def test_the_corpus_covers_each_family_with_both_answers():
    families = {case.family for case in CORPUS}
    assert families == {"non-finite reference", "loss", "reference structure", "small bf16 leaf", "layout", "set"}
    for family in families:
        assert {case.answer for case in CORPUS if case.family == family} == {True, False}, family


@pytest.mark.parametrize("case", CORPUS, ids=lambda case: f"{case.family}: {case.why}")
def test_the_verdict_is_the_careful_engineers(case: Labelled):
    outcome = compare(case.eager, case.result, case.fp64, tolerance=case.tolerance)
    assert outcome.passed is case.answer, (case.why, outcome.worst)
