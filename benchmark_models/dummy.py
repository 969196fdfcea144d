"""`dummy`: a small MLP for smoke tests and for measuring the runner's own overhead."""

from __future__ import annotations

from benchmark_models.base import BenchmarkModel, LoadRequest, ModelNotFound, Suite, read_data, skip_rules_from
from experiment_runner.matrix import SkipRule


class DummySuite(Suite):
    name = "dummy"
    source = "builtin"

    def __init__(self) -> None:
        self._data = read_data("dummy.json")
        self._models = {m["name"]: m for m in self._data["models"]}

    def model_names(self) -> list[str]:
        return list(self._models)

    def skip_rules(self) -> list[SkipRule]:
        return skip_rules_from(self._data["skips"])

    def load(self, request: LoadRequest) -> BenchmarkModel:
        import torch
        from torch import nn

        if request.model_name not in self._models:
            raise ModelNotFound(request.model_name)
        batch_size = request.batch_size or self._models[request.model_name]["batch_size"][request.test]
        module = nn.Sequential(
            nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10)
        ).to(request.device)
        inputs = torch.randn(batch_size, 64, device=request.device)
        return BenchmarkModel(module=module, args=(inputs,), batch_size=batch_size, source=self.source)
