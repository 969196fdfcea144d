"""The loading half of a suite, child side: a loaded model and the helpers suites share.

Imported only inside an experiment's child (torch is imported lazily, but this is where
model code starts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import torch


@dataclass
class BenchmarkModel:
    """A loaded model, ready on its device, with the inputs one iteration uses.

    `forward` and `loss` carry the suite's semantics (torchbench sums the output,
    timm uses cross-entropy, huggingface takes the model's own loss).
    """

    module: "torch.nn.Module"
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    batch_size: int = 1
    source: str = "builtin"
    forward: Callable[["torch.nn.Module", tuple, dict], Any] | None = None
    loss: Callable[[Any], "torch.Tensor"] | None = None
    make_optimizer: Callable[[Any], "torch.optim.Optimizer"] | None = None

    def run_forward(self, module: "torch.nn.Module", args: tuple, kwargs: dict) -> Any:
        if self.forward is not None:
            return self.forward(module, args, kwargs)
        return module(*args, **kwargs)

    def compute_loss(self, output: Any) -> "torch.Tensor":
        if self.loss is not None:
            return self.loss(output)
        return sum_outputs(output)

    def optimizer(self, params: Any) -> "torch.optim.Optimizer":
        import torch

        if self.make_optimizer is not None:
            return self.make_optimizer(params)
        return torch.optim.Adam(params, lr=0.01)


def map_tensors(value: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply fn to every tensor in a nested structure of tuples, lists and dicts."""
    import torch

    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, dict):
        return type(value)((k, map_tensors(v, fn)) for k, v in value.items())
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(map_tensors(v, fn) for v in value)
    return value


def sum_outputs(output: Any) -> "torch.Tensor":
    """Torchbench's training loss: the sum of every floating output tensor."""
    import torch

    if isinstance(output, torch.Tensor):
        return output.float().sum() if output.is_floating_point() else output.new_zeros((), dtype=torch.float32)
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (list, tuple)):
        parts = [sum_outputs(o) for o in output if o is not None]
        return sum(parts[1:], parts[0]) if parts else torch.zeros(())
    if hasattr(output, "to_tuple"):
        return sum_outputs(output.to_tuple())
    raise TypeError(f"cannot build a loss from output of type {type(output).__name__}")
