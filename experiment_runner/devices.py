"""Device runtimes inside the child: synchronization, RNG, peak memory, OOM detection.

The worker's timing loop talks only to this seam, so CUDA and XLA specifics live in one
place each and unit tests can drive the loop with any runtime.
"""

from __future__ import annotations

import platform
import random
import resource
from pathlib import Path
from typing import Any, Callable

from experiment_runner.matrix import ExperimentConfig


class DeviceRuntime:
    """Eager CPU behaviour; subclasses override what their device needs."""

    torch_device = "cpu"

    def __init__(self, config: ExperimentConfig) -> None:
        self.config = config

    def synchronize(self) -> None:
        """Wait for queued device work, so the clock measures work done, not queued."""

    def run_iteration(self, step: Callable[[], Any]) -> Any:
        """One iteration; lazy devices also cut and launch their graph here."""
        return step()

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

    def reset_peak_memory(self) -> None:
        """CPU has no resettable peak: ru_maxrss is the child's lifetime peak."""

    def peak_memory(self) -> dict[str, int]:
        # ru_maxrss is in KiB on Linux.
        return {"peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}

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


class CudaRuntime(DeviceRuntime):
    torch_device = "cuda"

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()

    def reset_peak_memory(self) -> None:
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    def peak_memory(self) -> dict[str, int]:
        import torch

        return {
            **super().peak_memory(),
            "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
            "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
        }

    def is_oom(self, exc: BaseException) -> bool:
        import torch

        if isinstance(exc, torch.cuda.OutOfMemoryError):
            return True
        return isinstance(exc, RuntimeError) and "CUDA out of memory" in str(exc) or super().is_oom(exc)

    def accelerator_model(self) -> str:
        import torch

        return torch.cuda.get_device_name()


def runtime_for(config: ExperimentConfig) -> DeviceRuntime:
    """The runtime for an experiment's accelerator and xla mode."""
    if config.xla is not None:
        from experiment_runner.xla import XlaRuntime

        return XlaRuntime(config)
    if config.accelerator == "cuda":
        return CudaRuntime(config)
    return DeviceRuntime(config)
