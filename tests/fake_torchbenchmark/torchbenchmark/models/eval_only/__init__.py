"""Inference only, like torchbench's llama: no DEFAULT_TRAIN_BSIZE, so train raises
NotImplementedError. Its inputs are a dict, as some torchbench models return."""

import torch

from ...util.model import BenchmarkModel


class Embed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(100, 8)

    def forward(self, ids, scale):
        return self.embedding(ids) * scale


class Model(BenchmarkModel):
    DEFAULT_EVAL_BSIZE = 2

    def __init__(self, test, device, batch_size=None, extra_args=[]):
        super().__init__(test=test, device=device, batch_size=batch_size, extra_args=extra_args)
        self.model = Embed().to(device)
        self.example_inputs = {"ids": torch.randint(0, 100, (self.batch_size, 5), device=device), "scale": 2.0}

    def get_module(self):
        return self.model, self.example_inputs
