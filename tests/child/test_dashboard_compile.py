"""The dashboard configurations' compile paths, as PyTorch's harness runs them: the batch marked
dynamic, AOT Inductor, and the graph-break count of its accuracy run."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch
from torch import nn

from benchmark_models.model import BenchmarkModel
from experiment_runner.child.devices import DeviceRuntime
from experiment_runner.child.harness import AotInductorModule, ExperimentHarness
from experiment_runner.child.instrument.dynamo import harness_graph_breaks
from experiment_runner.core.matrix import Experiment, ExperimentConfig
from experiment_runner.core.options import RunOptions


class Breaking(nn.Module):
    """A linear layer and a graph break in the middle of the forward, or none."""

    def __init__(self, breaks: bool) -> None:
        super().__init__()
        self.breaks, self.linear = breaks, nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear(x)
        if self.breaks:
            torch._dynamo.graph_break()
        return x * 2


def harness_for(tmp_path: Path, options: str, batch_size: int | None = None) -> ExperimentHarness:
    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo="inductor", test="eval",
                              precision="fp32", batch_size=batch_size, compile_options=options)
    return ExperimentHarness(Experiment("dummy", "dummy", config), RunOptions(), DeviceRuntime(config), tmp_path)


@pytest.mark.parametrize("batch_size, marked", [(8, {0}), (1, None)])
def test_dynamic_marks_the_batch_dimension_alone_as_the_harness_does(tmp_path, monkeypatch, batch_size, marked):
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    h = harness_for(tmp_path, "dynamic", batch_size)
    model = h.load()
    h.make_step(model)
    (inputs,) = model.args
    assert inputs.shape[0] == batch_size
    assert getattr(inputs, "_dynamo_weak_dynamic_indices", None) == marked


def test_the_harness_graph_break_count_replays_its_accuracy_run_from_a_clean_dynamo():
    def count(breaks: bool) -> int:
        model = BenchmarkModel(module=Breaking(breaks).eval(), args=(torch.randn(2, 4),), batch_size=2)
        return harness_graph_breaks(model, contextlib.nullcontext, iterations=2)

    assert count(False) == 0
    before = count(True)
    assert before > 0
    # The experiment's own compiled frames (cached, breaks already counted) must not hide any.
    module = Breaking(True).eval()
    torch.compile(module, backend="eager")(torch.randn(2, 4))
    assert count(True) == before


@pytest.mark.e2e  # AOT Inductor runs the C++ compiler
def test_aot_inductor_exports_compiles_and_loads_on_first_call(tmp_path):
    torch.manual_seed(0)
    module, x = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval(), torch.randn(3, 8)
    package = tmp_path / "aot_inductor.pt2"
    compiled = AotInductorModule(module, freezing=True, package=package)
    with torch.no_grad():
        expected = module(x)
        assert torch.allclose(compiled(x), expected, atol=1e-5)
        loaded = compiled.loaded
        assert loaded is not None and not package.exists()  # loaded once, its package no longer on disk
        assert torch.allclose(compiled(x), expected, atol=1e-5) and compiled.loaded is loaded
