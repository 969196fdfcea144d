"""Test-only plug-in for the verifier's end-to-end tests: a suite of tiny models that each
provoke one verification code, and a dynamo backend that is wrong on purpose.

Used through the runner's plug-in seams, as a user's own suite and backend would be:
EXPERIMENT_RUNNER_PLUGINS=verifier_plugin registers the backend `verifier_perturb` in every
child and in the capabilities probe; EXPERIMENT_RUNNER_SUITES=verifier_test=verifier_plugin:VerifierTestSuite
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

PERTURBATION = 1.01  # the backend's error: every floating output 1% too large

SUITE_NAME = "verifier_test"
VERIFIER_DATA: dict[str, Any] = {
    "suites": {SUITE_NAME: {
        "skip": [{"model": "skipped_by_data", "reason": "listed to skip for the test"}],
        "nondeterministic": [{"model": "jitter_listed", "reason": "known jitter, below tolerance"}],
    }},
}


def perturbing_backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
    """Runs the captured graph eagerly, then scales every floating output: a miscompile."""

    def run(*args: Any) -> Any:
        outputs = gm.forward(*args)
        scale = lambda t: t * PERTURBATION if isinstance(t, torch.Tensor) and t.is_floating_point() else t  # noqa: E731
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(scale(o) for o in outputs)
        return scale(outputs)

    return run


torch._dynamo.register_backend(perturbing_backend, name="verifier_perturb")

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


class OpaqueOutput(nn.Module):
    """Returns a set, an output type the comparison does not know how to walk."""

    def forward(self, x: torch.Tensor) -> Any:
        return {"stats": {x.sum().item()}}


class DiesInFloat64(Mlp):
    """Kills its process when given float64: only the verifier's reference run does that."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float64:
            os._exit(3)
        return self.layers(x)


class Dictionary(Mlp):
    """A HuggingFace-like output: a dict of logits and hidden states."""

    def forward(self, x: torch.Tensor) -> dict[str, Any]:
        hidden = self.layers[1](self.layers[0](x))
        return {"logits": self.layers[2](hidden), "hidden_states": (x, hidden)}


MODELS: dict[str, type[nn.Module]] = {
    "tiny_mlp": Mlp,
    "tiny_dict": Dictionary,
    "jitter": Jitter,
    "jitter_listed": Jitter,
    "eager_broken": EagerOnlyBroken,
    "opaque_output": OpaqueOutput,
    "dies_in_fp64": DiesInFloat64,
    "skipped_by_data": Mlp,
}


class VerifierTestSuite(Suite):
    name = SUITE_NAME
    source = "tests/support/verifier_plugin.py"

    def model_names(self) -> list[str]:
        return list(MODELS)

    def load(self, request: LoadRequest) -> BenchmarkModel:
        if request.model_name not in MODELS:
            raise ModelNotFound(request.model_name)
        batch = request.batch_size or 8
        module = MODELS[request.model_name]().to(request.device)
        inputs = torch.randn(batch, 16, device=request.device)
        return BenchmarkModel(module=module, args=(inputs,), batch_size=batch, source=self.source)
