"""How a model trains: the loss that reduces its outputs and the optimizer that steps it.

The recipes are the references' (see data/training.json for where each fact comes from).
Two references train differently, so there are two recipes (`--training-recipe`):
`pytorch_xla`, PyTorch/XLA's runner's step (an optimizer step on every device), the default;
and `dynamo_harness`, PyTorch's benchmarks/dynamo harness's step, which its dashboard's training
runs take: cloned inputs, and an optimizer step only where its init_optimizer takes one (on
CUDA; on the CPU none, so its CPU training step is forward and backward). The loss is the
same in both. Every record names what it ran (`experiment.training_recipe`, `.loss`,
`.optimizer`).
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


NO_OPTIMIZER = "none"  # what the record says for a step without one


@dataclass(frozen=True)
class TrainingRecipe:
    loss: str
    optimizer: str | None  # a torch.optim class name; None: no optimizer step
    lr: float
    # Keyword arguments of the optimizer beyond lr (the harness's foreach, capturable).
    optimizer_options: tuple[tuple[str, Any], ...] = ()
    # The harness runs SGD's step outside dynamo (torch._dynamo.disable) to spare its compile.
    step_outside_dynamo: bool = False
    clone_inputs: bool = False  # the harness clones the inputs at every step
    loss_scale: float = 1.0  # the harness divides a few models' losses (timm's SCALED_COMPUTE_LOSS)
    # Whether the module trains in train mode when its accuracy is checked (the harness checks
    # torchbench in eval mode); timed steps always run in train mode.
    checked_in_train_mode: bool = True

    def loss_spec(self, model_own: bool) -> str:
        """What the record says, e.g. `mean_of_first_output`, `model_own`, `mean_of_first_output*0.001`."""
        name = "model_own" if model_own else self.loss
        return name if self.loss_scale == 1.0 else f"{name}*{self.loss_scale:g}"

    @property
    def optimizer_spec(self) -> str:
        """What the record says, e.g. `Adam(lr=0.01)`, `none`."""
        if self.optimizer is None:
            return NO_OPTIMIZER
        options = "".join(f", {key}={value}" for key, value in self.optimizer_options)
        return f"{self.optimizer}(lr={self.lr:g}{options})"

    def make_optimizer(self, params: Any) -> "torch.optim.Optimizer | None":
        import torch

        if self.optimizer is None:
            return None
        optimizer = getattr(torch.optim, self.optimizer)(params, lr=self.lr, **dict(self.optimizer_options))
        if self.step_outside_dynamo:
            optimizer.step = torch._dynamo.disable(optimizer.step)
        return optimizer


@lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    return read_data("training.json")


def recipe_for(suite_name: str, model_name: str) -> TrainingRecipe:
    """PyTorch/XLA's runner's recipe for a model; suites not listed (plugins) train like torchbench."""
    data = _data()
    suite = data["suites"].get(suite_name, data["suites"]["torchbench"])
    optimizer = "SGD" if model_name in suite["sgd_models"] else "Adam"
    return TrainingRecipe(loss=suite["loss"], optimizer=optimizer, lr=float(data["lr"]))


def harness_recipe(recipe: TrainingRecipe, suite_name: str, model_name: str, accelerator: str,
                   dynamo: str | None) -> TrainingRecipe:
    """PyTorch's dynamo harness's step for a model whose suite's recipe is `recipe` (same loss):
    its init_optimizer's choice on `accelerator`, cloned inputs, its loss scale and the mode its
    accuracy check runs the module in."""
    harness = _data()["dynamo_harness"]
    eval_mode = harness["accuracy_eval_mode"]
    common = dict(loss=recipe.loss, clone_inputs=True, loss_scale=float(harness["loss_scale"].get(model_name, 1.0)),
                  checked_in_train_mode=not (model_name in eval_mode["models"] or (
                      suite_name in eval_mode["suites"] and model_name not in eval_mode["except_models"])))
    if accelerator not in harness["optimizer_devices"] or model_name in harness["skip_optimizer_models"]:
        return TrainingRecipe(optimizer=None, lr=0.0, **common)
    sgd = model_name in harness["sgd_models"] or (dynamo == "inductor" and
                                                  model_name in harness["inductor_accuracy_sgd_models"])
    chosen = harness["sgd" if sgd else "adam"]
    return TrainingRecipe(optimizer=chosen["optimizer"], lr=float(chosen["lr"]),
                          optimizer_options=tuple(sorted(chosen["options"].items())),
                          step_outside_dynamo=bool(chosen["step_outside_dynamo"]), **common)


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

    def __init__(self, module: "torch.nn.Module", optimizer: "torch.optim.Optimizer | None") -> None:
        self.module = module
        self.optimizer = optimizer
        self._saved: list[tuple[Any, Any]] | None = None

    def _slots(self) -> list[tuple[Any, Any]]:
        """(container, key) of every value to save: tensors of the module, then optimizer state."""
        slots: list[tuple[Any, Any]] = [(self.module, name) for name, _ in self.module.named_parameters()]
        slots += [(self.module, name) for name, _ in self.module.named_buffers()]
        for state in ({} if self.optimizer is None else self.optimizer.state).values():
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
