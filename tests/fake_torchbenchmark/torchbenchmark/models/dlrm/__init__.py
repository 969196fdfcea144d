"""Named like a model whose train batch size PyTorch's torchbench.yaml overrides (1024)."""

import torch

from ...util.model import BenchmarkModel


class Model(BenchmarkModel):
    DEFAULT_TRAIN_BSIZE = 8
    DEFAULT_EVAL_BSIZE = 8

    def __init__(self, test, device, batch_size=None, extra_args=[]):
        super().__init__(test=test, device=device, batch_size=batch_size, extra_args=extra_args)
        self.model = torch.nn.Linear(4, 2).to(device)
        self.example_inputs = (torch.randn(self.batch_size, 4, device=device),)

    def get_module(self):
        return self.model, self.example_inputs
