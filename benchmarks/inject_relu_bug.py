"""A plugin that breaks inductor's relu on purpose, for measuring the minifier on real models.

    PYTHONPATH=benchmarks EXPERIMENT_RUNNER_PLUGINS=inject_relu_bug INJECT_RELU_BUG=accuracy \
        experiment_runner --suite-name=torchbench --filter=^alexnet$ --dynamo=inductor --verify --minify

Children import it (EXPERIMENT_RUNNER_PLUGINS), the experiment's and the minifier's; it sets
PyTorch's own fault injection, torch._inductor.config.cpp.inject_relu_bug_TESTING_ONLY, to
$INJECT_RELU_BUG ("accuracy": relu(x) + 1; "compile_error": C++ that does not compile;
"runtime_error": a kernel that raises). The minifier's launcher and repro.py write inductor's
config into themselves, so they carry the injection without this plugin.
"""

from __future__ import annotations

import os

import torch._inductor.config

torch._inductor.config.cpp.inject_relu_bug_TESTING_ONLY = os.environ["INJECT_RELU_BUG"]
