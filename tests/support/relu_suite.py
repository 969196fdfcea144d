"""`relu`: test-only models whose forward calls torch.relu, the op PyTorch's fault injection
breaks (the relu_*_TESTING_ONLY dynamo backends, inductor's cpp.inject_relu_bug_TESTING_ONLY),
to give the minifier red experiments to shrink (registered with
EXPERIMENT_RUNNER_SUITES="relu=relu_suite:ReluSuite", this folder on the path).

`mlp`: three linear layers with torch.relu between them; `linear`: one linear layer, no relu,
which every testing backend compiles correctly; `hang`: its load starts a descendant in a
session of its own (beyond a process-group kill) that ignores SIGTERM, then never returns.
The injection is read from RELU_INJECT_ENV at load time, in the experiment's process and in the
minifier's; the launcher and repro.py the minifier writes carry inductor's config themselves."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any

from benchmark_models.base import LoadRequest, ModelNotFound, Suite
from benchmark_models.model import BenchmarkModel

# "accuracy" or "compile_error": set torch._inductor.config.cpp.inject_relu_bug_TESTING_ONLY.
RELU_INJECT_ENV = "RELU_SUITE_INJECT"
_STUBBORN = "import signal, threading; signal.signal(signal.SIGTERM, signal.SIG_IGN); threading.Event().wait()"


def _mlp() -> Any:
    import torch

    class Mlp(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.c = (torch.nn.Linear(8, 8) for _ in range(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.c(torch.relu(self.b(torch.relu(self.a(x)))))

    return Mlp()


class ReluSuite(Suite):
    name = "relu"
    source = "plugin"

    def model_names(self) -> list[str]:
        return ["hang", "linear", "mlp"]

    def load(self, request: LoadRequest) -> BenchmarkModel:
        import torch

        if request.model_name not in self.model_names():
            raise ModelNotFound(request.model_name)
        if request.model_name == "hang":
            subprocess.Popen([sys.executable, "-c", _STUBBORN], start_new_session=True)
            threading.Event().wait()
        if os.environ.get(RELU_INJECT_ENV):
            torch._inductor.config.cpp.inject_relu_bug_TESTING_ONLY = os.environ[RELU_INJECT_ENV]
        module = _mlp() if request.model_name == "mlp" else torch.nn.Linear(8, 8)
        return BenchmarkModel(module=module.to(request.device), args=(torch.randn(4, 8, device=request.device),),
                              batch_size=4, source=self.source)
