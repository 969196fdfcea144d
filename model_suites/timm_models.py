"""`timm`: image models from PyTorch's timm benchmark list, built with random weights.

Semantics follow PyTorch's timm harness: `create_model(name, pretrained=False)`, an input
batch of the size the model's data config asks for (the test size for eval, the train
size for training) and normalized random pixels; training reduces the logits as that
harness does (model_suites/training.py).
"""

from __future__ import annotations

from model_suites.base import DataFileSuite, LoadRequest
from model_suites.model import BenchmarkModel
from model_suites.optional import require
from model_suites.training import recipe_for


class TimmSuite(DataFileSuite):
    name = "timm"
    source = "timm"
    requires = ("timm",)
    data_file = "timm.json"

    def load(self, request: LoadRequest) -> BenchmarkModel:
        batch_size = self.batch_size(request)
        timm = require("timm")
        import torch

        module = timm.create_model(request.model_name, pretrained=False, in_chans=3, drop_rate=0.0)
        data_config = timm.data.resolve_model_data_config(module, use_test_size=request.test == "eval")
        module = module.to(request.device)

        # Random pixel values in [0, 255], normalized, as images would be.
        pixels = torch.randint(256, (batch_size, *data_config["input_size"]), device=request.device).float()
        images = (pixels - pixels.mean()) / pixels.std()
        return BenchmarkModel(module=module, args=(images,), batch_size=batch_size, source=self.source,
                              recipe=recipe_for(self.name, request.model_name))
