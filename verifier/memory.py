"""Does the verification fit in memory? Planned twice: before its first run, from what the timed
run took, and after the eager runs, from what they took.

Verification holds several copies of a model's outputs at once (eager, the float64 reference,
the experiment's) and runs the model once more in float64, where weights and activations take
twice the bytes of float32 (four times bfloat16's). For a large-vocabulary language model at its
dashboard batch that is many gigabytes, and an OOM kill loses the verdict and tells nothing. The
eager pair alone (a run, its output's copy, and a second run beside the first's output) can be
more than a cgroup leaves, so the first plan, before anything runs, estimates the whole
verification from the record's timed peak (`TimedRun`: the timed run's growth of the resident
memory, taken again by each run) and the output's size, and skips the verification when even
its cheapest form does not fit. After the eager runs the verifier measures their own growth of
the process's resident memory, estimates the float64 run, the compiled run and the comparison
from it and from the eager output's size. Each plan is compared with the memory this process
can still take (the smallest of the host's MemAvailable, its cgroups' limits, v1 or v2, nested,
and RLIMIT_AS): the float64 reference is left out when only it does not fit (its reason
recorded), and the whole verification is VERIFIER_SKIPPED, with the estimate, when even the rest
does not. Where the runs live on a GPU, its memory is a second budget, planned the same way from
the eager run's (or the timed run's) peak allocation there and the memory the device has free;
the record names the budget that decided (`decided_by`)."""

from __future__ import annotations

import re
import resource
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from experiment_runner.core.cgroups import memory_cgroups
from verifier.subject import DeviceMemory, TimedRun

GIB = 1 << 30
# Bytes per element of the experiment's floating-point data; amp keeps float32 weights.
_ELEMENT_BYTES = {"fp32": 4, "amp": 4, "bf16": 2, "fp16": 2, "fp64": 8}
# The comparison's float64 temporaries, in leaf-sized float64 tensors (differences, magnitudes,
# bounds): leaves are compared one at a time, so the largest leaf sets them.
COMPARE_TEMPORARIES = 4
# Keep this share of what the host says is available as headroom for everything not estimated.
HEADROOM = 0.8


def float_leaves(value: Any) -> list[int]:
    """The element count of each floating-point tensor in a nested output (tuples, lists, dicts,
    dataclasses)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value.numel()] if value.is_floating_point() else []
    if isinstance(value, dict):
        return [n for v in value.values() for n in float_leaves(v)]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in float_leaves(v)]
    if hasattr(value, "__dataclass_fields__"):
        return [n for name in value.__dataclass_fields__ for n in float_leaves(getattr(value, name))]
    return []


def float_elements(value: Any) -> int:
    """Floating-point elements in a nested output."""
    return sum(float_leaves(value))


def resident_bytes() -> int | None:
    """This process's resident memory now (VmRSS), None where /proc cannot tell."""
    try:
        match = re.search(r"^VmRSS:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) * 1024 if match else None


@dataclass(frozen=True)
class Available:
    """Bytes this process can still take before something stops it, and what would: the host
    (MemAvailable), a cgroup's limit (its limit file) or the address-space rlimit (RLIMIT_AS)."""

    bytes: int
    source: str


def address_space_limit() -> int | None:
    """This process's soft RLIMIT_AS (`ulimit -v`), None where unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def _status_bytes(root: Path, field: str) -> int | None:
    try:
        match = re.search(rf"^{field}:\s+(\d+) kB", (root / "proc/self/status").read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) * 1024 if match else None


def memory_limits(root: Path = Path("/"), rlimit_as: int | None = None) -> list[Available]:
    """Every limit on what this process can still take, read under `root` (a fake /proc and
    /sys tree in tests): MemAvailable, each of its memory cgroups' limit minus usage (v1 and
    v2, its own and every ancestor's), and `rlimit_as` minus the address space it maps."""
    found: list[Available] = []
    try:
        match = re.search(r"^MemAvailable:\s+(\d+) kB", (root / "proc/meminfo").read_text(), re.MULTILINE)
        if match:
            found.append(Available(int(match.group(1)) * 1024, "MemAvailable (/proc/meminfo)"))
    except OSError:
        pass
    for cgroup in memory_cgroups(root):
        headroom = cgroup.headroom()
        if headroom is not None:
            found.append(Available(headroom, f"cgroup v{cgroup.version} limit "
                                             f"(/{cgroup.limit_file.relative_to(root)})"))
    mapped = _status_bytes(root, "VmSize")
    if rlimit_as is not None and mapped is not None:
        found.append(Available(rlimit_as - mapped, "RLIMIT_AS (ulimit -v)"))
    return found


def available(root: Path = Path("/"), rlimit_as: int | None = None) -> Available | None:
    """The smallest of memory_limits: the one this process meets first; None where none can be read."""
    return min(memory_limits(root, rlimit_as), key=lambda limit: limit.bytes, default=None)


def available_bytes() -> Available | None:
    """What this process can still take, on this host."""
    return available(Path("/"), address_space_limit())


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes the rest of the verification needs beyond what is resident now, with and without the
    float64 reference, and what the host has available; `device`, the same for the device the runs
    live on where that is not the host (a GPU: its models, activations and float64 copies)."""

    with_reference: int
    without_reference: int
    available: int | None
    available_from: str | None = None  # which limit `available` is (Available.source)
    device: "MemoryPlan | None" = None

    def fits(self, need: int) -> bool:
        return self.available is None or need <= HEADROOM * self.available

    def short_of(self, with_reference: bool) -> "MemoryPlan | None":
        """The budget (the host's, or the device's) the rest of the verification would exceed, with
        or without the float64 reference; None where every budget holds it."""
        for budget in (self, self.device):
            if budget is not None and not budget.fits(budget.with_reference if with_reference
                                                      else budget.without_reference):
                return budget
        return None

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {
            "estimated_gib_with_float64_reference": round(self.with_reference / GIB, 2),
            "estimated_gib_without_float64_reference": round(self.without_reference / GIB, 2),
            "available_gib": None if self.available is None else round(self.available / GIB, 2),
            "available_from": self.available_from,
            "headroom": HEADROOM}
        if self.device is not None:
            described["device"] = self.device.describe()
        return described


def plan(eager_output: Any, eager_run_bytes: int, precision: str,
         device: "tuple[int, DeviceMemory] | None" = None) -> MemoryPlan:
    """The estimate after the eager runs, from the eager output (kept while the rest runs) and the
    eager run's growth of the resident memory (its model copy, activations and output); see
    plan_leaves."""
    return plan_leaves(float_leaves(eager_output), eager_run_bytes, precision, device)


def plan_leaves(leaves: list[int], eager_run_bytes: int, precision: str,
                device: "tuple[int, DeviceMemory] | None" = None) -> MemoryPlan:
    """The estimate of what follows the eager pair, from the eager output's floating-point leaves
    (element counts) and one eager run's growth of the resident memory. After the compiled run
    its result is held too (for training every gradient and parameter: a model's worth), beside
    the float64 run and then beside the float64 output and one leaf's comparison temporaries.

    `device`: the eager run's growth of the memory of the device the runs live on (a GPU's peak
    allocation over it) and that device's memory now. The outputs are compared on the host; the
    compiled run takes on the device what eager's took, the float64 run that scaled to 8 bytes an
    element."""
    size = _ELEMENT_BYTES.get(precision, 4)
    own = sum(leaves) * size
    out64 = sum(leaves) * 8
    temporaries = COMPARE_TEMPORARIES * max(leaves, default=0) * 8
    fp64_run = int(eager_run_bytes * 8 / size)
    compiled_run = eager_run_bytes  # its model copy and activations, as eager's
    without_reference = max(compiled_run, own + temporaries)
    with_reference = max(without_reference, own + fp64_run, own + out64 + temporaries)
    on_device = None
    if device is not None:
        run_bytes, memory = device
        on_device = MemoryPlan(max(run_bytes, int(run_bytes * 8 / size)), run_bytes, memory.available, memory.source)
    limit = available_bytes()
    return MemoryPlan(with_reference, without_reference, None if limit is None else limit.bytes,
                      None if limit is None else limit.source, on_device)


def output_bytes(value: Any, precision: str) -> int:
    """The bytes of a nested output's floating-point tensors in the experiment's precision."""
    return float_elements(value) * _ELEMENT_BYTES.get(precision, 4)


def plan_before_eager(timed: TimedRun, resident: int | None, held: int, precision: str,
                      device: "DeviceMemory | None" = None) -> MemoryPlan:
    """The whole verification, before its first run, beyond `resident` (this process's resident
    memory now, `held` bytes of it the experiment's result, already run where the timed step
    served): each run grows the resident memory as the timed run did above what stays (the
    timed peak less what is resident now but the result) and copies its output once more
    (snapshot); the second eager run runs beside the first's output, and the rest (plan_leaves)
    beside it too. Where the timed peak or the resident memory is unknown, a run counts only its
    output and its copy. On a device, each run takes what the timed run peaked at above
    what is allocated there now."""
    leaves = list(timed.output_leaves)
    out = sum(leaves) * _ELEMENT_BYTES.get(precision, 4)
    growth = out  # the output itself, at least
    if timed.peak_rss_bytes is not None and resident is not None:
        growth = max(out, timed.peak_rss_bytes - max(0, resident - held))
    run = growth + out
    eager_pair = run + out
    on_device = None
    if device is not None and timed.peak_allocated_bytes is not None:
        on_device = (max(0, timed.peak_allocated_bytes - device.allocated), device)
    rest = plan_leaves(leaves, run, precision, on_device)
    return replace(rest, with_reference=max(eager_pair, out + rest.with_reference),
                   without_reference=max(eager_pair, out + rest.without_reference))


def timed_run(metrics: dict[str, Any], output_leaves: list[int], module: Any, test: str) -> TimedRun:
    """What the record's `metrics` say the timed runs took, for plan_before_eager: their peaks,
    and the leaves a verification run keeps: the timed output's (`output_leaves`), and in
    training also every parameter twice (itself and its gradient) and every floating-point
    buffer of `module` (run_once)."""
    leaves = list(output_leaves)
    if test == "train":
        params = [p.numel() for p in module.parameters() if p.is_floating_point()]
        leaves += params + params + [b.numel() for b in module.buffers() if b.is_floating_point()]
    return TimedRun(metrics.get("timed_peak_rss_bytes"), tuple(leaves), metrics.get("peak_allocated_bytes"))
