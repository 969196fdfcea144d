"""The part of torchbench's BenchmarkModel contract the runner relies on."""

from __future__ import annotations

from typing import Any

import torch


class BenchmarkModel:
    DEFAULT_TRAIN_BSIZE: int | None = None
    DEFAULT_EVAL_BSIZE: int | None = None

    def __init__(self, test: str, device: str, batch_size: int | None = None, extra_args: list[str] = []) -> None:
        assert test in ("train", "eval"), test
        self.test, self.device, self.extra_args = test, device, extra_args
        default = self.DEFAULT_TRAIN_BSIZE if test == "train" else self.DEFAULT_EVAL_BSIZE
        self.batch_size = batch_size or default
        if not self.batch_size:
            name = "DEFAULT_TRAIN_BSIZE" if test == "train" else "DEFAULT_EVAL_BSIZE"
            raise NotImplementedError(f"Model's {name} is not implemented.")

    def get_module(self) -> tuple[torch.nn.Module, Any]:
        raise NotImplementedError
