"""`timm`: image models from PyTorch's timm benchmark list, built with random weights.

Semantics follow PyTorch's timm harness: `create_model(name, pretrained=False)`, an input
batch of the size the model's data config asks for (the test size for eval, the train
size for training), normalized random pixels, and cross-entropy against random class
labels as the training loss.
"""

from __future__ import annotations

from typing import Any

from benchmark_models.base import (
    BenchmarkModel, LoadRequest, ModelNotFound, Suite, read_data, skip_rules_from,
)
from benchmark_models.optional import require
from experiment_runner.matrix import SkipRule


def batch_size_for(entry: dict[str, Any], request: LoadRequest) -> int:
    """The requested size, else the data file's size for this accelerator."""
    if request.batch_size is not None:
        return request.batch_size
    sizes = entry["batch_size"]
    return int(sizes.get(request.accelerator, sizes["cuda"]))


class TimmSuite(Suite):
    name = "timm"
    source = "timm"

    def __init__(self) -> None:
        self._data = read_data("timm.json")
        self._models = {m["name"]: m for m in self._data["models"]}

    def model_names(self) -> list[str]:
        return list(self._models)

    def skip_rules(self) -> list[SkipRule]:
        return skip_rules_from(self._data["skips"])

    def load(self, request: LoadRequest) -> BenchmarkModel:
        if request.model_name not in self._models:
            raise ModelNotFound(request.model_name)
        timm = require("timm")
        import torch

        batch_size = batch_size_for(self._models[request.model_name], request)
        module = timm.create_model(request.model_name, pretrained=False, in_chans=3, drop_rate=0.0)
        data_config = timm.data.resolve_model_data_config(module, use_test_size=request.test == "eval")
        module = module.to(request.device)

        # Random pixel values in [0, 255], normalized, as images would be.
        pixels = torch.randint(256, (batch_size, *data_config["input_size"]), device=request.device).float()
        images = (pixels - pixels.mean()) / pixels.std()
        labels = torch.randint(module.num_classes, (batch_size,), device=request.device)
        cross_entropy = torch.nn.CrossEntropyLoss()

        def loss(output: Any) -> "torch.Tensor":
            logits = output[0] if isinstance(output, (tuple, list)) else output
            return cross_entropy(logits.float(), labels)

        return BenchmarkModel(module=module, args=(images,), batch_size=batch_size, source=self.source, loss=loss)
