"""How often the verifier's `compare` agrees with `torch._dynamo.utils.same`, and why not.

Generates a randomized corpus of (eager, result, float64 reference, tolerance) cases in
families that mirror real outputs (float tensors with known noise, NaN and inf, integer and
bool tensors, large integers, integers under cosine, nested structures, ModelOutput /
namedtuple / dataclass containers, training dicts of loss, output, gradients and
parameters, Python scalars, 0-d and empty tensors, float64-run leaves that are not float64,
non-finite references, sparse / float8 / meta / nested tensors, references of another shape or
that do not track eager, low-precision leaves no reference speaks for), judges each with both, and
classifies every disagreement by the leaf where the two first part ways. A disagreement no
known cause explains is listed as UNEXPLAINED and makes the exit status 1.

`same` is called the way PyTorch's harness calls it: equal_nan=True, and cosine similarity
when the float64 reference could not be computed (the harness then sets cos_similarity);
an exception from `same` (its way of rejecting mismatched keys, types or shapes, or a
tensor kind it cannot handle) counts as a fail.

    python benchmarks/verifier_agreement.py [--cases 4000] [--seed 0] [--json | --markdown | --update-docs]

--markdown prints the table docs/benchmarks/verifier_agreement.md shows; --update-docs
(formerly --update-readme, still accepted) writes it there, between the verifier-agreement markers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import random
import re
import sys
from collections import Counter, namedtuple
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch._dynamo.utils import same

from verifier.closeness import ASTRAY, COSINE_MIN_ELEMENTS, COSINE_THRESHOLD, TRACKING_FACTOR, compare

DOC = Path(__file__).parents[1] / "docs" / "benchmarks" / "verifier_agreement.md"
MARKERS = ("<!-- verifier-agreement:begin -->", "<!-- verifier-agreement:end -->")
DTYPES = (torch.float32, torch.float32, torch.float16, torch.bfloat16)
TOLERANCES = (1e-4, 1e-3, 1e-2, 4e-2)
SHAPES = ((1,), (7,), (500,), (999,), (1000,), (64, 64), (2, 8, 1, 1), (3, 5, 7))

# Why `compare` and `same` may disagree, by design or by arithmetic. Keyed by the name
# explain() returns; the docs' table prints these.
CAUSES = {
    "fp64_not_float64": "the float64 run gave this leaf in another dtype (a loss built with `.float()`): same "
                        "skips its RMSE rule unless the reference is float64, so only allclose decides; compare "
                        "upcasts the reference and applies the RMSE rule.",
    "small_leaf_cosine": f"cosine similarity would decide a leaf of fewer than {COSINE_MIN_ELEMENTS} elements: "
                         "same passes any value of the same direction (a scalar loss of the same sign); compare "
                         "uses the RMSE rule, or allclose without a reference.",
    "fp64_nonfinite": "the float64 reference is NaN or inf where eager is finite: same's RMSEs become NaN or inf "
                      "and it passes whatever the result is; compare judges those positions against eager alone "
                      "(allclose at the tolerance).",
    "no_reference": "the float64 run failed: PyTorch's harness then sets cosine similarity, which passes a result "
                    "10% off eager element by element (cosine 0.996); compare judges against eager alone "
                    "(allclose at the tolerance).",
    "cosine_scale": "cosine similarity decides (the model's rule chooses it) and the result is eager scaled: same "
                    "passes any scale; compare also requires the result's scale along eager within 1 ± 0.1.",
    "scalar_rule": "a one-element leaf (a loss) with a finite float64 reference: same passes it when allclose does "
                   "(a band of tol × (1 + |value|)) or by its RMSE rule; compare's scalar rule allows tol × |fp64| "
                   "(and, where eager itself is further off, the multiplier times eager's excess over that).",
    "shared_nan_rmse": "eager and result have NaN in the same places and allclose fails elsewhere: same's RMSEs "
                       "are NaN and equal_nan passes; compare computes the RMSE over the finite positions.",
    "shared_nan_cosine": "eager and result have NaN in the same places and cosine decides: same's cosine "
                         "similarity over NaN is NaN and fails; compare leaves the shared NaN out.",
    "inf_mismatch": "eager has an infinity where the result is finite: same's RMSE of eager becomes inf, so any "
                    "finite result passes its RMSE rule; compare requires the same infinities.",
    "shared_inf": "eager and result have the same infinities and allclose fails elsewhere: same's RMSEs become "
                  "inf or NaN (inf - inf); compare measures the finite positions.",
    "eager_nan_only": "eager has NaN where the result and float64 do not: same passes a result within 4e-2 of "
                      "float64 (its Super_SloMo special case); compare requires eager and result to agree on NaN "
                      "positions, since an eager NaN leaves the comparison without a baseline.",
    "python_float": "Python float leaves: same turns them (and the float64 reference) into float32 tensors, so "
                    "rounding can hide a difference and only allclose decides; compare keeps float64 and applies "
                    "the RMSE rule.",
    "int_tolerance": "integer tensors: same's allclose accepts integers within tol × their value (a token id or count "
                     "off by thousands when values are large); compare requires equality.",
    "int_cosine": "integer or bool tensors with cosine chosen: same converts them to float32 and judges the "
                  "direction; compare requires equality.",
    "broadcast_shape": "shapes differ but broadcast: same's allclose broadcasts and may pass; compare fails any "
                       "shape mismatch.",
    "dataclass": "a dataclass output: same raises (unsupported type) and fails; compare walks its fields.",
    "kind_float8": "float8 tensors: same's allclose has no float8 kernel and raises; compare upcasts to float32.",
    "kind_meta": "meta tensors: same's allclose raises (no data); compare checks shape and dtype and notes that "
                 "no values were compared.",
    "kind_nested": "nested tensors: same raises; compare judges each component.",
    "kind_sparse": "compressed sparse (CSR) tensors: same densifies only COO and its allclose raises on CSR; "
                   "compare densifies every sparse layout.",
    "cosine_rounding": "cosine similarity within 1e-4 of 0.99: same computes it in float32, compare in float64.",
    "reference_shape": "the float64 run's leaf holds as many values in another shape: same's RMSE broadcasts or "
                       "raises; compare never reshapes it and judges against eager alone.",
    "untracked_reference": f"eager is more than {TRACKING_FACTOR:g} tolerances (or dtype eps) off the float64 "
                           "reference in allclose's units (another branch or order): same takes that error as noise "
                           "and passes anything within a multiple of it (zeros against an unrelated run); compare "
                           "judges against eager alone (at the positions that are over ASTRAY = 0.5 of 1 + |fp64| "
                           "off where the rest tracks).",
}


@dataclass
class Case:
    family: str
    ref: Any
    res: Any
    fp64: Any
    tol: float
    cosine: bool
    truth: Any = None  # what the outputs should be, where the float64 reference given is not it
    label: bool | None = None  # the answer, where the generator made the case right or wrong on purpose
    why: str = ""

    @property
    def known_truth(self) -> Any:
        return self.fp64 if self.truth is None else self.truth


Pair = namedtuple("Pair", "logits hidden")


@dataclass
class Prediction:
    scores: torch.Tensor
    boxes: torch.Tensor


def _gen(rng: random.Random) -> torch.Generator:
    return torch.Generator().manual_seed(rng.randrange(2**31))


def _noise(rng: random.Random, truth: torch.Tensor, sigma: float, dtype: torch.dtype) -> torch.Tensor:
    return (truth + sigma * torch.randn(truth.shape, generator=_gen(rng), dtype=torch.float64)).to(dtype)


def _triple(rng: random.Random, shape: tuple[int, ...], dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """Eager and result each off the float64 truth by their own noise, the result sometimes
    also scaled (a miscompile)."""
    truth = torch.randn(shape, generator=_gen(rng), dtype=torch.float64) * rng.choice((1e-3, 1.0, 100.0))
    sigma = 10 ** rng.uniform(-7, -1) * float(truth.abs().mean() if truth.numel() else 1.0)
    eager = _noise(rng, truth, sigma, dtype)
    result = _noise(rng, truth, sigma * rng.choice((0.0, 0.5, 1.0, 1.9, 2.1, 2.9, 3.1, 5.0, 50.0)), dtype)
    if rng.random() < 0.2:
        result = result * (1 + rng.choice((1e-4, 1e-3, 1e-2, -1e-2, 0.5, -2.0)))
    return eager, result, truth


def tensor_case(rng: random.Random) -> Case:
    eager, result, truth = _triple(rng, rng.choice(SHAPES), rng.choice(DTYPES))
    fp64 = None if rng.random() < 0.1 else truth
    return Case("float tensor", eager, result, fp64, rng.choice(TOLERANCES), rng.random() < 0.15, truth)


def _poke(t: torch.Tensor | None, places: list[int], value: float) -> torch.Tensor | None:
    if t is None:
        return None
    t = t.clone()
    t.view(-1)[places] = value
    return t


def nonfinite_case(rng: random.Random, value: float, family: str) -> Case:
    """NaN or inf injected into some of eager, result and the float64 reference."""
    case = tensor_case(rng)
    case.family = family
    places = [rng.randrange(case.ref.numel()) for _ in range(rng.randint(1, 3))]
    where = rng.choice(("ref+res", "ref+res", "res", "ref", "fp64", "all"))
    for name in ("ref", "res", "fp64"):
        if name in where or where == "all":
            setattr(case, name, _poke(getattr(case, name), places, value))
    return case


def nan_case(rng: random.Random) -> Case:
    return nonfinite_case(rng, float("nan"), "NaN")


def inf_case(rng: random.Random) -> Case:
    return nonfinite_case(rng, rng.choice((float("inf"), float("-inf"))), "inf")


def fp64_nonfinite_case(rng: random.Random) -> Case:
    """The float64 run overflowed: all NaN, or inf in places."""
    eager, result, truth = _triple(rng, rng.choice(SHAPES), torch.float32)
    fp64 = torch.full_like(truth, float("nan")) if rng.random() < 0.5 else _poke(
        truth, [rng.randrange(truth.numel()) for _ in range(3)], float("inf"))
    return Case("non-finite float64 reference", eager, result, fp64, rng.choice(TOLERANCES), False, truth)


def _integers(rng: random.Random, high: int, family: str, cosine: bool) -> Case:
    ref = torch.randint(0, high, (rng.choice((1, 10, 100)),), generator=_gen(rng))
    if high <= 5 and rng.random() < 0.5:
        ref = ref > 2
    res = ref.clone()
    if rng.random() < 0.5:
        first = res.view(-1)[0]
        res.view(-1)[0] = ~first if res.dtype == torch.bool else first + rng.choice((1, 1000))
    return Case(family, ref, res, ref, rng.choice(TOLERANCES), cosine)


def int_case(rng: random.Random) -> Case:
    return _integers(rng, 5, "int/bool tensor", False)


def large_int_case(rng: random.Random) -> Case:
    return _integers(rng, 2**40, "large integers", False)


def int_cosine_case(rng: random.Random) -> Case:
    return _integers(rng, 5 if rng.random() < 0.5 else 2**20, "integers under cosine", True)


def structure_case(rng: random.Random) -> Case:
    """Nested dicts and lists, sometimes with a key, length, dtype or shape mismatch."""
    leaves = [tensor_case(rng) for _ in range(3)]
    tol = leaves[0].tol
    ref = {"logits": leaves[0].ref, "hidden": [leaves[1].ref, leaves[2].ref.float()]}
    res = {"logits": leaves[0].res.to(leaves[0].ref.dtype), "hidden": [leaves[1].res, leaves[2].res.float()]}
    fp64 = {"logits": leaves[0].fp64, "hidden": [leaves[1].fp64, leaves[2].fp64]}
    truth = {"logits": leaves[0].truth, "hidden": [leaves[1].truth, leaves[2].truth]}
    if any(v is None for v in (fp64["logits"], *fp64["hidden"])):
        fp64 = None
    fault = rng.choice(("none", "none", "key", "length", "dtype", "shape", "broadcast"))
    if fault == "key":
        res["extra"] = res.pop("logits")
    elif fault == "length":
        res["hidden"] = res["hidden"][:1]
    elif fault == "dtype":
        res["hidden"][1] = res["hidden"][1].double()
    elif fault == "shape":
        res["hidden"][1] = res["hidden"][1].reshape(-1)[:-1] if res["hidden"][1].numel() > 1 else torch.zeros(2)
    elif fault == "broadcast":
        res["hidden"][1] = res["hidden"][1].reshape(-1)[:1].clone()
    return Case(f"structure/{fault}", ref, res, fp64, tol, False, truth)


def container_case(rng: random.Random) -> Case:
    """ModelOutput, namedtuple and dataclass outputs around float leaves."""
    from transformers.modeling_outputs import CausalLMOutput

    kind = rng.choice(("ModelOutput", "namedtuple", "dataclass"))
    dtype, tol = rng.choice(DTYPES), rng.choice(TOLERANCES)
    (a1, b1, t1), (a2, b2, t2) = _triple(rng, (64, 64), dtype), _triple(rng, (7,), dtype)
    build = {"ModelOutput": lambda x, y: CausalLMOutput(logits=x, hidden_states=(y,)),
             "namedtuple": lambda x, y: Pair(x, y), "dataclass": lambda x, y: Prediction(x, y)}[kind]
    return Case(f"container/{kind}", build(a1, a2), build(b1, b2), build(t1, t2), tol, rng.random() < 0.15)


def training_case(rng: random.Random) -> Case:
    """What the verifier compares after a training step: loss, output, grads and params.
    The float64 run's loss is float32 when the suite's loss calls `.float()`."""
    dtype, tol = rng.choice(DTYPES), rng.choice(TOLERANCES)
    parts = {"output": _triple(rng, (8, 10), dtype), "grads.w": _triple(rng, (10, 16), dtype),
             "grads.b": _triple(rng, (10,), dtype), "params.w": _triple(rng, (10, 16), dtype),
             "params.b": _triple(rng, (10,), dtype)}
    truth = rng.gauss(0, 3)
    sigma = 10 ** rng.uniform(-7, -2)
    loss = (torch.tensor(truth + rng.gauss(0, sigma)), torch.tensor(truth + rng.gauss(0, sigma) * rng.choice((
        1, 2.5, 10))) * rng.choice((1.0, 1.0, 1.5, 3.0)), torch.tensor(truth, dtype=rng.choice((
            torch.float32, torch.float64))))

    def tree(i: int) -> dict[str, Any]:
        return {"loss": loss[i], "output": parts["output"][i],
                "grads": {"w": parts["grads.w"][i], "b": parts["grads.b"][i]},
                "params": {"w": parts["params.w"][i], "b": parts["params.b"][i]}}

    return Case("training dict", tree(0), tree(1), tree(2), tol, False)


def scalar_case(rng: random.Random) -> Case:
    """Python floats, as a loss or a metric might be returned."""
    truth = rng.gauss(0, 1)
    eager = truth + rng.gauss(0, 10 ** rng.uniform(-8, -2))
    result = (truth + rng.gauss(0, 10 ** rng.uniform(-8, -2))) * rng.choice((1.0, 1.0, 3.0))
    return Case("python float", eager, result, truth, rng.choice(TOLERANCES), rng.random() < 0.15)


def tiny_case(rng: random.Random) -> Case:
    """0-d and empty tensors, and leaves of a few elements."""
    shape = rng.choice(((), (0,), (0, 3), (2,), (15,), (16,)))
    eager, result, truth = _triple(rng, shape, rng.choice(DTYPES))
    if rng.random() < 0.3 and result.numel():
        result = result * rng.choice((3.0, -1.0))
    return Case("0-d/empty/small", eager, result, None if rng.random() < 0.3 else truth,
                rng.choice(TOLERANCES), rng.random() < 0.3, truth)


def reference_dtype_case(rng: random.Random) -> Case:
    """The float64 run's leaf came back float32 or bfloat16 (a cast inside the model)."""
    eager, result, truth = _triple(rng, rng.choice(SHAPES), torch.float32)
    return Case("float64 leaf not float64", eager, result, truth.to(rng.choice((torch.float32, torch.bfloat16))),
                rng.choice(TOLERANCES), False, truth)


def kind_case(rng: random.Random) -> Case:
    """Sparse, float8, meta and nested tensors."""
    kind = rng.choice(("sparse_coo", "sparse_csr", "float8", "meta", "nested"))
    eager, result, truth = _triple(rng, (16, 16), torch.float32)
    if kind == "meta":
        return Case(kind, torch.empty(16, 16, device="meta"), torch.empty(16, 16, device="meta"), None, 1e-3, False)
    if kind == "nested":
        def nest(t: torch.Tensor) -> torch.Tensor:
            return torch.nested.nested_tensor([t[:5].flatten(), t[5:].flatten()], layout=torch.jagged)
        return Case(kind, nest(eager), nest(result), nest(truth), rng.choice(TOLERANCES), False)
    convert = {"sparse_coo": torch.Tensor.to_sparse, "sparse_csr": torch.Tensor.to_sparse_csr,
               "float8": lambda t: t.to(torch.float8_e4m3fn)}[kind]
    return Case(kind, convert(eager), convert(result), truth if kind == "float8" else convert(truth),
                rng.choice(TOLERANCES), False, truth)


def _wrong(rng: random.Random, eager: torch.Tensor, truth: torch.Tensor, tol: float) -> tuple[torch.Tensor, str]:
    """A result wrong on purpose: negated or zeros where that puts it at least ten tolerances (or
    dtype eps) off the truth in allclose's units (RMS), else off eager by twenty of them at every
    position."""
    kind = rng.choice(("offset", "negated", "zeros"))
    bar = max(tol, torch.finfo(eager.dtype).eps)
    result = -eager if kind == "negated" else torch.zeros_like(eager)
    units = float(((result.double() - truth).abs() / (1 + truth.abs())).square().mean().sqrt())
    if kind == "offset" or units < 10 * bar:
        e = eager.double()
        return (e + rng.choice((1, -1)) * 20 * bar * (1 + e.abs())).to(eager.dtype), (
            f"offset by {20 * bar:.3g} x (1 + |eager|)")
    return result, f"{kind}, {units / bar:.3g} tolerances off the truth"


def _near(rng: random.Random, truth: torch.Tensor, tol: float, dtype: torch.dtype) -> torch.Tensor:
    """A run off the truth by a tenth of the tolerance at most (relative), rounded once to dtype."""
    rel = min(tol / 10, 1e-3) * 10 ** rng.uniform(-3, 0) / 4
    return (truth * (1 + rel * torch.randn(truth.shape, generator=_gen(rng), dtype=torch.float64))).to(dtype)


def reshaped_reference_case(rng: random.Random) -> Case:
    """Issue 70: the float64 run's leaf holds as many values in another shape (a transpose): it
    cannot speak for the leaf, so only a result within the tolerance of eager is right."""
    shape = rng.choice(((8, 2), (64, 16), (3, 5, 7), (2, 500)))
    tol, dtype = rng.choice(TOLERANCES), rng.choice(DTYPES)
    truth = torch.randn(shape, generator=_gen(rng), dtype=torch.float64) * rng.choice((1.0, 100.0))
    eager = _near(rng, truth, tol, dtype)
    fp64 = truth.transpose(0, -1).contiguous()
    if rng.random() < 0.5:
        return Case("reference of another shape", eager, _near(rng, truth, tol, dtype), fp64, tol, False, truth,
                    True, "the result is off the truth by a tenth of the tolerance, rounded once, as eager")
    result, how = _wrong(rng, eager, truth, tol)
    return Case("reference of another shape", eager, result, fp64, tol, False, truth, False, f"the result is {how}")


def untracked_reference_case(rng: random.Random) -> Case:
    """Issue 70: the float64 run took another branch (an unrelated tensor, a block of it, or its
    negation) for an output eager computed to its precision."""
    shape, tol, dtype = rng.choice(SHAPES), rng.choice(TOLERANCES), rng.choice(DTYPES)
    truth = torch.randn(shape, generator=_gen(rng), dtype=torch.float64) * rng.choice((1.0, 100.0))
    eager = _near(rng, truth, tol, dtype)
    branch = rng.choice(("unrelated", "negated", "block"))
    fp64 = (torch.randn(shape, generator=_gen(rng), dtype=torch.float64) * truth.abs().max() if branch == "unrelated"
            else -truth if branch == "negated" else truth.clone())
    if branch == "block":
        fp64.view(-1)[: max(1, truth.numel() // 4)] += 10 * truth.abs().max() + 10
    family = f"reference that does not track eager/{branch}"
    if rng.random() < 0.5:
        return Case(family, eager, _near(rng, truth, tol, dtype), fp64, tol, False, truth, True,
                    "the result is off the truth by a tenth of the tolerance, rounded once, as eager")
    result, how = _wrong(rng, eager, truth, tol)
    return Case(family, eager, result, fp64, tol, False, truth, False, f"the result is {how}")


def low_precision_case(rng: random.Random) -> Case:
    """Issue 70: bf16/fp16 leaves computed in float32 and rounded once, by eager and the result
    alike (so one rounding step apart at most), where no reference speaks (none, NaN/inf at some
    or all positions), and a bf16/fp16 loss against a float64 one; or a result twenty tolerances
    off at some positions, among them those the reference does not cover."""
    dtype, tol = rng.choice((torch.bfloat16, torch.float16)), rng.choice(TOLERANCES)
    shape = rng.choice(((), (1,), (7,), (500,), (64, 64)))
    truth = torch.randn(shape, generator=_gen(rng), dtype=torch.float64) * rng.choice((1e-2, 1.0, 100.0))
    eager = (truth * (1 + 1e-6 * torch.randn(shape, generator=_gen(rng), dtype=torch.float64))).to(dtype)
    places = rng.sample(range(truth.numel()), k=min(truth.numel(), rng.randint(1, 3)))
    reference = rng.choice(("none", "all NaN", "some NaN", "some inf", "float64"))
    fp64 = None if reference == "none" else _poke(truth, places, {"all NaN": math.nan, "some NaN": math.nan,
                                                                  "some inf": math.inf}.get(reference, 0.0))
    if reference == "float64":
        fp64 = truth
    elif reference == "all NaN":
        fp64 = torch.full_like(truth, math.nan)
    family = f"low precision/{reference}"
    if rng.random() < 0.5:
        result = (truth * (1 + 1e-6 * torch.randn(shape, generator=_gen(rng), dtype=torch.float64))).to(dtype)
        return Case(family, eager, result, fp64, tol, False, truth, True,
                    f"eager and the result each round a float32 value of the truth to {dtype}")
    # With a float64 reference the RMSE rule judges the leaf as a whole, as the harness does: a few
    # wrong positions in a large leaf are not clear to it, so the result is then wrong everywhere.
    e = eager.double()
    off = 20 * max(tol, torch.finfo(dtype).eps)
    wrong = e.clone()
    where = list(range(e.numel())) if reference == "float64" else places
    wrong.view(-1)[where] += rng.choice((1, -1)) * off * (1 + e.view(-1)[where].abs())
    return Case(family, eager, wrong.to(dtype), fp64, tol, False, truth, False,
                f"the result is {off:.3g} x (1 + |eager|) off at {len(where)} of {e.numel()} positions")


GENERATORS: list[tuple[float, Callable[[random.Random], Case]]] = [
    (0.17, tensor_case), (0.03, reshaped_reference_case), (0.03, untracked_reference_case),
    (0.03, low_precision_case), (0.08, nan_case), (0.06, inf_case), (0.05, fp64_nonfinite_case), (0.03, int_case),
    (0.04, large_int_case), (0.04, int_cosine_case), (0.08, structure_case), (0.07, container_case),
    (0.10, training_case), (0.04, scalar_case), (0.06, tiny_case), (0.05, reference_dtype_case),
    (0.04, kind_case),
]


def draw(rng: random.Random) -> Case:
    pick = rng.random()
    for weight, generator in GENERATORS:
        if pick < weight:
            return generator(rng)
        pick -= weight
    return GENERATORS[-1][1](rng)


# A clear case's answer, from the truth the generator knows (never from either verifier's rules).
# Wrong: the result is off the truth by at least WRONG_FACTOR times eager's own error (as an RMSE
# and in allclose's units |x - truth| / (1 + |truth|)) and times the tolerance (or the leaf
# dtype's precision, where that is coarser; where the model's rule chooses cosine similarity, also
# twice the error it accepts); NaN or inf where eager and the truth are finite;
# unequal integers; another structure. Right: as close to the truth as eager (or within a tenth
# of the tolerance) and within the tolerance of eager, as the evidence shows it; a one-element
# leaf (a loss): as close to the truth as eager or within the tolerance of it (relative), and
# within the tolerance of eager unless a finite float64 reference is given to show it. Anything
# between is not clear: a careful engineer would not call it either way.
WRONG_FACTOR = 10.0


def answer(case: Case) -> tuple[bool | None, str]:
    """What a careful engineer who knows the truth would say of the case (None: not clear), and why."""
    if case.label is not None:
        return case.label, case.why
    ref, res = _fields(case.ref), _fields(case.res)
    leaves, given = _leaves(ref, res, _fields(case.known_truth)), _leaves(ref, res, _fields(case.fp64))
    if leaves is None or given is None:
        return False, "the result's structure differs from eager's"
    verdicts = [_leaf_answer(ref, res, truth, fp64, case.tol, case.cosine)
                for (ref, res, truth), (_, _, fp64) in zip(leaves, given)]
    wrong = [why for ok, why in verdicts if ok is False]
    if wrong:
        return False, wrong[0]
    if all(ok for ok, _ in verdicts):
        return True, "every leaf is as close to the truth as eager's and within the tolerance of eager"
    return None, next(why for ok, why in verdicts if ok is None)


def _fields(value: Any) -> Any:
    """A dataclass's or ModelOutput's fields as a dict, so that _leaves can align them."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {k: _fields(v) for k, v in value.items()}
    return value


def _dense(value: Any) -> Any:
    if isinstance(value, float):
        return torch.tensor(value, dtype=torch.float64)
    if isinstance(value, torch.Tensor):
        if value.is_nested:
            return torch.cat([c.flatten() for c in value.unbind()])
        if value.layout != torch.strided:
            return value.to_dense()
        if value.dtype.is_floating_point and value.dtype.itemsize == 1:
            return value.float()
    return value


def _units(x: torch.Tensor, truth: torch.Tensor, where: torch.Tensor) -> float:
    error = (x - truth).abs() / (1 + truth.abs())
    return float(error[where].square().mean().sqrt())


def _rmse_of(x: torch.Tensor, truth: torch.Tensor, where: torch.Tensor) -> float:
    return float((x - truth)[where].square().mean().sqrt())


def _leaf_answer(ref: Any, res: Any, truth: Any, fp64: Any, tol: float, cosine: bool) -> tuple[bool | None, str]:
    ref, res, truth, fp64 = _dense(ref), _dense(res), _dense(truth), _dense(fp64)
    if not isinstance(ref, torch.Tensor) or not ref.is_floating_point():
        same_value = type(ref) is type(res) and (ref.equal(res) if isinstance(ref, torch.Tensor) and isinstance(
            res, torch.Tensor) and ref.shape == res.shape and ref.dtype == res.dtype else ref == res)
        return bool(same_value), "exact values" if same_value else "integer or other exact values differ"
    if not isinstance(res, torch.Tensor) or res.shape != ref.shape or res.dtype != ref.dtype:
        return False, "a leaf's type, shape or dtype differs from eager's"
    if ref.is_meta or not isinstance(truth, torch.Tensor) or truth.numel() != ref.numel():
        return None, "no values or no truth to judge by"
    a, b, t = ref.double(), res.double(), truth.double().reshape(ref.shape)
    placed = a.isfinite() & t.isfinite()
    if (placed & ~b.isfinite()).any():
        return False, "NaN or inf in the result where eager and the truth are finite"
    if ((~a.isfinite() | ~b.isfinite()) & ~((a == b) | (a.isnan() & b.isnan()))).any():
        return None, "eager is NaN or inf where the result differs from it"
    where = placed & b.isfinite()
    if not where.any():
        return None, "no position where eager and the truth are both finite"
    eager_units, result_units = _units(a, t, where), _units(b, t, where)
    far = (result_units >= WRONG_FACTOR * max(tol, torch.finfo(ref.dtype).eps, eager_units)
           and _rmse_of(b, t, where) >= WRONG_FACTOR * _rmse_of(a, t, where))
    if far and cosine and a.numel() >= COSINE_MIN_ELEMENTS:
        # A leaf the model's rule judges by cosine similarity is that noisy: the rule accepts an error
        # of sin(arccos 0.99) = 14% of the tensor's norm, so clearly wrong is also twice that.
        norm = float(t[where].norm()) or 1.0
        result_rel = float((b - t)[where].norm()) / norm
        far = result_rel >= 2 * math.sqrt(1 - COSINE_THRESHOLD**2)
    if far:
        return False, (f"the result is {result_units / tol:.3g} tolerances off the truth, over {WRONG_FACTOR:g} "
                       "times the tolerance and eager's own error")
    near_eager = torch.allclose(a[where], b[where], atol=tol, rtol=tol)
    if a.numel() == 1:
        shown = near_eager or (isinstance(fp64, torch.Tensor) and fp64.numel() == 1 and bool(fp64.isfinite().all())
                               and torch.finfo(fp64.dtype).eps <= torch.finfo(ref.dtype).eps)
        right = shown and float((b - t).abs().max()) <= max(float((a - t).abs().max()), tol * float(t.abs().max()))
    else:
        right = result_units <= max(eager_units, tol / 10) and near_eager
    return (True, "as close as eager") if right else (None, "between clearly right and clearly wrong")


def verdict_same(ref: Any, res: Any, fp64: Any, tol: float, cosine: bool) -> tuple[bool, bool]:
    """same's verdict, and whether it raised."""
    try:
        return bool(same(ref, res, fp64, cos_similarity=cosine or fp64 is None, tol=tol, equal_nan=True)), False
    except Exception:  # noqa: BLE001 - an exception is same's way of failing
        return False, True


def verdict_compare(ref: Any, res: Any, fp64: Any, tol: float, cosine: bool) -> bool:
    return compare(ref, res, fp64, tolerance=tol, cosine=cosine).passed


def _leaves(ref: Any, res: Any, fp64: Any) -> list[tuple[Any, Any, Any]] | None:
    """Aligned (eager, result, float64) leaves, or None where the structures differ."""
    if dataclasses.is_dataclass(ref) and not isinstance(ref, type):
        return None
    if isinstance(ref, Mapping):
        if not isinstance(res, Mapping) or set(ref) != set(res):
            return None
        out: list[tuple[Any, Any, Any]] = []
        for key in ref:
            sub = _leaves(ref[key], res[key], fp64[key] if isinstance(fp64, Mapping) else None)
            if sub is None:
                return None
            out += sub
        return out
    if isinstance(ref, (list, tuple)):
        if not isinstance(res, (list, tuple)) or len(ref) != len(res):
            return None
        fp64s = list(fp64) if isinstance(fp64, (list, tuple)) else [None] * len(ref)
        out = []
        for a, b, g in zip(ref, res, fp64s):
            sub = _leaves(a, b, g)
            if sub is None:
                return None
            out += sub
        return out
    return [(ref, res, fp64)]


def explain(case: Case) -> str:
    """The known cause behind a disagreement, from the first leaf where the two part ways."""
    if dataclasses.is_dataclass(case.ref):
        return "dataclass"
    leaves = _leaves(case.ref, case.res, case.fp64)
    if leaves is None:
        return "UNEXPLAINED"
    for ref, res, fp64 in leaves:
        ours = verdict_compare(ref, res, fp64, case.tol, case.cosine)
        theirs, _ = verdict_same(ref, res, fp64, case.tol, case.cosine)
        if ours != theirs:
            return explain_leaf(ref, res, fp64, case)
    return "UNEXPLAINED"


def explain_leaf(ref: Any, res: Any, fp64: Any, case: Case) -> str:
    if _scalar_rule_decides(ref, res, fp64):
        return "scalar_rule"
    if isinstance(ref, float):
        return "python_float"
    if not isinstance(ref, torch.Tensor) or not isinstance(res, torch.Tensor):
        return "UNEXPLAINED"
    if ref.is_nested:
        return "kind_nested"
    if ref.is_meta:
        return "kind_meta"
    if ref.layout != torch.strided:
        return "kind_sparse"
    if ref.dtype.is_floating_point and ref.dtype.itemsize == 1:
        return "kind_float8"
    if ref.shape != res.shape:
        try:
            torch.broadcast_shapes(ref.shape, res.shape)
            return "broadcast_shape"
        except RuntimeError:
            return "UNEXPLAINED"
    if not ref.is_floating_point():
        return "int_cosine" if case.cosine or fp64 is None else "int_tolerance"
    if isinstance(fp64, torch.Tensor) and fp64.shape != ref.shape:
        return "reference_shape"
    if fp64 is None and not case.cosine:
        return "no_reference"
    cosine = case.cosine or fp64 is None
    a, b = ref.double(), res.double()
    nan_a, nan_b = a.isnan(), b.isnan()
    if fp64 is not None and (~fp64.double().isfinite() & a.isfinite()).any():
        return "fp64_nonfinite"
    if (nan_a & ~nan_b).any():
        return "eager_nan_only"
    if (nan_a & nan_b).any():
        return "shared_nan_cosine" if cosine else "shared_nan_rmse"
    if ((a.isinf() | b.isinf()) & (a != b)).any():
        return "inf_mismatch"
    if (a.isinf() & (a == b)).any():
        return "shared_inf"
    if fp64 is not None and _untracked(a, fp64.double(), TRACKING_FACTOR * max(case.tol, torch.finfo(ref.dtype).eps)):
        return "untracked_reference"
    if cosine and ref.numel() < COSINE_MIN_ELEMENTS:
        return "small_leaf_cosine"
    if fp64 is not None and fp64.dtype != torch.float64:
        return "fp64_not_float64"
    if cosine:
        score = torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0, eps=1e-6)
        if abs(float(score) - 0.99) < 1e-4:
            return "cosine_rounding"
        if float(score) >= 0.99:
            return "cosine_scale"
    return "UNEXPLAINED"


def _untracked(a: torch.Tensor, g: torch.Tensor, bound: float) -> bool:
    """Whether eager is off the float64 reference, in allclose's units where both are finite, by
    more than `bound` in RMS or by more than ASTRAY (and `bound`) at some position."""
    where = a.isfinite() & g.isfinite()
    units = ((a - g).abs() / (1 + g.abs()))[where]
    return bool(where.any()) and (float(units.square().mean().sqrt()) > bound or bool(
        (units > max(ASTRAY, bound)).any()))


def _scalar_rule_decides(ref: Any, res: Any, fp64: Any) -> bool:
    """A one-element float leaf with a finite float64 reference (and a finite eager value)."""
    if fp64 is None or not isinstance(ref, (float, torch.Tensor)) or not torch.as_tensor(ref).is_floating_point():
        return False
    a, b, g = (torch.as_tensor(v).double() for v in (ref, res, fp64))
    if a.numel() != 1 or a.shape != b.shape or g.numel() != 1:
        return False
    return bool(g.isfinite().all() and a.isfinite().all())


def run(cases: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    per_family: Counter[str] = Counter()
    agreed: Counter[str] = Counter()
    directions: Counter[tuple[str, str]] = Counter()
    clear: Counter[str] = Counter()
    errors: Counter[tuple[str, str, str]] = Counter()
    passes = 0
    for _ in range(cases):
        case = draw(rng)
        ours = verdict_compare(case.ref, case.res, case.fp64, case.tol, case.cosine)
        theirs, _ = verdict_same(case.ref, case.res, case.fp64, case.tol, case.cosine)
        expected, _ = answer(case)
        if expected is not None:
            clear["right" if expected else "wrong"] += 1
            for who, verdict in (("compare", ours), ("same", theirs)):
                if verdict != expected:
                    errors[(who, "wrong PASS" if verdict else "wrong FAIL", case.family)] += 1
        per_family[case.family] += 1
        passes += ours
        if ours == theirs:
            agreed[case.family] += 1
        else:
            verdicts = f"compare {'PASS' if ours else 'FAIL'}, same {'PASS' if theirs else 'FAIL'}"
            directions[(explain(case), verdicts)] += 1
    return {
        "cases": cases, "seed": seed, "agreement": sum(agreed.values()) / cases,
        "compare_pass_rate": passes / cases,
        "per_family": {f: {"cases": n, "agreement": agreed[f] / n} for f, n in sorted(per_family.items())},
        "disagreements": [{"cause": cause, "direction": direction, "cases": n}
                          for (cause, direction), n in directions.most_common()],
        "unexplained": sum(n for (cause, _), n in directions.items() if cause == "UNEXPLAINED"),
        "clear_cases": {"right": clear["right"], "wrong": clear["wrong"]},
        "clear_case_errors": {who: {kind: sum(n for (w, k, _), n in errors.items() if (w, k) == (who, kind))
                                    for kind in ("wrong PASS", "wrong FAIL")} for who in ("compare", "same")},
        "clear_case_errors_by_family": [{"verifier": w, "error": k, "family": f, "cases": n}
                                        for (w, k, f), n in sorted(errors.items())],
    }


def markdown(figures: dict[str, Any]) -> str:
    lines = [f"Agreement with `torch._dynamo.utils.same` on {figures['cases']} generated cases (seed "
             f"{figures['seed']}): **{figures['agreement']:.1%}**; `compare` passes "
             f"{figures['compare_pass_rate']:.1%} of them.", "",
             f"Clear cases (the answer known from the truth the generator drew): {figures['clear_cases']['right']} "
             f"right, {figures['clear_cases']['wrong']} wrong; the rest lie between.", "",
             "| verifier | wrong PASS | wrong FAIL |", "|---|---:|---:|"]
    lines += [f"| `{who}` | {row['wrong PASS']} | {row['wrong FAIL']} |"
              for who, row in figures["clear_case_errors"].items()]
    if figures["clear_case_errors_by_family"]:
        lines += ["", "| verifier | error | family | cases |", "|---|---|---|---:|"]
        lines += [f"| `{e['verifier']}` | {e['error']} | {e['family']} | {e['cases']} |"
                  for e in figures["clear_case_errors_by_family"]]
    lines += ["", "| family | cases | agreement |", "|---|---:|---:|"]
    lines += [f"| {f} | {row['cases']} | {row['agreement']:.1%} |" for f, row in figures["per_family"].items()]
    lines += ["", "| disagreement class | verdicts | cases | why ours differs |", "|---|---|---:|---|"]
    lines += [f"| `{d['cause']}` | {d['direction']} | {d['cases']} | {CAUSES.get(d['cause'], 'no known cause')} |"
              for d in figures["disagreements"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print the figures as JSON")
    output.add_argument("--markdown", action="store_true",
                        help="print the table of docs/benchmarks/verifier_agreement.md")
    output.add_argument("--update-docs", "--update-readme", dest="update_docs", action="store_true",
                        help="write the table into docs/benchmarks/verifier_agreement.md")
    args = parser.parse_args(argv)
    if args.cases < 1:
        parser.error("--cases must be at least 1")
    logging.getLogger("torch._dynamo.utils").setLevel(logging.CRITICAL)  # same() logs every failure
    logging.getLogger("torch._dynamo").setLevel(logging.CRITICAL)

    figures = run(args.cases, args.seed)
    if args.json:
        print(json.dumps(figures, indent=2))
    elif args.markdown:
        print(markdown(figures))
    elif args.update_docs:
        text = DOC.read_text()
        pattern = re.compile(re.escape(MARKERS[0]) + ".*?" + re.escape(MARKERS[1]), re.S)
        DOC.write_text(pattern.sub(lambda _: f"{MARKERS[0]}\n{markdown(figures)}\n{MARKERS[1]}", text, count=1))
    else:
        print(f"agreement with torch._dynamo.utils.same: {figures['agreement']:.2%} of {args.cases} cases "
              f"(compare passes {figures['compare_pass_rate']:.1%})")
        for family, row in figures["per_family"].items():
            print(f"  {family:32s} {row['cases']:5d} cases  {row['agreement']:.2%}")
        for d in figures["disagreements"]:
            print(f"  {d['cases']:5d}  {d['cause']}: {d['direction']}")
        for cause in sorted({d["cause"] for d in figures["disagreements"]}):
            print(f"\n{cause}: {CAUSES.get(cause, 'no known cause; investigate')}")
    return 1 if figures["unexplained"] else 0


if __name__ == "__main__":
    sys.exit(main())
