"""`dummy`: a small MLP for smoke tests and for measuring the runner's own overhead.

Its one model is named `dummy`, as the reference runner's (`--filter=^dummy$` selects it), and
stays fp32 on every accelerator unless --precision says otherwise, as there.
"""

from __future__ import annotations

from benchmark_models.base import DataFileSuite, LoadRequest
from benchmark_models.model import BenchmarkModel
from benchmark_models.training import recipe_for


class DummySuite(DataFileSuite):
    name = "dummy"
    source = "builtin"
    default_precision = "fp32"
    data_file = "dummy.json"

    def load(self, request: LoadRequest) -> BenchmarkModel:
        import torch
        from torch import nn

        batch_size = self.batch_size(request)
        module = nn.Sequential(
            nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10)
        ).to(request.device)
        inputs = torch.randn(batch_size, 64, device=request.device)
        return BenchmarkModel(module=module, args=(inputs,), batch_size=batch_size, source=self.source,
                              recipe=recipe_for(self.name, request.model_name))
