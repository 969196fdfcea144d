"""Device runtimes: the one seam between the timing loop and a device (cpu, cuda, xla)."""

from __future__ import annotations

from experiment_runner.child.devices.cpu import DeviceRuntime
from experiment_runner.core.matrix import ExperimentConfig


def runtime_for(config: ExperimentConfig) -> DeviceRuntime:
    """The runtime for an experiment's accelerator and xla mode (torch_xla only when asked)."""
    if config.xla is not None:
        from experiment_runner.child.devices.xla import XlaRuntime

        return XlaRuntime(config)
    if config.accelerator == "cuda":
        from experiment_runner.child.devices.cuda import CudaRuntime

        return CudaRuntime(config)
    return DeviceRuntime(config)


__all__ = ["DeviceRuntime", "runtime_for"]
