"""`graph_break`: two tiny models, one whose forward breaks the graph once and one that does not,
for the harness-style graph-break count (registered with
EXPERIMENT_RUNNER_SUITES="graph_break=graph_break_suite:GraphBreakSuite", this folder on the path)."""

from __future__ import annotations

from typing import Any

from benchmark_models.base import LoadRequest, ModelNotFound, Suite
from benchmark_models.model import BenchmarkModel


def _breaking_forward(module: Any, args: tuple, kwargs: dict) -> Any:
    import torch

    hidden = module(*args, **kwargs)
    torch._dynamo.graph_break()
    return hidden * 2


class GraphBreakSuite(Suite):
    name = "graph_break"
    source = "plugin"

    def model_names(self) -> list[str]:
        return ["breaks", "whole"]

    def load(self, request: LoadRequest) -> BenchmarkModel:
        import torch

        if request.model_name not in self.model_names():
            raise ModelNotFound(request.model_name)
        module = torch.nn.Linear(4, 2).to(request.device)
        return BenchmarkModel(module=module, args=(torch.randn(2, 4, device=request.device),), batch_size=2,
                              source=self.source, forward=_breaking_forward if request.model_name == "breaks" else None)
