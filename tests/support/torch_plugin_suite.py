"""`torch_plugin`: a plugin suite that imports torch at module level, as real plugins do.

It writes the pid of every process that imports it into TORCH_PLUGIN_TRACE, so a test can
prove the parent never executed it (the catalog comes from a child).
"""

from __future__ import annotations

import os

import torch  # noqa: F401 - deliberately at module level: this is what must never run in the parent

from benchmark_models.base import LoadRequest, Suite
from benchmark_models.model import BenchmarkModel

with open(os.environ["TORCH_PLUGIN_TRACE"], "a") as trace:
    trace.write(f"{os.getpid()}\n")


class TorchPluginSuite(Suite):
    name = "torch_plugin"
    source = "plugin"

    def model_names(self) -> list[str]:
        return ["plugin_linear"]

    def load(self, request: LoadRequest) -> BenchmarkModel:
        module = torch.nn.Linear(4, 2).to(request.device)
        return BenchmarkModel(module=module, args=(torch.randn(2, 4, device=request.device),), batch_size=2,
                              source="plugin")
