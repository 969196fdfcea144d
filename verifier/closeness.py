"""Pure comparison of a compiled run's outputs against eager, with a float64 reference.

Each leaf of the two nested outputs is judged by the first rule that settles it:

1. Integer, bool and non-tensor leaves must be equal (no tolerance: an index or a count
   that is off by one is wrong, however large the number). A set compares as a set.
2. Floating leaves (complex as real pairs; dense against sparse by value) must have NaN and
   infinities in the same places.
3. A one-element leaf (a loss) with a finite float64 reference that tracks eager gets the
   scalar rule (see _scalar_rule): the tolerance is a relative error budget against float64,
   whatever allclose says.
4. Otherwise allclose at the tolerance passes.
5. Where the per-model data chooses it (PyTorch's cosine lists), cosine similarity ≥ 0.99
   decides a leaf of at least COSINE_MIN_ELEMENTS elements that allclose fails.
6. Otherwise the RMSE rule, at the positions where the float64 reference is finite and tracks eager:
   RMSE(fp64, result) ≤ multiplier · RMSE(fp64, eager) + tol/10, eager's own error saying
   how much noise this precision has (the reference upcast to float64 whatever dtype the
   float64 run gave it).

"The reference cannot speak" has one rule: where there is no float64 run (it failed, did not
fit), where its value is NaN or inf, or where it has no counterpart of the leaf (another
structure, size, shape or kind), those positions are judged against eager alone by allclose at
the tolerance widened by two units in the last place of the leaf's dtype (what rounding explains
between two low-precision runs), never by cosine similarity: a result 10% off eager element by
element has cosine 0.996. The same holds where the reference does not track eager (eager's own
error against it beyond TRACKING_FACTOR tolerances in allclose's units): the scalar and RMSE
rules would take eager's error against an unrelated run as noise and pass anything within a
multiple of it. Such a reference does not vouch for a result close to it either: a result that
took the float64 run's other branch agrees with it and not with eager.

The float64 reference is a third run of the model, in float64, and most comparisons never
read it: only a one-element leaf (the scalar rule) and a leaf that allclose fails where
cosine similarity does not decide (the RMSE rule) need it. Given
DEFERRED instead of a reference, `compare` judges without one and raises ReferenceNeeded at
the first leaf that needs it, so the verifier builds the reference only then and compares
again; a comparison that returns under DEFERRED is the one the reference would have given.

Tensor kinds: sparse (any layout) and mkldnn tensors are densified, quantized ones
dequantized, float8 upcast to float32, packed float4 compared bit for bit, nested tensors
component by component, meta and fake tensors by shape and dtype only (they hold no
values), numpy object arrays element by element. Each such leaf leaves a note under its
path in the outcome, so the record says what was actually compared.

The outcome names the check that decided, the worst leaf's path and its figures, and the
paths of every failing leaf in the order the output holds them (for training: loss, output,
gradients, parameters, which is the order a wrong value propagates), so a FAIL points at
the tensors to look at.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    import torch

COSINE_THRESHOLD = 0.99
# Cosine similarity is blind to scale (a result scaled by 1.5 has cosine 1): where it decides, the
# result's scale along eager, (result · eager) / |eager|², must also be within this of 1. Noise
# independent of eager leaves it at 1 ± (noise/|eager|)/√n; a scale error moves it by that error.
# Ten times the cosine rule's own 1 − 0.99.
COSINE_SCALE_SLACK = 10 * (1.0 - COSINE_THRESHOLD)
# Below this many elements cosine similarity never decides a leaf (see the module docstring).
COSINE_MIN_ELEMENTS = 16
# How many failing paths and notes a record lists (their total counts are always given).
LISTED_PATHS = 20
# Leaves judged by the same check rank by how weak that check is: a result that needed the
# RMSE rescue is worse news than one allclose accepted, whatever the figures say.
_METHOD_RANK = {"equal": 0, "exact": 0, "allclose": 1, "rmse": 2, "scalar": 2, "cosine": 2, "metadata": 3,
                "structure": 3}
# How much further from the truth than eager's own rounding (half a unit in the last place of the
# leaf's dtype) a result may be: the RMSE rule's multiplier for fp16/bf16. It sets the scalar rule's
# floor (1.5 units) and, where the reference cannot speak, the rounding band on top of allclose's
# (eager's half unit plus the result's 1.5: two units), so that two low-precision runs that round the
# same value differently are not failed, and nothing further off than a few roundings passes.
ROUNDING_MULTIPLIER = 3.0
# The float64 reference tracks eager while eager's RMS error against it, in allclose's units
# |eager − fp64| / (1 + |fp64|), is within this many tolerances (or units of the leaf dtype's
# precision, where that is coarser): beyond it eager itself would be clearly wrong against the
# reference, so the reference is not speaking for this output (another branch, another order).
TRACKING_FACTOR = 10.0
# One position whose eager value is further than this from float64, in allclose's units, is another
# branch whatever the rest of the leaf does; those positions are judged like a NaN in the reference.
ASTRAY = 0.5


class UnsupportedOutput(TypeError):
    """An output of a type the comparison cannot judge (verification itself is broken)."""


class ReferenceNeeded(Exception):
    """A comparison given DEFERRED reached a leaf whose verdict needs the float64 reference."""

    def __init__(self, path: str, rule: str) -> None:
        self.path, self.rule = path or "<output>", rule
        super().__init__(f"the {rule} rule needs the float64 reference at {self.path}")

    def where(self) -> dict[str, str]:
        """The record's reference_needed_at: the leaf, and the rule that needs the reference there."""
        return {"path": self.path, "rule": self.rule}


class _Deferred:
    """The float64 reference, not built yet (see DEFERRED)."""

    def __repr__(self) -> str:
        return "DEFERRED"


# Pass as `compare`'s fp64_ref to judge without building the reference until a leaf needs it.
DEFERRED = _Deferred()


@dataclass
class Leaf:
    """The verdict on one leaf (or one structural mismatch) of the compared outputs."""

    path: str
    passed: bool
    method: str  # equal | exact | allclose | rmse | scalar | cosine | metadata | structure
    reason: str | None = None
    max_abs_error: float | None = None
    rmse_result: float | None = None  # RMSE(float64 reference, result)
    rmse_eager: float | None = None  # RMSE(float64 reference, eager)
    cosine: float | None = None
    multiplier: float | None = None
    threshold: float | None = None
    floor: float | None = None  # the scalar rule's budget, tol·|fp64|, within the threshold
    # Positions judged against eager alone because the float64 reference is NaN or inf there.
    unreferenced: int | None = None
    # Distance to the deciding check's limit: ≤ 1 passes, > 1 fails (inf for structure).
    severity: float = 0.0
    note: str | None = None  # what was compared when it was not the plain tensor

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
    failed_paths: list[str] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)

    def details(self) -> dict[str, Any]:
        """JSON-ready figures (NaN and inf become strings so the record stays valid JSON)."""
        leaf = dataclasses.asdict(self.worst)
        leaf.pop("passed")
        leaf.pop("method")
        for optional in ("note", "floor"):
            if leaf[optional] is None:
                leaf.pop(optional)
        leaf["path"] = leaf["path"] or "<output>"
        out = {k: _json_number(v) for k, v in leaf.items()}
        out.update(leaves=self.leaves, failed_leaves=self.failures,
                   failed_paths=[p or "<output>" for p in self.failed_paths[:LISTED_PATHS]])
        if self.notes:
            out["notes"] = {(p or "<output>"): n for p, n in list(self.notes.items())[:LISTED_PATHS]}
        return out


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


@dataclass(frozen=True)
class _Rules:
    tol: float
    cosine: bool = False
    exact: bool = False
    larger_small_multiplier: bool = False
    referenced: bool = False  # a float64 reference was given: every float leaf must find its own
    deferred: bool = False  # DEFERRED was given: a leaf that needs the reference raises ReferenceNeeded
    computed_in: Any = None  # the coarsest dtype the experiment computes in (torch.bfloat16 for bf16), or None


def compare(ref: Any, res: Any, fp64_ref: Any = None, *, tolerance: float, cosine: bool = False,
            larger_small_multiplier: bool = False, computed_in: Any = None) -> Comparison:
    """Judge `res` (the experiment) against `ref` (eager) with `fp64_ref` as ground truth.

    `computed_in`: the coarsest floating dtype the experiment computes in where it is coarser
    than its outputs' (a bf16 model whose logits are float32): eager's own distance from float64
    is that dtype's rounding, which the tracking rule must not take for another branch.

    `fp64_ref=None` means there is no float64 run: every float leaf is judged against eager
    alone (allclose), except where `cosine` is chosen. `larger_small_multiplier` is PyTorch's
    per-model use_larger_multiplier_for_smaller_tensor (RMSE multiplier 10 up to 10 elements, 8
    up to 500). Raises UnsupportedOutput only for Python objects it cannot walk (an arbitrary
    class); every tensor kind and every reference gets a verdict. `fp64_ref=DEFERRED` raises
    ReferenceNeeded where a verdict needs the reference (see the module docstring).
    """
    deferred = fp64_ref is DEFERRED
    rules = _Rules(tol=tolerance, cosine=cosine, larger_small_multiplier=larger_small_multiplier,
                   referenced=fp64_ref is not None and not deferred, deferred=deferred, computed_in=computed_in)
    return _summarize(list(_walk(ref, res, fp64_ref, "", rules)), tolerance)


def identical(first: Any, second: Any) -> Comparison:
    """Whether two runs gave bit-identical outputs (NaN equal to NaN): the determinism check."""
    return _summarize(list(_walk(first, second, None, "", _Rules(tol=0.0, exact=True))), 0.0)


def _summarize(leaves: list[Leaf], tolerance: float) -> Comparison:
    if not leaves:
        leaves = [Leaf(path="", passed=True, method="equal", reason="nothing to compare")]
    worst = max(leaves, key=Leaf.sort_key)
    failed = [leaf for leaf in leaves if not leaf.passed]
    notes = {leaf.path: leaf.note for leaf in leaves if leaf.note}
    return Comparison(passed=not failed, method=worst.method, tolerance=tolerance, worst=worst,
                      leaves=len(leaves), failures=len(failed), failed_paths=[leaf.path for leaf in failed],
                      notes=notes)


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


@dataclass(frozen=True)
class _Missing:
    """Where the float64 reference lacks a sub-output: an error once a float leaf needs it."""

    path: str
    why: str


def _child(fp64: Any, key: Any, path: str, rules: _Rules) -> Any:
    """The float64 counterpart of a sub-output: None without a reference, _Missing when the
    reference lacks it."""
    if not rules.referenced:
        return None
    if isinstance(fp64, _Missing):
        return fp64
    if isinstance(fp64, Mapping):
        if key in fp64:
            return fp64[key]
    elif isinstance(fp64, (list, tuple, collections.deque)) and isinstance(key, int):
        if key < len(fp64):
            return fp64[key]
    elif isinstance(key, str) and hasattr(fp64, key) and not _is_tensor(fp64):
        return getattr(fp64, key)
    return _Missing(_join(path, key), f"it holds a {type(fp64).__name__} without {key!r}")


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _structure(path: str, reason: str) -> Leaf:
    return Leaf(path=path, passed=False, method="structure", reason=reason, severity=math.inf)


def _walk(ref: Any, res: Any, fp64: Any, path: str, rules: _Rules) -> Iterator[Leaf]:
    import numpy as np
    import torch

    if isinstance(ref, np.ndarray) and ref.dtype == object:
        if not (isinstance(res, np.ndarray) and res.dtype == object):
            yield _structure(path, f"type mismatch: numpy object array vs {type(res).__name__}")
        elif ref.shape != res.shape:
            yield _structure(path, f"shape mismatch: {ref.shape} vs {res.shape}")
        else:
            fp64_items = fp64.ravel().tolist() if isinstance(fp64, np.ndarray) else fp64
            for i, (a, b) in enumerate(zip(ref.ravel().tolist(), res.ravel().tolist())):
                for leaf in _walk(a, b, _child(fp64_items, i, path, rules), _join(path, i), rules):
                    leaf.note = leaf.note or "element of a numpy object array (compared element by element)"
                    yield leaf
        return
    ref, res, fp64 = _as_tensor(ref), _as_tensor(res), _as_tensor(fp64)
    if isinstance(ref, torch.Tensor):
        if not isinstance(res, torch.Tensor):
            yield _structure(path, f"type mismatch: eager gave a tensor, result {type(res).__name__}")
        elif ref.is_nested or res.is_nested:
            yield from _walk_nested(ref, res, fp64, path, rules)
        else:
            yield _compare_tensors(ref, res, fp64, path, rules)
    elif isinstance(ref, (float, complex)):
        if type(res) is not type(ref):
            yield _structure(path, f"type mismatch: {type(ref).__name__} vs {type(res).__name__}")
        else:
            dtype = torch.float64 if isinstance(ref, float) else torch.complex128
            reference = (torch.tensor(fp64, dtype=dtype) if isinstance(fp64, (float, int, complex))
                         and not isinstance(fp64, bool) else fp64)
            yield _compare_tensors(torch.tensor(ref, dtype=dtype), torch.tensor(res, dtype=dtype), reference,
                                   path, rules)
    elif isinstance(ref, Mapping):
        yield from _walk_mapping(ref, res, fp64, path, rules)
    elif isinstance(ref, tuple) and hasattr(ref, "_fields"):
        if type(res) is not type(ref):
            yield _structure(path, f"type mismatch: {type(ref).__name__} vs {type(res).__name__}")
        else:
            for name in ref._fields:
                yield from _walk(getattr(ref, name), getattr(res, name), _child(fp64, name, path, rules),
                                 _join(path, name), rules)
    elif isinstance(ref, (list, tuple, collections.deque)):
        if not isinstance(res, (list, tuple, collections.deque)):
            yield _structure(path, f"type mismatch: {type(ref).__name__} vs {type(res).__name__}")
        elif len(ref) != len(res):
            yield _structure(path, f"length mismatch: {len(ref)} vs {len(res)}")
        else:
            for i, (a, b) in enumerate(zip(ref, res)):
                yield from _walk(a, b, _child(fp64, i, path, rules), _join(path, i), rules)
    elif dataclasses.is_dataclass(ref) and not isinstance(ref, type):
        if type(res) is not type(ref):
            yield _structure(path, f"type mismatch: {type(ref).__name__} vs {type(res).__name__}")
        else:
            for f in dataclasses.fields(ref):
                yield from _walk(getattr(ref, f.name), getattr(res, f.name), _child(fp64, f.name, path, rules),
                                 _join(path, f.name), rules)
    elif isinstance(ref, (set, frozenset)):
        yield from _walk_set(ref, res, fp64, path, rules)
    elif ref is None or isinstance(ref, (bool, int, str, bytes, enum.Enum, torch.device, torch.dtype,
                                         _NumpyValues)):
        equal = type(ref) is type(res) and ref == res
        yield Leaf(path=path, passed=equal, method="equal", severity=0.0 if equal else math.inf,
                   reason=None if equal else f"{ref!r} != {res!r}")
    else:
        raise UnsupportedOutput(f"cannot compare an output of type {type(ref).__qualname__} at "
                                f"{path or '<output>'}")


def _as_tensor(value: Any) -> Any:
    """numpy arrays and scalars join the tensor and Python-scalar paths; arrays torch cannot
    hold (strings, datetimes) stay numpy and are compared for equality."""
    import numpy as np
    import torch

    if isinstance(value, np.ndarray) and value.dtype != object:
        try:
            return torch.from_numpy(np.ascontiguousarray(value))
        except TypeError:
            return _NumpyValues(value)
    if isinstance(value, np.generic):
        return value.item()
    return value


class _NumpyValues:
    """A numpy array of a dtype torch has no counterpart for: equal means same shape, dtype, values."""

    def __init__(self, array: Any) -> None:
        self.array = array

    def __eq__(self, other: object) -> bool:
        import numpy as np

        return (isinstance(other, _NumpyValues) and self.array.dtype == other.array.dtype
                and bool(np.array_equal(self.array, other.array)))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"numpy {self.array.dtype} array of shape {self.array.shape}"


def _walk_mapping(ref: Mapping, res: Any, fp64: Any, path: str, rules: _Rules) -> Iterator[Leaf]:
    if not isinstance(res, Mapping):
        yield _structure(path, f"type mismatch: {type(ref).__name__} vs {type(res).__name__}")
        return
    missing = [k for k in ref if k not in res]
    extra = [k for k in res if k not in ref]
    if missing or extra:
        yield _structure(path, f"keys differ: missing in result {missing}, extra in result {extra}")
    for key in ref:
        if key in res:
            yield from _walk(ref[key], res[key], _child(fp64, key, path, rules), _join(path, key), rules)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _walk_set(ref: "set | frozenset", res: Any, fp64: Any, path: str, rules: _Rules) -> Iterator[Leaf]:
    """A set has no order: equal elements pass; sets of numbers of the same size are paired in
    sorted order and judged element by element (floats with the tolerance)."""
    if not isinstance(res, (set, frozenset)):
        yield _structure(path, f"type mismatch: {type(ref).__name__} vs {type(res).__name__}")
        return
    if ref == res:
        yield Leaf(path=path, passed=True, method="equal", note="set: compared as a set")
        return
    if len(ref) == len(res) and all(_is_number(v) for v in (*ref, *res)):
        fp64_sorted = (sorted(fp64) if isinstance(fp64, (set, frozenset)) and all(_is_number(v) for v in fp64)
                       else fp64)
        for i, (a, b) in enumerate(zip(sorted(ref), sorted(res))):
            for leaf in _walk(a, b, _child(fp64_sorted, i, path, rules), _join(path, i), rules):
                leaf.note = leaf.note or "element of a set of numbers (paired in sorted order)"
                yield leaf
        return
    only_eager, only_result = [repr(v) for v in ref if v not in res], [repr(v) for v in res if v not in ref]
    yield _structure(path, f"sets differ: {len(only_eager)} elements only in eager {only_eager[:5]}, "
                           f"{len(only_result)} only in the result {only_result[:5]}")


def _walk_nested(ref: "torch.Tensor", res: "torch.Tensor", fp64: Any, path: str, rules: _Rules) -> Iterator[Leaf]:
    """Nested tensors hold a list of tensors of different shapes: judge each component."""
    import torch

    if not (ref.is_nested and res.is_nested):
        yield _structure(path, "type mismatch: one output is a nested tensor, the other is not")
        return
    refs, ress = ref.unbind(), res.unbind()
    if len(refs) != len(ress):
        yield _structure(path, f"nested tensors hold {len(refs)} vs {len(ress)} components")
        return
    if not rules.referenced:
        fp64s: list[Any] = [None] * len(refs)
    elif isinstance(fp64, torch.Tensor) and fp64.is_nested and len(fp64.unbind()) == len(refs):
        fp64s = list(fp64.unbind())
    else:
        fp64s = [fp64 if isinstance(fp64, _Missing) else _Missing(
            path, "it does not hold a nested tensor of as many components")] * len(refs)
    for i, (a, b, g) in enumerate(zip(refs, ress, fp64s)):
        leaf = _compare_tensors(a, b, g, _join(path, i), rules)
        leaf.note = leaf.note or f"component {i} of a nested tensor ({ref.layout})"
        yield leaf


def _values(t: "torch.Tensor") -> tuple["torch.Tensor", str | None]:
    """A strided CPU tensor holding t's values, and a note when that took a conversion."""
    import torch

    t = t.detach()
    note = None
    if t.layout != torch.strided:
        layout = str(t.layout).removeprefix("torch.")
        t, note = t.to_dense(), f"{layout} tensor densified"
    t = t.cpu()
    if t.is_quantized:
        t, note = t.dequantize(), f"{str(t.dtype).removeprefix('torch.')} tensor dequantized"
    elif t.dtype.is_floating_point and t.dtype.itemsize == 1:
        name = str(t.dtype).removeprefix("torch.")
        try:
            t, note = t.float(), f"{name} upcast to float32"
        except (NotImplementedError, RuntimeError):
            t, note = t.view(torch.uint8), f"{name} has no arithmetic: compared bit for bit"
    return t, note


def _is_valueless(t: "torch.Tensor") -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return t.is_meta or isinstance(t, FakeTensor)


def _multiplier(dtype: "torch.dtype", shape: tuple[int, ...], rules: _Rules) -> float:
    """How much worse than eager's float64 error the result may be.

    Low precision gets 3 rather than 2 (mixed-precision noise); so do small tensors, 1x1
    spatial maps and models whose tolerance was raised, where noise dominates the RMSE.
    Models listed for it get 10 up to 10 elements and 8 up to 500 (PyTorch's
    use_larger_multiplier_for_smaller_tensor).
    """
    import torch

    numel = math.prod(shape)
    if rules.larger_small_multiplier and numel <= 10:
        return 10.0
    if rules.larger_small_multiplier and numel <= 500:
        return 8.0
    if dtype in (torch.float16, torch.bfloat16):
        return 3.0
    if numel < 1000 or rules.tol >= 2e-2 or (len(shape) == 4 and tuple(shape[-2:]) == (1, 1)):
        return 3.0
    return 2.0


def _compare_tensors(ref: "torch.Tensor", res: "torch.Tensor", fp64: Any,
                     path: str, rules: _Rules) -> Leaf:
    import torch

    if ref.shape != res.shape:
        return _structure(path, f"shape mismatch: {tuple(ref.shape)} vs {tuple(res.shape)}")
    if ref.dtype != res.dtype:
        return _structure(path, f"dtype mismatch: {ref.dtype} vs {res.dtype}")
    if _is_valueless(ref) or _is_valueless(res):
        both = _is_valueless(ref) and _is_valueless(res)
        return Leaf(path=path, passed=both, method="metadata", severity=0.0 if both else math.inf,
                    note="meta/fake tensor: holds no values, only shape and dtype were compared",
                    reason=None if both else "one run gave a meta/fake tensor, the other real values")
    dtype, shape = res.dtype, tuple(res.shape)
    layouts = None if ref.layout == res.layout else f"{_name(ref.layout)} eager vs {_name(res.layout)} result"
    (ref, note), (res, _) = _values(ref), _values(res)
    precision = dtype if dtype.is_floating_point or dtype.is_complex else res.dtype  # a dequantized leaf's
    if layouts:
        note = f"{layouts}: compared as dense values"
    if ref.is_complex():
        ref, res = torch.view_as_real(ref), torch.view_as_real(res)
    if rules.exact and ref.is_floating_point() and torch.equal(ref, res):
        # What the walk below concludes for equal values (NaN never compares equal, so it takes the
        # walk), without its twenty float64 passes: a training run's gradients are the whole model.
        return Leaf(path=path, passed=True, method="exact", max_abs_error=0.0, severity=0.0, note=note)
    if not ref.is_floating_point():
        equal = torch.equal(ref, res)
        mismatched = 0 if equal else int((ref != res).sum())
        return Leaf(path=path, passed=equal, method="exact" if rules.exact else "equal",
                    severity=0.0 if equal else math.inf, note=note,
                    reason=None if equal else f"{mismatched} of {ref.numel()} elements differ")

    a, b = ref.double(), res.double()
    nan_a, nan_b = a.isnan(), b.isnan()
    both_nan = nan_a & nan_b
    diff = torch.where(both_nan | (a == b), torch.zeros_like(a), (a - b).abs())
    max_abs = float(diff.max()) if diff.numel() else 0.0
    leaf = Leaf(path=path, passed=False, method="exact" if rules.exact else "allclose",
                max_abs_error=max_abs, note=note)
    if not torch.equal(nan_a, nan_b):
        only_eager, only_result = int((nan_a & ~nan_b).sum()), int((nan_b & ~nan_a).sum())
        leaf.reason = (f"NaN positions differ: {only_result} NaN only in the result, "
                       f"{only_eager} only in eager")
        leaf.severity = math.inf
        return leaf
    tol = rules.tol
    limit = tol + tol * b.abs()  # torch.allclose(eager, result)'s band, as PyTorch's harness calls it
    beyond = diff > limit
    ratio = torch.where(diff == 0, torch.zeros_like(diff), diff / limit)
    leaf.severity = float(ratio.max()) if ratio.numel() else 0.0
    if rules.exact:
        leaf.passed = not bool(beyond.any())
        leaf.reason = None if leaf.passed else f"runs differ by up to {max_abs:.3g}"
        return leaf
    if bool(((a.isinf() | b.isinf()) & (a != b)).any()):
        leaf.reason = "infinities differ between eager and result"
        leaf.severity = math.inf
        return leaf
    loss = a.numel() == 1 and bool(a.isfinite().all())
    if rules.deferred and loss:
        raise ReferenceNeeded(path, "scalar")
    g, silent = _reference(fp64, ref, path, rules)
    noise = _coarser(precision, rules.computed_in)
    if loss and g is not None:
        if not bool(g.isfinite().all()):
            silent = "the float64 reference is NaN/inf here"
        elif not (silent := _untracked(a, g, noise, tol)):
            leaf.multiplier = _multiplier(dtype, shape, rules)
            return _scalar_rule(leaf, a, b, g, precision, rules)
        else:
            g = None
    if not bool(beyond.any()):
        leaf.passed = True
        if loss and silent and rules.referenced:
            leaf.note = f"{silent}: judged by allclose against eager alone"
        return leaf
    kept = ~both_nan
    a_kept, b_kept = _select(a, kept), _select(b, kept)
    leaf.cosine = _cosine(a_kept, b_kept)
    if rules.cosine and a.numel() >= COSINE_MIN_ELEMENTS:
        return _cosine_rule(leaf, a_kept, b_kept)
    if rules.deferred:
        raise ReferenceNeeded(path, "rmse")
    band = limit + _rounding_band(a, b, precision)
    if g is not None and bool((g.isfinite() & a.isfinite()).any()):
        if not (silent := _untracked(a, g, noise, tol)):
            astray = _astray(a, g, noise, tol)
            if bool(astray.any()):
                g = g.masked_fill(astray, math.nan)
                leaf.note = "; ".join(filter(None, (leaf.note, f"the float64 reference does not track eager at "
                                                               f"{int(astray.sum())} positions (eager is over "
                                                               f"{ASTRAY:g} of 1 + |fp64| off it there): judged there "
                                                               "against eager alone")))
            leaf.multiplier = _multiplier(dtype, shape, rules)
            return _rmse_rule(leaf, a, b, g, diff > band, rules)
    elif g is not None:
        silent = f"the float64 reference is NaN/inf at all {int(a.isfinite().sum())} positions where eager is finite"
    return _eager_alone(leaf, diff, band, a, precision, silent)


def _rounding_band(a: "torch.Tensor", b: "torch.Tensor", precision: "torch.dtype") -> "torch.Tensor":
    """What rounding to `precision` explains between eager and a result where no reference can
    show it: eager's half unit in the last place plus ROUNDING_MULTIPLIER times it for the result,
    at the larger of the two values (so two bf16 runs one rounding step apart agree)."""
    import torch

    return (1.0 + ROUNDING_MULTIPLIER) * _half_ulp(torch.maximum(a.abs(), b.abs()), precision)


def _half_ulp(x: "torch.Tensor", precision: "torch.dtype") -> "torch.Tensor":
    """Half the spacing of `precision` at |x| (float64 values): the most one rounding moves x."""
    import torch

    info = torch.finfo(precision)
    _, exponent = torch.frexp(x.abs().clamp(info.smallest_normal, info.max))
    return torch.ldexp(torch.full_like(x, info.eps / 4), exponent)


def _coarser(precision: "torch.dtype", computed_in: "torch.dtype | None") -> "torch.dtype":
    """The coarser of a leaf's dtype and the dtype the experiment computes in: what bounds eager's
    own rounding away from float64."""
    import torch

    if computed_in is None or torch.finfo(computed_in).eps <= torch.finfo(precision).eps:
        return precision
    return computed_in


def _untracked(a: "torch.Tensor", g: "torch.Tensor", precision: "torch.dtype", tol: float) -> str:
    """Why the float64 reference does not speak for eager's values, or "" where it tracks them.

    Eager's RMS error against it, in allclose's units, beyond TRACKING_FACTOR tolerances (or
    units of the dtype's precision) is no rounding: the float64 run took another branch or order
    here, and the RMSE rule would take that error as this precision's noise and pass anything
    within a multiple of it (a reference unrelated to eager passes zeros)."""
    import torch

    where = a.isfinite() & g.isfinite()
    if not bool(where.any()):
        return ""
    off = float(_select((a - g).abs() / (1.0 + g.abs()), where).square().mean().sqrt())
    bound = TRACKING_FACTOR * max(tol, torch.finfo(precision).eps)
    if off <= bound:
        return ""
    return (f"the float64 reference does not track eager (eager is {off:.3g} off it in allclose's units, beyond "
            f"{TRACKING_FACTOR:g} x max(tolerance, {_name(precision)} eps) = {bound:.3g}: another branch or order)")


def _astray(a: "torch.Tensor", g: "torch.Tensor", precision: "torch.dtype", tol: float) -> "torch.Tensor":
    """Positions of a tracking reference where eager is off it by more than ASTRAY in allclose's
    units (and the tracking bound): no rounding of any dtype, but one value of another branch, as
    in a small leaf whose RMS such a position cannot lift over the bound yet inflates the RMSE."""
    import torch

    bound = max(ASTRAY, TRACKING_FACTOR * max(tol, torch.finfo(precision).eps))
    return a.isfinite() & g.isfinite() & ((a - g).abs() > bound * (1.0 + g.abs()))


def _eager_alone(leaf: Leaf, diff: "torch.Tensor", band: "torch.Tensor", a: "torch.Tensor",
                 precision: "torch.dtype", silent: str) -> Leaf:
    """A leaf allclose fails and no reference speaks for: allclose at the tolerance, widened by
    the rounding band, against eager alone."""
    import torch

    over = diff > band
    leaf.unreferenced = int(a.isfinite().sum())
    ratio = torch.where(diff == 0, torch.zeros_like(diff), diff / band)
    leaf.severity = float(ratio.max())
    leaf.passed = not bool(over.any())
    rounding = f"two units in the last place of {_name(precision)}"
    if leaf.passed:
        leaf.note = "; ".join(filter(None, (leaf.note, f"{silent}: judged against eager alone, by allclose at the "
                                                       f"tolerance widened by {rounding} (rounding)")))
    else:
        leaf.reason = (f"{int(over.sum())} of {a.numel()} elements differ from eager beyond allclose at the "
                       f"tolerance and {rounding}, and {silent}: judged against eager alone")
    return leaf


def _cosine_rule(leaf: Leaf, a: "torch.Tensor", b: "torch.Tensor") -> Leaf:
    """Step 5: cosine similarity, where the model's rule chooses it, and the result's scale along
    eager within COSINE_SCALE_SLACK of 1."""
    leaf.method = "cosine"
    leaf.threshold = COSINE_THRESHOLD
    energy = float(a.square().sum())
    scale = float((a * b).sum()) / energy if energy else (1.0 if not bool(b.any()) else math.inf)
    leaf.severity = max((1.0 - leaf.cosine) / (1.0 - COSINE_THRESHOLD), abs(scale - 1.0) / COSINE_SCALE_SLACK)
    leaf.passed = leaf.severity <= 1.0
    if leaf.cosine < COSINE_THRESHOLD:
        leaf.reason = f"cosine similarity {leaf.cosine:.6f} < {COSINE_THRESHOLD} (the model's rule chooses it)"
    elif not leaf.passed:
        leaf.reason = (f"cosine similarity {leaf.cosine:.6f}, but the result is eager scaled by {scale:.4g} "
                       f"(cosine similarity cannot see scale; at most 1 ± {COSINE_SCALE_SLACK:g})")
    return leaf


def _name(kind: "torch.layout | torch.dtype") -> str:
    return str(kind).removeprefix("torch.")


def _reference(fp64: Any, ref: "torch.Tensor", path: str, rules: _Rules) -> tuple["torch.Tensor | None", str]:
    """The float64 run's leaf as float64 values shaped like eager's, or None and why the
    reference cannot speak for this leaf (no float64 run, or nothing of this leaf's kind there)."""
    import torch

    if not rules.referenced:
        return None, "there is no float64 reference (its run failed, did not fit, or was not made)"
    if isinstance(fp64, _Missing):
        return None, f"the float64 reference has no counterpart at {fp64.path or '<output>'}: {fp64.why}"
    if not isinstance(fp64, torch.Tensor):
        why = "it has nothing there" if fp64 is None else f"it holds a {type(fp64).__name__}"
    elif _is_valueless(fp64) or fp64.is_nested:
        why = "it holds a meta, fake or nested tensor"
    else:
        g, _ = _values(fp64)
        if g.is_complex():
            g = torch.view_as_real(g)
        if g.is_floating_point() and g.shape == ref.shape:
            if torch.finfo(g.dtype).eps > torch.finfo(ref.dtype).eps:
                return None, (f"the float64 reference holds {path or '<output>'} in {_name(g.dtype)}, less precise "
                              f"than the outputs' {_name(ref.dtype)}, so it cannot tell their rounding from an error")
            return g.double(), ""
        why = (f"it holds {g.dtype} values" if not g.is_floating_point()
               else f"it holds {g.numel()} values where the outputs hold {ref.numel()}" if g.numel() != ref.numel()
               else f"it holds shape {tuple(g.shape)} where the outputs hold {tuple(ref.shape)} (never reshaped: "
                    "the same values in another layout are not these values)")
    return None, f"the float64 reference has no counterpart at {path or '<output>'}: {why}"


def _scalar_rule(leaf: Leaf, a: "torch.Tensor", b: "torch.Tensor", g: "torch.Tensor", precision: "torch.dtype",
                 rules: _Rules) -> Leaf:
    """A one-element leaf (a loss) with a finite float64 reference that tracks eager: the
    tolerance is a relative error budget, |result − fp64| ≤ tol·|fp64| (never under
    ROUNDING_MULTIPLIER times eager's rounding, half a unit in the last place of `precision`: one
    and a half units); where eager's own loss is further off than that budget, the result may also
    be `multiplier` times eager's excess further off.

    allclose's band, tol·(1 + |value|), is 10% of a loss near 1.7 at tol 4e-2, and an additive
    allowance (multiplier × eager's error + a floor) let a loss 5.6% off pass because eager's bf16
    loss was 1.5% off. A loss is one number averaged over the whole batch: where eager holds it
    within the tolerance, so must the compiled run; only a loss that this precision cannot hold
    to the tolerance (eager itself beyond it, as for a mean of outputs near zero) earns more.
    """
    tol = rules.tol
    truth = float(g.abs().max())
    leaf.method = "scalar"
    leaf.rmse_eager, leaf.rmse_result = float((a - g).abs().max()), float((b - g).abs().max())
    leaf.floor = max(tol * truth, ROUNDING_MULTIPLIER * float(_half_ulp(a, precision).max()))
    leaf.threshold = leaf.floor + leaf.multiplier * max(0.0, leaf.rmse_eager - leaf.floor)
    leaf.severity = leaf.rmse_result / leaf.threshold if leaf.threshold > 0 else (
        0.0 if leaf.rmse_result == 0 else math.inf)
    leaf.passed = leaf.rmse_result <= leaf.threshold
    if not leaf.passed:
        relative = f" ({leaf.rmse_result / truth:.2%} of it)" if truth else ""
        leaf.reason = (f"scalar: |result - fp64| {leaf.rmse_result:.3g}{relative} > {leaf.threshold:.3g}, the "
                       f"tolerance's budget {leaf.floor:.3g}"
                       + (f" + {leaf.multiplier:g} x eager's excess over it" if leaf.threshold > leaf.floor else
                          f" (eager is {leaf.rmse_eager:.3g} off, within it)"))
    return leaf


def _rmse_rule(leaf: Leaf, a: "torch.Tensor", b: "torch.Tensor", g: "torch.Tensor", beyond: "torch.Tensor",
               rules: _Rules) -> Leaf:
    """Step 6 of the module docstring, on eager `a`, result `b`, float64 reference `g`; `beyond`
    marks the positions eager alone fails (allclose and the rounding band), which decide where the
    reference is NaN or inf."""
    tol = rules.tol
    leaf.method = "rmse"
    measured = g.isfinite() & a.isfinite() & b.isfinite()
    unreferenced = ~g.isfinite() & a.isfinite()
    leaf.unreferenced = int(unreferenced.sum())
    truth, eager, result = (_select(x, measured) for x in (g, a, b))
    leaf.rmse_eager = _rmse(truth, eager)
    leaf.rmse_result = _rmse(truth, result)
    leaf.threshold = leaf.multiplier * leaf.rmse_eager + tol / 10.0
    leaf.severity = leaf.rmse_result / leaf.threshold if leaf.threshold > 0 else math.inf
    leaf.passed = leaf.rmse_result <= leaf.threshold
    reasons = [] if leaf.passed else [f"RMSE(fp64, result) {leaf.rmse_result:.3g} > {leaf.multiplier:g} x "
                                      f"RMSE(fp64, eager) {leaf.rmse_eager:.3g} + tol/10"]
    off = int((beyond & unreferenced).sum())
    if off:
        leaf.passed = False
        leaf.severity = math.inf
        reasons.append(f"the float64 reference is NaN/inf (or astray) at {leaf.unreferenced} positions where eager "
                       f"is finite, judged there against eager alone: {off} differ beyond allclose at the tolerance "
                       "and the dtype's rounding")
    leaf.reason = "; ".join(reasons) or None
    return leaf


def _select(x: "torch.Tensor", mask: "torch.Tensor") -> "torch.Tensor":
    """x[mask]: the same elements in the same (row-major) order, so every figure computed from it
    is bit-identical, without the gather where the mask holds everywhere. A leaf of a model's
    logits is tens of millions of float64 values, and each gather cost about a second of the
    comparison on 2 cores."""
    return x.reshape(-1) if bool(mask.all()) else x[mask]


def _rmse(x: "torch.Tensor", y: "torch.Tensor") -> float:
    if x.numel() == 0:
        return 0.0
    return float((x - y).square().mean().sqrt())


def _cosine(x: "torch.Tensor", y: "torch.Tensor") -> float:
    import torch

    if x.numel() == 0:
        return 1.0
    return float(torch.nn.functional.cosine_similarity(x.flatten(), y.flatten(), dim=0, eps=1e-6))
