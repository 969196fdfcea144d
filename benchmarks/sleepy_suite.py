"""`sleepy`: a plugin suite for benchmarks/ray_overhead.py.

quick_NN are a tiny Linear layer (the runner's own cost dominates); sleep_NN sleep 2 s while
loading, so that many of them side by side are not limited by this machine's cores.
Registered with EXPERIMENT_RUNNER_SUITES="sleepy=sleepy_suite:SleepySuite" and this folder
on PYTHONPATH (the driver's and every Ray node's).
"""

from __future__ import annotations

import time

from benchmark_models.base import LoadRequest, ModelNotFound, Suite
from benchmark_models.model import BenchmarkModel

SLEEP_S = 2.0


class SleepySuite(Suite):
    name = "sleepy"
    source = "builtin"

    def model_names(self) -> list[str]:
        return [f"{kind}_{i:02d}" for kind in ("quick", "sleep") for i in range(40)]

    def load(self, request: LoadRequest) -> BenchmarkModel:
        import torch

        if request.model_name not in self.model_names():
            raise ModelNotFound(request.model_name)
        if request.model_name.startswith("sleep_"):
            time.sleep(SLEEP_S)
        module = torch.nn.Linear(4, 2).to(request.device)
        return BenchmarkModel(module=module, args=(torch.randn(2, 4, device=request.device),), batch_size=2,
                              source="builtin")
