"""The verifier's runs under the determinism PyTorch's accuracy runs set (core/dashboards.json
accuracy_determinism). The verifier demands bit-identical eager runs; on CUDA that holds only
with deterministic algorithms, cuDNN's deterministic kernels, no autotuning and a fixed cuBLAS
workspace: flash attention's backward, cuDNN's weight gradients and atomics otherwise differ run
to run, and a training check would end NONDETERMINISTIC_EAGER_RUN where PyTorch's files say pass."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from experiment_runner.core.dashboards import Determinism


def _setting(name: str) -> tuple[Any, str]:
    """The object and attribute a dotted setting name stands for (`torch.backends.cudnn.benchmark`)."""
    import torch

    owner: Any = torch
    *path, attribute = name.split(".")[1:]
    for part in path:
        owner = getattr(owner, part)
    return owner, attribute


def _read(name: str) -> bool:
    import torch

    if name == "torch.use_deterministic_algorithms":
        return torch.are_deterministic_algorithms_enabled()
    if name == "torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp":
        return torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
    owner, attribute = _setting(name)
    return bool(getattr(owner, attribute))


def _write(name: str, value: bool) -> None:
    import torch

    if name == "torch.use_deterministic_algorithms":
        torch.use_deterministic_algorithms(value)
    elif name == "torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp":
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(value)
    else:
        owner, attribute = _setting(name)
        setattr(owner, attribute, value)


def apply_environment(determinism: Determinism) -> None:
    """Set the environment the settings need before the library that reads it starts (cuBLAS reads
    its workspace configuration once, at its first use in the process)."""
    os.environ.update(determinism.environment)


@contextlib.contextmanager
def deterministic(determinism: Determinism) -> Iterator[None]:
    """Run the body under `determinism`, then put back every setting and variable as it was."""
    import torch

    before = {name: _read(name) for name in determinism.settings}
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    environment = {name: os.environ.get(name) for name in determinism.environment}
    try:
        apply_environment(determinism)
        for name, value in determinism.settings.items():
            _write(name, value)
        yield
    finally:
        for name, value in before.items():
            _write(name, value)
        torch.use_deterministic_algorithms(before.get("torch.use_deterministic_algorithms",
                                                      torch.are_deterministic_algorithms_enabled()),
                                           warn_only=warn_only)
        for name, old in environment.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old
