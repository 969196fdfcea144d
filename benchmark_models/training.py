"""How a model trains: the loss that reduces its outputs and the optimizer that steps it.

The recipes are the references' (see data/training.json for where each fact comes from),
so a training step here is the workload PyTorch/XLA's runner and PyTorch's dashboards
time. Every record names the recipe it ran (`experiment.loss`, `experiment.optimizer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from benchmark_models.data_files import read_data

if TYPE_CHECKING:
    import torch

# Loss names → what they compute; the record carries the name.
LOSSES = {
    "mean_per_output": "each output's elements averaged, then averaged over outputs "
                       "(torch._dynamo.testing.reduce_to_scalar_loss)",
    "mean_of_first_output": "reduce_to_scalar_loss of the first output (PyTorch's timm harness)",
    "model_own": "the loss the model computes from the labels it is given",
}


@dataclass(frozen=True)
class TrainingRecipe:
    loss: str
    optimizer: str  # a torch.optim class name
    lr: float

    @property
    def optimizer_spec(self) -> str:
        """What the record says, e.g. `Adam(lr=0.01)`."""
        return f"{self.optimizer}(lr={self.lr:g})"

    def make_optimizer(self, params: Any) -> "torch.optim.Optimizer":
        import torch

        return getattr(torch.optim, self.optimizer)(params, lr=self.lr)


@lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    return read_data("training.json")


def recipe_for(suite_name: str, model_name: str) -> TrainingRecipe:
    """The references' recipe for a model; suites not listed (plugins) train like torchbench."""
    data = _data()
    suite = data["suites"].get(suite_name, data["suites"]["torchbench"])
    optimizer = "SGD" if model_name in suite["sgd_models"] else "Adam"
    return TrainingRecipe(loss=suite["loss"], optimizer=optimizer, lr=float(data["lr"]))


def reduce_outputs(output: Any) -> "torch.Tensor":
    """`mean_per_output`: PyTorch's own reduction, so the loss is the references' to the letter."""
    from torch._dynamo.testing import reduce_to_scalar_loss

    if hasattr(output, "to_tuple") and not isinstance(output, dict):
        output = output.to_tuple()
    return reduce_to_scalar_loss(output)


def reduce_first_output(output: Any) -> "torch.Tensor":
    """`mean_of_first_output`: models that return (logits, aux...) are judged on the logits."""
    return reduce_outputs(output[0] if isinstance(output, (tuple, list)) else output)


class TrainingState:
    """A training model's parameters, buffers and optimizer state, saved once and restored in place.

    Timing rewinds to the saved state before every timed repeat, so repeat 1 and repeat 10
    time the same workload: without it, the references' losses (unbounded means of the
    outputs) under Adam walk the weights away a little every step, and the values, their
    denormals and the timings drift with them. Restoring copies into the same tensors, so
    a compiled step's guards and its optimizer's state keep their identity.
    """

    def __init__(self, module: "torch.nn.Module", optimizer: "torch.optim.Optimizer") -> None:
        self.module = module
        self.optimizer = optimizer
        self._saved: list[tuple[Any, Any]] | None = None

    def _slots(self) -> list[tuple[Any, Any]]:
        """(container, key) of every value to save: tensors of the module, then optimizer state."""
        slots: list[tuple[Any, Any]] = [(self.module, name) for name, _ in self.module.named_parameters()]
        slots += [(self.module, name) for name, _ in self.module.named_buffers()]
        for state in self.optimizer.state.values():
            slots += [(state, key) for key in state]
        return slots

    def rewind(self) -> None:
        """The first call saves the current state; every later call restores it."""
        import torch

        with torch.no_grad():
            if self._saved is None:
                self._saved = [(slot, _copy(self._value(slot))) for slot in self._slots()]
                return
            for (container, key), saved in self._saved:
                current = self._value((container, key))
                if isinstance(current, torch.Tensor):
                    current.copy_(saved)
                else:
                    container[key] = saved

    def _value(self, slot: tuple[Any, Any]) -> Any:
        container, key = slot
        if isinstance(container, dict):
            return container[key]
        try:
            return container.get_parameter(key)
        except AttributeError:
            return container.get_buffer(key)


def _copy(value: Any) -> Any:
    import torch

    return value.detach().clone() if isinstance(value, torch.Tensor) else value
