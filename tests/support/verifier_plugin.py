"""Test-only plug-in for the verifier's end-to-end tests: a suite of tiny models that each
provoke one verification code, and dynamo backends that are wrong (or right) on purpose.

Used through the runner's plug-in seams, as a user's own suite and backend would be:
EXPERIMENT_RUNNER_PLUGINS=verifier_plugin registers the backends below in every child and
in the capabilities probe:

- `verifier_perturb`: every floating graph output 1% too large (PERTURBATION);
- `verifier_loss_x1_5`: every floating graph output ×1.5, so a training loss (a sum or a
  mean of outputs alike) is ×1.5;
- `verifier_nan`: the first element of every floating graph output becomes NaN;
- `verifier_identity`: runs the captured graph unchanged.

 EXPERIMENT_RUNNER_SUITES=verifier_test=verifier_plugin:VerifierTestSuite
adds the suite; EXPERIMENT_RUNNER_VERIFIER_DATA=<VERIFIER_DATA written to a file> lists the
models to skip and the one known to be nondeterministic.
"""

from __future__ import annotations

import itertools
import os
from typing import Any, Callable

import torch
from torch import nn

from benchmark_models.base import LoadRequest, ModelNotFound, Suite
from benchmark_models.model import BenchmarkModel

PERTURBATION = 1.01  # verifier_perturb's error: every floating output 1% too large
LOSS_SCALE = 1.5  # verifier_loss_x1_5's error

SUITE_NAME = "verifier_test"
VERIFIER_DATA: dict[str, Any] = {
    "suites": {SUITE_NAME: {
        "skip": [{"model": "skipped_by_data", "reason": "listed to skip for the test"}],
        "nondeterministic": [{"model": "jitter_listed", "reason": "known jitter, below tolerance"}],
    }},
}


def _rewriting_backend(change: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., Any]:
    """A backend that runs the captured graph eagerly, then applies `change` to every
    floating output: a miscompile of a known kind."""

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            outputs = gm.forward(*args)
            fix = lambda t: change(t) if isinstance(t, torch.Tensor) and t.is_floating_point() else t  # noqa: E731
            if isinstance(outputs, (list, tuple)):
                return type(outputs)(fix(o) for o in outputs)
            return fix(outputs)

        return run

    return backend


def first_element_nan(t: torch.Tensor) -> torch.Tensor:
    if t.numel() == 0:
        return t
    mask = torch.zeros(t.shape, dtype=torch.bool, device=t.device)
    mask.view(-1)[0] = True
    return t.masked_fill(mask, float("nan"))


torch._dynamo.register_backend(_rewriting_backend(lambda t: t * PERTURBATION), name="verifier_perturb")
torch._dynamo.register_backend(_rewriting_backend(lambda t: t * LOSS_SCALE), name="verifier_loss_x1_5")
torch._dynamo.register_backend(_rewriting_backend(first_element_nan), name="verifier_nan")
torch._dynamo.register_backend(lambda gm, example_inputs: gm.forward, name="verifier_identity")

_calls = itertools.count(1)


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class Jitter(Mlp):
    """Adds a different tiny offset on every call, as a racy kernel would."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x) + next(_calls) * 1e-7


class EagerOnlyBroken(Mlp):
    """Raises when run eagerly; under dynamo the check is traced away, so compiled runs work."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_compiling():
            raise RuntimeError("this model is broken in eager mode")
        return self.layers(x)


class NanAtFirst(Mlp):
    """Eager itself gives NaN as the first element of its output (as verifier_nan does)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return first_element_nan(self.layers(x))


class Dropping(Mlp):
    """Dropout between its layers: in train mode each step draws masks from the seeded RNG, which a
    compiled step reproduces only where it draws them as eager does."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Dropout(0.5), nn.Linear(32, 4))


class Noisy(Mlp):
    """Adds uniform noise to its output in any mode, as a model that samples does: a compiled step
    draws eager's noise from the same seed only where it draws it as eager does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layers(x)
        return out + torch.rand(out.shape, device=out.device)


class Stats:
    """A plain class: an output type the comparison does not know how to walk."""

    def __init__(self, total: float) -> None:
        self.total = total


class OpaqueOutput(nn.Module):
    """Returns an object of a class the comparison does not know how to walk."""

    def forward(self, x: torch.Tensor) -> Any:
        return {"stats": Stats(x.sum().item())}


class DiesInFloat64(Mlp):
    """Kills its process when given float64: only the verifier's reference run does that. Its
    output holds a one-element leaf (a mean), whose scalar rule needs that run."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if x.dtype == torch.float64:
            os._exit(3)
        out = self.layers(x)
        return out, out.mean()


class Dictionary(Mlp):
    """A HuggingFace-like output: a dict of logits and hidden states."""

    def forward(self, x: torch.Tensor) -> dict[str, Any]:
        hidden = self.layers[1](self.layers[0](x))
        return {"logits": self.layers[2](hidden), "hidden_states": (x, hidden)}


MODELS: dict[str, type[nn.Module]] = {
    "tiny_mlp": Mlp,
    "tiny_dict": Dictionary,
    "nan_at_first": NanAtFirst,
    "jitter": Jitter,
    "jitter_listed": Jitter,
    "eager_broken": EagerOnlyBroken,
    "opaque_output": OpaqueOutput,
    "dies_in_fp64": DiesInFloat64,
    "skipped_by_data": Mlp,
    "tiny_dropout": Dropping,
    "tiny_noise": Noisy,
}


class VerifierTestSuite(Suite):
    name = SUITE_NAME
    source = "tests/support/verifier_plugin.py"
    # Each case's verdict is worked out for fp32 numerics (exact, allclose at 1e-4, RMSE), as the
    # dummy model's are; a plugin suite's default precision reaches the plan through its catalog.
    default_precision = "fp32"

    def model_names(self) -> list[str]:
        return list(MODELS)

    def load(self, request: LoadRequest) -> BenchmarkModel:
        if request.model_name not in MODELS:
            raise ModelNotFound(request.model_name)
        batch = request.batch_size or 8
        module = MODELS[request.model_name]().to(request.device)
        inputs = torch.randn(batch, 16, device=request.device)
        return BenchmarkModel(module=module, args=(inputs,), batch_size=batch, source=self.source)
