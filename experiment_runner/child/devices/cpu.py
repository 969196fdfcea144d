"""Device runtimes inside the child: synchronization, RNG, peak memory, OOM detection.

The worker's timing loop talks only to this seam, so CUDA and XLA specifics live in one
place each and unit tests can drive the loop with any runtime.
"""

from __future__ import annotations

import platform
import random
import re
import resource
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from experiment_runner.core.cgroups import memory_limit
from experiment_runner.core.matrix import ExperimentConfig
from experiment_runner.core.options import RunOptions

if TYPE_CHECKING:
    from verifier.subject import DeviceMemory


def resident_bytes() -> int | None:
    """This process's resident set now (/proc/self/statm's second field, in pages): what psutil's
    memory_info().rss, and so its memory_percent(), read on Linux. None where there is no /proc."""
    import os

    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def _ru_maxrss_bytes() -> int:
    """This process's resident peak (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class DeviceRuntime:
    """Eager CPU behaviour; subclasses override what their device needs."""

    torch_device = "cpu"
    # Where the reference runner files this device's per-op profile in a record's metrics.
    op_profile_key = "inductor_ops"

    def __init__(self, config: ExperimentConfig) -> None:
        self.config = config
        self._rss_reset = False
        self._rss_before_reset = 0

    @property
    def build_device(self) -> str:
        """Where suites build the model and its inputs before it moves to torch_device."""
        return self.torch_device

    def prepare(self, options: RunOptions, artifacts_dir: Path) -> None:
        """Apply the run options only this device knows how to apply, and learn where its
        dumps go; called once before the model is loaded."""

    def artifacts(self) -> dict[str, str]:
        """Files this device dumped, keyed by kind, relative to the experiment's folder."""
        return {}

    def synchronize(self) -> None:
        """Wait for queued device work, so the clock measures work done, not queued."""

    def start_device_clock(self) -> Callable[[], float] | None:
        """--pure-wall-time: start the device's own clock and return what stops it (seconds), or
        None where the device has none (CPU; XLA, whose device-synchronized wall time is what the
        reference's pure wall time measures there too)."""
        return None

    def run_iteration(self, step: Callable[[], Any]) -> Any:
        """One iteration; lazy devices also cut and launch their graph here."""
        return step()

    def keep(self, tensor: Any) -> Any:
        """A tensor a step returned, made safe to read after the step runs again: a copy on its
        device. A compiled step may hand back the same storage on every call (CUDA graphs replay
        into static output buffers, and cudagraph trees refuse to read an output once a later
        replay began; a custom backend may do the same)."""
        return tensor.detach().clone()

    def begin_repeat(self) -> None:
        """Called before each timed repeat, outside the clock."""

    def end_repeat(self) -> dict[str, float]:
        """Per-repeat metrics beyond wall time (XLA compile/execute counters, ...)."""
        return {}

    def reset_rng(self, seed: int) -> None:
        import numpy as np
        import torch

        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)

    def rng_states(self) -> list[Any]:
        """The states of the torch generators a step on this device draws from (the verifier
        compares them before and after a step to tell whether it drew random numbers)."""
        import torch

        return [torch.random.get_rng_state()]

    def reset_peak_memory(self) -> None:
        """Reset the kernel's resident high-water mark (Linux: "5" into /proc/self/clear_refs),
        so `timed_peak_rss_bytes` covers the timed runs, not model loading and compilation.
        The reset also lowers ru_maxrss, so the lifetime peak so far is kept from before it."""
        self._rss_before_reset = max(self._rss_before_reset, _ru_maxrss_bytes())
        try:
            Path("/proc/self/clear_refs").write_text("5")
            self._rss_reset = True
        except OSError:
            self._rss_reset = False

    def peak_memory(self) -> dict[str, int]:
        """Peaks of the timed runs, read right after them: `timed_peak_rss_bytes` (VmHWM since
        reset_peak_memory; absent where the kernel refused the reset)."""
        if not self._rss_reset:
            return {}
        try:
            match = re.search(r"^VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
        except OSError:
            return {}
        return {"timed_peak_rss_bytes": int(match.group(1)) * 1024} if match else {}

    def memory_capacity(self) -> tuple[int, str] | None:
        """How much memory a model on this device can use at most, and what it is: the host's
        RAM, or the smallest limit of its cgroups when that is lower (a container; v1 or v2,
        its own cgroup or an ancestor's: core.cgroups). XLA runtimes keep this: their models
        are built on the host first."""
        import os

        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        limit = memory_limit()
        if limit is not None and limit[0] < total:
            return limit[0], "this container's memory limit"
        return total, "this host's RAM"

    def device_memory(self) -> "DeviceMemory | None":
        """The memory of the device the runs live on apart from the host's: none here (the
        verifier plans host memory from /proc and the cgroups)."""
        return None

    # How harness_memory reads this device, for the record.
    harness_memory_method = "resident set after the warm-up (the harness's psutil memory_percent() x RAM on the CPU)"

    def harness_memory_start(self) -> None:
        """Before a warm-up measured as PyTorch's harness measures it: nothing to reset on the
        CPU, where the harness reads the memory held after the warm-up, not a peak."""

    def harness_memory(self) -> int | None:
        """The bytes PyTorch's harness takes as a warm-up's peak memory here: on the CPU the
        resident set right after it (its warmup() reads psutil's memory_percent() of the RAM),
        a level, not a high-water mark."""
        return resident_bytes()

    def harness_memory_base(self) -> int | None:
        """The level harness_memory rises from, read before the model loads: on the CPU the
        resident set then. The harness's CPU figure is its whole process's resident set, so it
        holds that process's interpreter and imports; two processes' figures compare only above
        their own bases (benchmarks/harness_columns.py)."""
        return resident_bytes()

    def lifetime_peak_memory(self) -> dict[str, int]:
        """`lifetime_peak_rss_bytes`: the child's resident peak over its whole life (interpreter,
        imports, compilation, timed runs, profiling, verification); read at the very end."""
        return {"lifetime_peak_rss_bytes": max(self._rss_before_reset, _ru_maxrss_bytes())}

    def profiler_activities(self) -> list[Any]:
        """What torch.profiler records in the profiling pass: the host only, here."""
        from torch.profiler import ProfilerActivity

        return [ProfilerActivity.CPU]

    def profiled_op(self, name: str) -> bool:
        """Which profiler events `--profile-cuda-cpu-individual-ops` reports: aten ops here;
        an XLA runtime narrows this to the ops that fell back to the CPU."""
        return name.startswith("aten::")

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, MemoryError)

    def accelerator_model(self) -> str:
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return platform.processor() or platform.machine()
