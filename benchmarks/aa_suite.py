"""`aa`: small real models whose speed varies from one process to the next, as real models'
does, for `aa_false_alarms.py`.

Each process draws (from os.urandom, not the runner's fixed seed) what a real process
draws by chance: how the allocator laid out earlier allocations (a random amount of
memory allocated and kept before the model's), and which of two equivalent kernels an
autotuner picked (weights stored row- or column-major; NCHW or channels-last). The
arithmetic is the same in every process; only its speed differs.

Registered for the children with EXPERIMENT_RUNNER_SUITES="aa=aa_suite:AASuite" and
benchmarks/ on PYTHONPATH.
"""

from __future__ import annotations

import os
import random

import torch  # a plugin suite is imported only in children
from torch import nn

from benchmark_models.base import LoadRequest, ModelNotFound, Suite
from benchmark_models.model import BenchmarkModel

MODELS = ("mlp_layout", "mlp_wide_layout", "matmul_autotune", "matmul_small_autotune", "conv_memory_format")
_KEEP: list[torch.Tensor] = []  # the allocations that shift the model's layout live as long as the process


class Matmul(nn.Module):
    """tanh(x @ W), with W stored row- or column-major: one product, two kernels."""

    def __init__(self, size: int, column_major: bool) -> None:
        super().__init__()
        weight = torch.randn(size, size) / size ** 0.5
        self.weight = nn.Parameter(weight.t().contiguous().t() if column_major else weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x @ self.weight)


class AASuite(Suite):
    name = "aa"
    source = "plugin"

    def model_names(self) -> list[str]:
        return list(MODELS)

    def load(self, request: LoadRequest) -> BenchmarkModel:
        name = request.model_name
        if name not in MODELS:
            raise ModelNotFound(name)
        rng = random.Random(os.urandom(8))  # this process's luck, not the runner's fixed seed
        _KEEP.extend(torch.empty(rng.randrange(1, 4096) * 64) for _ in range(rng.randrange(1, 64)))
        if name.startswith("mlp"):
            width = 512 if "wide" in name else 128
            module: nn.Module = nn.Sequential(nn.Linear(256, width), nn.GELU(), nn.Linear(width, width), nn.GELU(),
                                              nn.Linear(width, 16))
            inputs = torch.randn(64, 256)
        elif name.startswith("matmul"):
            size = 96 if "small" in name else 256
            module = Matmul(size, column_major=rng.random() < 0.5)
            inputs = torch.randn(size, size)
        else:
            module = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1))
            inputs = torch.randn(8, 16, 32, 32)
            if rng.random() < 0.5:
                module = module.to(memory_format=torch.channels_last)
                inputs = inputs.contiguous(memory_format=torch.channels_last)
        return BenchmarkModel(module=module.to(request.device), args=(inputs.to(request.device),),
                              batch_size=int(inputs.shape[0]), source=self.source)
