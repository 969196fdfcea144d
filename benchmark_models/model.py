"""The loading half of a suite, child side: a loaded model and the helpers suites share.

Imported only inside an experiment's child (torch is imported lazily, but this is where
model code starts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from benchmark_models.training import TrainingRecipe, TrainingState, reduce_first_output, reduce_outputs

if TYPE_CHECKING:
    import torch

# Plugin suites that say nothing train like torchbench's default: reduced outputs, Adam(lr=0.01).
DEFAULT_RECIPE = TrainingRecipe(loss="mean_per_output", optimizer="Adam", lr=0.01)


@dataclass
class BenchmarkModel:
    """A loaded model, ready on its device, with the inputs one iteration uses.

    `recipe` says how it trains (loss and optimizer, the references' per suite and model);
    `loss` overrides the recipe's reduction where the suite computes its own (huggingface:
    the model's loss from its labels); `forward` overrides how the module is called.
    """

    module: "torch.nn.Module"
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    batch_size: int = 1
    source: str = "builtin"
    recipe: TrainingRecipe = DEFAULT_RECIPE
    forward: Callable[["torch.nn.Module", tuple, dict], Any] | None = None
    loss: Callable[[Any], "torch.Tensor"] | None = None
    training_state: TrainingState | None = None  # set by the harness when it builds a train step
    provenance: dict[str, Any] = field(default_factory=dict)  # where the model's code came from, for `environment`

    def run_forward(self, module: "torch.nn.Module", args: tuple, kwargs: dict) -> Any:
        if self.forward is not None:
            return self.forward(module, args, kwargs)
        return module(*args, **kwargs)

    def compute_loss(self, output: Any) -> "torch.Tensor":
        loss = self._unscaled_loss(output)
        return loss if self.recipe.loss_scale == 1.0 else loss * self.recipe.loss_scale

    def _unscaled_loss(self, output: Any) -> "torch.Tensor":
        if self.loss is not None:
            return self.loss(output)
        if self.recipe.loss == "mean_of_first_output":
            return reduce_first_output(output)
        if self.recipe.loss == "mean_per_output":
            return reduce_outputs(output)
        raise ValueError(f"training loss {self.recipe.loss!r} needs the suite's own loss function")

    def optimizer(self, params: Any) -> "torch.optim.Optimizer | None":
        return self.recipe.make_optimizer(params)


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
