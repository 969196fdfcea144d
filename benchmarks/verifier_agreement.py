"""How often the verifier's `compare` agrees with `torch._dynamo.utils.same`, and why not.

Generates a randomized corpus of (eager, result, float64 reference, tolerance) cases,
judges each with both, and classifies every disagreement by its cause. A disagreement no
known cause explains is listed as UNEXPLAINED and makes the exit status 1.

`same` is called the way PyTorch's harness calls it: equal_nan=True, and cosine similarity
when the float64 reference could not be computed (the harness then sets cos_similarity);
an AssertionError or RuntimeError from `same` (its way of rejecting mismatched keys, types
or shapes) counts as a fail.

    python benchmarks/verifier_agreement.py [--cases 3000] [--seed 0] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch._dynamo.utils import same

from verifier.compare import compare

DTYPES = (torch.float32, torch.float32, torch.float16, torch.bfloat16)
TOLERANCES = (1e-4, 1e-3, 1e-2, 4e-2)
SHAPES = ((1,), (7,), (500,), (999,), (1000,), (64, 64), (2, 8, 1, 1), (3, 5, 7))

# Why `compare` and `same` may disagree, by design or by arithmetic. Keyed by the name
# explain() returns.
CAUSES = {
    "fp64_nan": "the float64 reference has NaN where eager and result are finite: same's RMSEs both "
                "become NaN and equal_nan=True passes whatever the result is; compare drops those "
                "positions from the RMSE and judges the rest.",
    "shared_nan_rmse": "eager and result have NaN in the same places and allclose fails elsewhere: same's "
                       "RMSEs are NaN and equal_nan=True passes; compare computes the RMSE over the finite "
                       "positions and can fail a result that is wrong there.",
    "shared_nan_cosine": "eager and result have NaN in the same places and cosine decides: same's cosine "
                         "similarity over NaN is NaN and fails; compare leaves the shared NaN out, as allclose "
                         "with equal_nan does.",
    "eager_nan_only": "eager has NaN where the result and float64 do not: same passes a result within 4e-2 of "
                      "float64 (its Super_SloMo special case); compare requires eager and result to agree on "
                      "NaN positions, since an eager NaN means the comparison has no trustworthy baseline.",
    "python_float": "Python float leaves: same turns them into float32 tensors, so its float64 reference "
                    "becomes float32 and the RMSE rescue never runs; compare keeps them as float64 and "
                    "applies the RMSE rule.",
    "broadcast_shape": "shapes differ but broadcast: same's allclose broadcasts and may pass; compare "
                       "fails any shape mismatch.",
    "cosine_rounding": "cosine similarity within 1e-4 of 0.99: same computes it in float32, compare in "
                       "float64.",
}


@dataclass
class Case:
    category: str
    ref: Any
    res: Any
    fp64: Any
    tol: float
    cosine: bool


def _noise(rng: random.Random, truth: torch.Tensor, sigma: float, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    return (truth + sigma * torch.randn(truth.shape, generator=g, dtype=torch.float64)).to(dtype)


def tensor_case(rng: random.Random) -> Case:
    """A float tensor: eager and result each off the float64 truth by their own noise,
    the result sometimes also scaled (a miscompile)."""
    dtype, tol, shape = rng.choice(DTYPES), rng.choice(TOLERANCES), rng.choice(SHAPES)
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    truth = torch.randn(shape, generator=g, dtype=torch.float64) * rng.choice((1e-3, 1.0, 100.0))
    sigma = 10 ** rng.uniform(-7, -1) * float(truth.abs().mean())
    eager = _noise(rng, truth, sigma, dtype)
    result = _noise(rng, truth, sigma * rng.choice((0.0, 0.5, 1.0, 1.9, 2.1, 2.9, 3.1, 5.0, 50.0)), dtype)
    if rng.random() < 0.2:
        result = result * (1 + rng.choice((1e-4, 1e-3, 1e-2, -1e-2)))
    cosine = rng.random() < 0.15
    fp64 = None if rng.random() < 0.1 else truth
    return Case("float", eager, result, fp64, tol, cosine)


def nan_case(rng: random.Random) -> Case:
    """NaN injected into some of eager, result and the float64 reference."""
    case = tensor_case(rng)
    case.category = "nan"
    n = case.ref.numel()
    places = [rng.randrange(n) for _ in range(rng.randint(1, 3))]
    where = rng.choice(("ref+res", "ref+res", "res", "ref", "fp64", "all"))
    for name in ("ref", "res", "fp64"):
        target = getattr(case, name)
        if target is not None and (name in where or where == "all"):
            target = target.clone()
            target.view(-1)[places] = float("nan")
            setattr(case, name, target)
    return case


def exact_case(rng: random.Random) -> Case:
    """Integer and bool tensors: equal or not."""
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    ref = torch.randint(0, 5, (rng.choice((1, 10, 100)),), generator=g)
    if rng.random() < 0.5:
        ref = ref > 2
    res = ref.clone()
    if rng.random() < 0.5:
        res.view(-1)[0] = (~res.view(-1)[0]) if res.dtype == torch.bool else res.view(-1)[0] + 1
    return Case("int/bool", ref, res, ref, rng.choice(TOLERANCES), False)


def structure_case(rng: random.Random) -> Case:
    """Nested dicts and lists, sometimes with a key, length, dtype or shape mismatch."""
    leaves = [tensor_case(rng) for _ in range(3)]
    tol = leaves[0].tol
    ref = {"logits": leaves[0].ref, "hidden": [leaves[1].ref, leaves[2].ref.float()]}
    res = {"logits": leaves[0].res.to(leaves[0].ref.dtype), "hidden": [leaves[1].res, leaves[2].res.float()]}
    fp64 = {"logits": leaves[0].fp64, "hidden": [leaves[1].fp64, leaves[2].fp64]}
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
    return Case(f"structure/{fault}", ref, res, fp64, tol, False)


def scalar_case(rng: random.Random) -> Case:
    """Python floats, as a loss or a metric might be returned."""
    truth = rng.gauss(0, 1)
    eager = truth + rng.gauss(0, 10 ** rng.uniform(-8, -2))
    result = truth + rng.gauss(0, 10 ** rng.uniform(-8, -2))
    return Case("python float", eager, result, truth, rng.choice(TOLERANCES), False)


GENERATORS: list[tuple[float, Callable[[random.Random], Case]]] = [
    (0.55, tensor_case), (0.2, nan_case), (0.05, exact_case), (0.15, structure_case), (0.05, scalar_case),
]


def draw(rng: random.Random) -> Case:
    pick = rng.random()
    for weight, generator in GENERATORS:
        if pick < weight:
            return generator(rng)
        pick -= weight
    return GENERATORS[-1][1](rng)


def verdict_same(case: Case) -> bool:
    try:
        return bool(same(case.ref, case.res, case.fp64, cos_similarity=case.cosine or case.fp64 is None,
                         tol=case.tol, equal_nan=True))
    except (AssertionError, RuntimeError):
        return False


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def explain(case: Case) -> str:
    """The known cause behind a disagreement, or UNEXPLAINED."""
    if case.category == "python float":
        return "python_float"
    refs, ress = _leaves(case.ref), _leaves(case.res)
    fp64s = _leaves(case.fp64) if case.fp64 is not None else [None] * len(refs)
    for ref, res, fp64 in zip(refs, ress, fp64s):
        if isinstance(ref, torch.Tensor) and isinstance(res, torch.Tensor) and ref.shape != res.shape:
            try:
                torch.broadcast_shapes(ref.shape, res.shape)
                return "broadcast_shape"
            except RuntimeError:
                continue
        if not (isinstance(ref, torch.Tensor) and ref.is_floating_point()):
            continue
        cosine = case.cosine or fp64 is None
        nan_ref, nan_res = ref.isnan(), res.isnan()
        if fp64 is not None and (fp64.isnan() & ~nan_ref & ~nan_res).any():
            return "fp64_nan"
        if (nan_ref & ~nan_res).any():
            return "eager_nan_only"
        if (nan_ref & nan_res).any():
            return "shared_nan_cosine" if cosine else "shared_nan_rmse"
        if cosine:
            score = torch.nn.functional.cosine_similarity(ref.double().flatten(), res.double().flatten(),
                                                          dim=0, eps=1e-6)
            if abs(float(score) - 0.99) < 1e-4:
                return "cosine_rounding"
    return "UNEXPLAINED"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    logging.getLogger("torch._dynamo.utils").setLevel(logging.CRITICAL)  # same() logs every failure

    rng = random.Random(args.seed)
    per_category: Counter[str] = Counter()
    agreed: Counter[str] = Counter()
    causes: Counter[str] = Counter()
    directions: Counter[str] = Counter()
    passes = 0
    for _ in range(args.cases):
        case = draw(rng)
        ours = compare(case.ref, case.res, case.fp64, tolerance=case.tol, cosine=case.cosine).passed
        theirs = verdict_same(case)
        per_category[case.category] += 1
        passes += ours
        if ours == theirs:
            agreed[case.category] += 1
            continue
        cause = explain(case)
        causes[cause] += 1
        directions[f"{cause}: compare {'PASS' if ours else 'FAIL'}, same {'PASS' if theirs else 'FAIL'}"] += 1

    total_agreed = sum(agreed.values())
    figures = {
        "cases": args.cases, "seed": args.seed, "agreement": total_agreed / args.cases,
        "compare_pass_rate": passes / args.cases,
        "per_category": {c: {"cases": n, "agreement": agreed[c] / n} for c, n in sorted(per_category.items())},
        "disagreements": dict(directions.most_common()),
        "unexplained": causes["UNEXPLAINED"],
    }
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(f"agreement with torch._dynamo.utils.same: {total_agreed}/{args.cases} "
              f"= {figures['agreement']:.2%} (compare passes {figures['compare_pass_rate']:.1%} of cases)")
        for category, row in figures["per_category"].items():
            print(f"  {category:22s} {row['cases']:5d} cases  {row['agreement']:.2%}")
        for line, count in directions.most_common():
            print(f"  {count:5d}  {line}")
        for cause in sorted(causes):
            print(f"\n{cause}: {CAUSES.get(cause, 'no known cause; investigate')}")
    return 1 if causes["UNEXPLAINED"] else 0


if __name__ == "__main__":
    sys.exit(main())
