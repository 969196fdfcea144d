"""Trains and evaluates; default batch sizes differ per test so the test can tell them apart."""

import torch

from ...util.model import BenchmarkModel


class Model(BenchmarkModel):
    DEFAULT_TRAIN_BSIZE = 6
    DEFAULT_EVAL_BSIZE = 3

    def __init__(self, test, device, batch_size=None, extra_args=[]):
        super().__init__(test=test, device=device, batch_size=batch_size, extra_args=extra_args)
        self.model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
        self.example_inputs = (torch.randn(self.batch_size, 16, device=device),)

    def get_module(self):
        return self.model, self.example_inputs
