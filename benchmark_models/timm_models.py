"""`timm`: every model of PyTorch's timm benchmark list, built with random weights.

Semantics follow PyTorch's timm harness: `create_model(name, pretrained=False)` (a pretrained
tag such as `.lvd142m` only selects the architecture's default configuration, so nothing is
downloaded), an input batch of the size the model's data config asks for (the test size for
eval, the train size for training) and normalized random pixels; training reduces the logits as
that harness does (benchmark_models/training.py), scaled down for its scaled_compute_loss models.
Batch sizes are its lists' (data/timm.json), divided as timm_models.yaml says.
"""

from __future__ import annotations

from dataclasses import replace

from benchmark_models.base import DataFileSuite, LoadRequest, harness_batch_size
from benchmark_models.model import BenchmarkModel
from benchmark_models.optional import require
from benchmark_models.training import recipe_for

# timm_models.py's scaled_compute_loss divides the reduced loss by this ("loss values need zoom out").
LOSS_SCALE_DOWN = 1000.0


class TimmSuite(DataFileSuite):
    name = "timm"
    source = "timm"
    requires = ("timm",)
    meta_buildable = True
    data_file = "timm.json"

    def batch_size(self, request: LoadRequest) -> int:
        return harness_batch_size(self.entry(request.model_name), request)

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
        recipe = recipe_for(self.name, request.model_name)
        if request.model_name in self._data["rules"]["scaled_compute_loss"]:
            # The recipe carries the scale, as the harness recipe does, so it is applied once.
            recipe = replace(recipe, loss_scale=1 / LOSS_SCALE_DOWN)
        return BenchmarkModel(module=module, args=(images,), batch_size=batch_size, source=self.source,
                              recipe=recipe)
