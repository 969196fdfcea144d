"""CUDA graphs hand back the same output storage on every replay: what a step returned is
overwritten by the next replay. The timing loop keeps the loss of the first timed step across
all later steps and repeats (the README's llama training command on CUDA does this with
inductor's CUDA graphs on), so it must copy it out as it returns. The step here hands back one
storage on every call, as a replayed graph does, on the CPU."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from benchmark_models.training import TrainingState
from experiment_runner.child.devices import DeviceRuntime
from experiment_runner.child.driver import time_iterations
from experiment_runner.core.matrix import ExperimentConfig
from experiment_runner.core.options import RunOptions

ITERATIONS = 2


def losses_of(module: nn.Module, x: torch.Tensor, steps: int) -> list[float]:
    """The loss of each of `steps` plain SGD steps on a copy of `module`: the oracle."""
    module = copy.deepcopy(module)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    found = []
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = module(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        found.append(float(loss))
    return found


def test_the_first_timed_loss_is_the_first_steps_even_when_replays_reuse_the_output_storage():
    torch.manual_seed(0)
    module = nn.Linear(8, 1)
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(1))
    expected = losses_of(module, x, ITERATIONS)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    replayed = torch.zeros(())  # the graph's static output buffer

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = module(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        return replayed.copy_(loss.detach())

    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo="inductor", test="train",
                              precision="fp32")
    options = RunOptions(repeat=3, iterations_per_run=ITERATIONS, warmup_iterations=1)
    state = TrainingState(module, optimizer)
    state.rewind()  # saved before any step, as the harness saves it at load
    metrics = time_iterations(step, DeviceRuntime(config), options, training_state=state)
    assert expected[0] != expected[-1]  # the optimizer moved: a stale first loss would show
    assert metrics["loss_first_timed_step"] == pytest.approx(expected[0], rel=1e-6)
    assert metrics["loss_last_timed_step"] == pytest.approx(expected[-1], rel=1e-6)


@pytest.mark.parametrize("compile_options, marks", [("default", 1 + 3 * ITERATIONS), ("no-cudagraphs", 0)])
def test_under_cuda_graphs_each_iteration_begins_a_new_graph_step(compile_options: str, marks: int):
    """The CUDA runtime marks every iteration (warm-up and timed) as a new cudagraph-tree step,
    and only where the experiment runs CUDA graphs."""
    from experiment_runner.child.devices.cuda import CudaRuntime

    class SyncOnly:
        def synchronize(self) -> None:
            pass

        def reset_peak_memory_stats(self) -> None:
            pass

        def max_memory_allocated(self) -> int:
            return 0

        max_memory_reserved = max_memory_allocated

    marked: list[int] = []
    config = ExperimentConfig(accelerator="cuda", xla=None, xla_flags=None, dynamo="inductor", test="eval",
                              precision="fp32", compile_options=compile_options)
    runtime = CudaRuntime(config, cuda=SyncOnly(), mark_step_begin=lambda: marked.append(1))
    time_iterations(lambda: None, runtime, RunOptions(repeat=3, iterations_per_run=ITERATIONS, warmup_iterations=1))
    assert len(marked) == marks
