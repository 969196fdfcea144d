"""Pure comparison of a compiled run's outputs against eager, with a float64 reference.

Each leaf of the two nested outputs is judged by the first check that settles it:
allclose at the tolerance passes; otherwise the result passes when its RMSE against the
float64 reference is at most `multiplier · RMSE(float64, eager) + tol/10` (eager's own
error says how much noise this precision has); where cosine is chosen, or the float64
reference is missing, cosine similarity ≥ 0.99 decides instead. Integer, bool and
non-tensor leaves must be equal. The outcome names the check that decided, the worst
leaf's path and its figures, so a FAIL points at the tensor to look at.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    import torch

COSINE_THRESHOLD = 0.99
# Leaves judged by the same check rank by how weak that check is: a result that needed the
# RMSE rescue is worse news than one allclose accepted, whatever the figures say.
_METHOD_RANK = {"equal": 0, "exact": 0, "allclose": 1, "rmse": 2, "cosine": 2, "structure": 3}


class UnsupportedOutput(TypeError):
    """An output of a type the comparison cannot judge (verification itself is broken)."""


@dataclass
class Leaf:
    """The verdict on one leaf (or one structural mismatch) of the compared outputs."""

    path: str
    passed: bool
    method: str  # equal | exact | allclose | rmse | cosine | structure
    reason: str | None = None
    max_abs_error: float | None = None
    rmse_result: float | None = None  # RMSE(float64 reference, result)
    rmse_eager: float | None = None  # RMSE(float64 reference, eager)
    cosine: float | None = None
    multiplier: float | None = None
    threshold: float | None = None
    # Distance to the deciding check's limit: ≤ 1 passes, > 1 fails (inf for structure).
    severity: float = 0.0

    def sort_key(self) -> tuple[bool, int, float]:
        severity = self.severity if not math.isnan(self.severity) else math.inf
        return (not self.passed, _METHOD_RANK[self.method], severity)


@dataclass
class Comparison:
    """The outcome of comparing two nested outputs."""

    passed: bool
    method: str  # the check that decided: the worst leaf's
    tolerance: float
    worst: Leaf
    leaves: int
    failures: int

    def details(self) -> dict[str, Any]:
        """JSON-ready figures (NaN and inf become strings so the record stays valid JSON)."""
        leaf = dataclasses.asdict(self.worst)
        leaf.pop("passed")
        leaf.pop("method")
        leaf["path"] = leaf["path"] or "<output>"
        out = {k: _json_number(v) for k, v in leaf.items()}
        out.update(leaves=self.leaves, failed_leaves=self.failures)
        return out


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def compare(ref: Any, res: Any, fp64_ref: Any = None, *, tolerance: float,
            cosine: bool = False) -> Comparison:
    """Judge `res` (the experiment) against `ref` (eager) with `fp64_ref` as ground truth.

    `fp64_ref=None` means the float64 run failed: cosine similarity decides every float
    leaf that allclose does not. Raises UnsupportedOutput for outputs it cannot walk.
    """
    return _summarize(list(_walk(ref, res, fp64_ref, "", tolerance, cosine, exact=False)), tolerance)


def identical(first: Any, second: Any) -> Comparison:
    """Whether two runs gave bit-identical outputs (NaN equal to NaN): the determinism check."""
    return _summarize(list(_walk(first, second, None, "", 0.0, False, exact=True)), 0.0)


def _summarize(leaves: list[Leaf], tolerance: float) -> Comparison:
    if not leaves:
        leaves = [Leaf(path="", passed=True, method="equal", reason="nothing to compare")]
    worst = max(leaves, key=Leaf.sort_key)
    failures = sum(not leaf.passed for leaf in leaves)
    return Comparison(passed=failures == 0, method=worst.method, tolerance=tolerance,
                      worst=worst, leaves=len(leaves), failures=failures)


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _child(fp64: Any, key: Any) -> Any:
    """The float64 counterpart of a sub-output, or None when the reference lacks it."""
    if fp64 is None:
        return None
    try:
        return fp64[key]
    except (KeyError, IndexError, TypeError):
        return getattr(fp64, key, None) if isinstance(key, str) else None


def _structure(path: str, reason: str) -> Leaf:
    return Leaf(path=path, passed=False, method="structure", reason=reason, severity=math.inf)


def _walk(ref: Any, res: Any, fp64: Any, path: str, tol: float, cosine: bool,
          exact: bool) -> Iterator[Leaf]:
    import torch

    ref, res, fp64 = _as_tensor(ref), _as_tensor(res), _as_tensor(fp64)
    if isinstance(ref, torch.Tensor):
        if not isinstance(res, torch.Tensor):
            yield _structure(path, f"type mismatch: eager gave a tensor, result {type(res).__name__}")
        else:
            yield _compare_tensors(ref, res, fp64 if isinstance(fp64, torch.Tensor) else None,
                                   path, tol, cosine, exact)
    elif isinstance(ref, float):
        if not isinstance(res, float):
            yield _structure(path, f"type mismatch: float vs {type(res).__name__}")
        else:
            as64 = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
            yield _compare_tensors(as64(ref), as64(res), as64(fp64) if isinstance(fp64, float) else None,
                                   path, tol, cosine, exact)
    elif isinstance(ref, Mapping):
        yield from _walk_mapping(ref, res, fp64, path, tol, cosine, exact)
    elif isinstance(ref, tuple) and hasattr(ref, "_fields"):
        if type(res) is not type(ref):
            yield _structure(path, f"type mismatch: {type(ref).__name__} vs {type(res).__name__}")
        else:
            for name in ref._fields:
                yield from _walk(getattr(ref, name), getattr(res, name), _child(fp64, name),
                                 _join(path, name), tol, cosine, exact)
    elif isinstance(ref, (list, tuple, collections.deque)):
        if not isinstance(res, (list, tuple, collections.deque)):
            yield _structure(path, f"type mismatch: {type(ref).__name__} vs {type(res).__name__}")
        elif len(ref) != len(res):
            yield _structure(path, f"length mismatch: {len(ref)} vs {len(res)}")
        else:
            fp64_items = list(fp64) if isinstance(fp64, (list, tuple, collections.deque)) else None
            for i, (a, b) in enumerate(zip(ref, res)):
                sub = fp64_items[i] if fp64_items is not None and i < len(fp64_items) else None
                yield from _walk(a, b, sub, _join(path, i), tol, cosine, exact)
    elif dataclasses.is_dataclass(ref) and not isinstance(ref, type):
        if type(res) is not type(ref):
            yield _structure(path, f"type mismatch: {type(ref).__name__} vs {type(res).__name__}")
        else:
            for f in dataclasses.fields(ref):
                yield from _walk(getattr(ref, f.name), getattr(res, f.name), _child(fp64, f.name),
                                 _join(path, f.name), tol, cosine, exact)
    elif ref is None or isinstance(ref, (bool, int, str, bytes, enum.Enum, torch.device, torch.dtype)):
        equal = type(ref) is type(res) and ref == res
        yield Leaf(path=path, passed=equal, method="equal", severity=0.0 if equal else math.inf,
                   reason=None if equal else f"{ref!r} != {res!r}")
    else:
        raise UnsupportedOutput(f"cannot compare an output of type {type(ref).__qualname__} at "
                                f"{path or '<output>'}")


def _as_tensor(value: Any) -> Any:
    """numpy arrays and scalars join the tensor and Python-scalar paths."""
    import numpy as np
    import torch

    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def _walk_mapping(ref: Mapping, res: Any, fp64: Any, path: str, tol: float, cosine: bool,
                  exact: bool) -> Iterator[Leaf]:
    if not isinstance(res, Mapping):
        yield _structure(path, f"type mismatch: {type(ref).__name__} vs {type(res).__name__}")
        return
    missing = [k for k in ref if k not in res]
    extra = [k for k in res if k not in ref]
    if missing or extra:
        yield _structure(path, f"keys differ: missing in result {missing}, extra in result {extra}")
    for key in ref:
        if key in res:
            yield from _walk(ref[key], res[key], _child(fp64, key), _join(path, key), tol, cosine, exact)


def _multiplier(res: "torch.Tensor", fp64: "torch.Tensor", tol: float) -> float:
    """How much worse than eager's float64 error the result may be.

    Low precision gets 3 rather than 2 (mixed-precision noise); so do small tensors, 1x1
    spatial maps and models whose tolerance was raised, where noise dominates the RMSE.
    """
    import torch

    if res.dtype in (torch.float16, torch.bfloat16):
        return 3.0
    if fp64.numel() < 1000 or tol >= 2e-2 or (res.dim() == 4 and res.shape[-2:] == (1, 1)):
        return 3.0
    return 2.0


def _compare_tensors(ref: "torch.Tensor", res: "torch.Tensor", fp64: "torch.Tensor | None",
                     path: str, tol: float, cosine: bool, exact: bool) -> Leaf:
    import torch

    if ref.shape != res.shape:
        return _structure(path, f"shape mismatch: {tuple(ref.shape)} vs {tuple(res.shape)}")
    if ref.dtype != res.dtype:
        return _structure(path, f"dtype mismatch: {ref.dtype} vs {res.dtype}")
    ref, res = ref.detach().cpu(), res.detach().cpu()
    if ref.is_sparse:
        ref, res = ref.to_dense(), res.to_dense()
    if ref.is_complex():
        ref, res = torch.view_as_real(ref), torch.view_as_real(res)
        fp64 = torch.view_as_real(fp64) if fp64 is not None and fp64.is_complex() else None
    if not ref.is_floating_point():
        equal = torch.equal(ref, res)
        mismatched = 0 if equal else int((ref != res).sum())
        return Leaf(path=path, passed=equal, method="equal", severity=0.0 if equal else math.inf,
                    reason=None if equal else f"{mismatched} of {ref.numel()} elements differ")

    a, b = ref.double(), res.double()
    nan_a, nan_b = a.isnan(), b.isnan()
    both_nan = nan_a & nan_b
    diff = torch.where(both_nan | (a == b), torch.zeros_like(a), (a - b).abs())
    max_abs = float(diff.max()) if diff.numel() else 0.0
    leaf = Leaf(path=path, passed=False, method="exact" if exact else "allclose", max_abs_error=max_abs)
    if not torch.equal(nan_a, nan_b):
        only_eager, only_result = int((nan_a & ~nan_b).sum()), int((nan_b & ~nan_a).sum())
        leaf.reason = (f"NaN positions differ: {only_result} NaN only in the result, "
                       f"{only_eager} only in eager")
        leaf.severity = math.inf
        return leaf
    limit = tol + tol * a.abs()
    ratio = torch.where(diff == 0, torch.zeros_like(diff), diff / limit)
    leaf.severity = float(ratio.max()) if ratio.numel() else 0.0
    if torch.allclose(ref, res, atol=tol, rtol=tol, equal_nan=True):
        leaf.passed = True
        return leaf
    if exact:
        leaf.reason = f"runs differ by up to {max_abs:.3g}"
        return leaf

    keep = ~both_nan
    leaf.cosine = _cosine(a[keep], b[keep])
    usable64 = fp64 is not None and fp64.dtype == torch.float64 and fp64.shape == ref.shape
    if cosine or not usable64:
        leaf.method = "cosine"
        leaf.threshold = COSINE_THRESHOLD
        leaf.passed = leaf.cosine >= COSINE_THRESHOLD
        leaf.severity = (1.0 - leaf.cosine) / (1.0 - COSINE_THRESHOLD)
        if not usable64 and not cosine:
            leaf.reason = "no float64 reference for this output; cosine similarity decided"
        if not leaf.passed:
            leaf.reason = f"cosine similarity {leaf.cosine:.6f} < {COSINE_THRESHOLD}"
        return leaf

    g = fp64.detach().cpu()
    finite = keep & g.isfinite() & a.isfinite() & b.isfinite()
    leaf.method = "rmse"
    leaf.rmse_eager = _rmse(g[finite], a[finite])
    leaf.rmse_result = _rmse(g[finite], b[finite])
    inf_mismatch = bool(((a.isinf() | b.isinf()) & (a != b)).any())
    leaf.multiplier = _multiplier(res, g, tol)
    leaf.threshold = leaf.multiplier * leaf.rmse_eager + tol / 10.0
    leaf.severity = leaf.rmse_result / leaf.threshold if leaf.threshold > 0 else math.inf
    leaf.passed = leaf.rmse_result <= leaf.threshold and not inf_mismatch
    if inf_mismatch:
        leaf.reason = "infinities differ between eager and result"
        leaf.severity = math.inf
    elif not leaf.passed:
        leaf.reason = (f"RMSE(fp64, result) {leaf.rmse_result:.3g} > {leaf.multiplier:g} x "
                       f"RMSE(fp64, eager) {leaf.rmse_eager:.3g} + tol/10")
    return leaf


def _rmse(x: "torch.Tensor", y: "torch.Tensor") -> float:
    if x.numel() == 0:
        return 0.0
    return float((x - y).square().mean().sqrt())


def _cosine(x: "torch.Tensor", y: "torch.Tensor") -> float:
    import torch

    if x.numel() == 0:
        return 1.0
    return float(torch.nn.functional.cosine_similarity(x.flatten(), y.flatten(), dim=0, eps=1e-6))
