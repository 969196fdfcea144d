"""The verifier's compiled run is the step that was timed where the child hands it over (issue 41:
no second trace and compile of the model): a compiled inference step whose model kept the state
it was loaded with. Anything else compiles a fresh copy, and the record says why."""

from __future__ import annotations


import pytest
import torch
from torch import nn

from benchmark_models.model import BenchmarkModel
from conftest import dummy_driver
from experiment_runner.child.driver import ExperimentDriver, reusable_timed_step, state_versions
from verifier import verify_experiment
from verifier.run import DRAWS_RANDOM_NUMBERS, compile_settings


def timed(harness: ExperimentDriver) -> ExperimentDriver:
    """The harness as the child leaves it: its compiled step timed, then handed over."""
    step = harness.make_step(harness.load())
    for _ in range(3):
        step()
    harness.timed_step = step
    return harness


def test_the_timed_step_is_the_compiled_run_and_is_dropped_after_it(tmp_path, verifier_runs):
    harness = timed(dummy_driver(tmp_path))
    timings: dict[str, float] = {}
    verification = verify_experiment(harness, timings)
    assert verification["code"] == "PASS", verification
    assert verification["details"]["compiled_run"] == "timed step"
    assert not any(compiled for _, compiled in verifier_runs) and harness.timed_step is None
    assert timings["verify_compiled_s"] > 0


def test_the_timed_step_is_not_compiled_again_for_the_verification(tmp_path):
    """The determinism settings are in dynamo's global-state guard: run under them, the timed step
    would trace and compile the model a second time (dynamo's own counters say how many graphs
    it compiled), and the verdict would be another graph's."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    harness = timed(dummy_driver(tmp_path, dynamo="aot_eager"))
    compiled = counters["stats"]["unique_graphs"]
    assert compiled > 0
    verification = verify_experiment(harness)
    assert verification["code"] == "PASS" and verification["details"]["compiled_run"] == "timed step"
    assert counters["stats"]["unique_graphs"] == compiled
    assert verification["details"]["determinism"]["torch.use_deterministic_algorithms"] is True  # the rest under them


def test_what_the_timed_step_computes_is_what_is_judged(tmp_path, verifier_runs):
    harness = timed(dummy_driver(tmp_path))
    step = harness.timed_step
    harness.timed_step = lambda: step() * 1.5
    verification = verify_experiment(harness)
    assert verification["code"] == "FAIL" and not any(compiled for _, compiled in verifier_runs)


def test_without_it_a_fresh_copy_is_compiled_and_the_record_says_why(tmp_path, verifier_runs):
    harness = dummy_driver(tmp_path)
    harness.fresh_copy_reason = "the model changed its parameters or buffers while it was timed"
    verification = verify_experiment(harness)
    assert verification["code"] == "PASS" and ("fp32", True) in verifier_runs
    assert verification["details"]["compiled_run"] == "fresh copy"
    assert verification["details"]["fresh_copy_reason"] == harness.fresh_copy_reason


class Counting(nn.Module):
    """A module that, as some models do, keeps state its forward changes: in place or replaced."""

    def __init__(self, mutation: str | None) -> None:
        super().__init__()
        self.mutation, self.linear = mutation, nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mutation == "in place":
            self.calls.add_(1)
        elif self.mutation == "replaced":
            self.calls = self.calls + 1
        return self.linear(x)


@pytest.mark.parametrize("mutation, reusable", [(None, True), ("in place", False), ("replaced", False)])
def test_a_model_that_changed_its_state_while_timed_is_compiled_afresh(tmp_path, mutation, reusable):
    harness = dummy_driver(tmp_path)
    model = BenchmarkModel(module=Counting(mutation).eval(), args=(torch.randn(2, 4),), batch_size=2)
    loaded = state_versions(model.module)
    step = harness.make_step(model)
    for _ in range(3):
        step()
    reason = reusable_timed_step(harness, loaded, model)
    assert (reason is None) == reusable
    if not reusable:
        assert reason == "the model changed its parameters or buffers while it was timed"


@pytest.mark.parametrize("test, dynamo, options", [("train", "eager", "default"), ("eval", None, "default"),
                                                    ("eval", "inductor", "aot-inductor")])
def test_only_a_compiled_inference_step_serves(tmp_path, test, dynamo, options):
    harness = dummy_driver(tmp_path, test, dynamo, options)
    model = BenchmarkModel(module=Counting(None).eval(), args=(torch.randn(2, 4),), batch_size=2)
    assert reusable_timed_step(harness, state_versions(model.module), model) is not None


@pytest.mark.parametrize("test, dynamo, options, compiles", [
    ("train", "inductor", "default", True),
    ("eval", "inductor", "max-autotune", True),
    ("eval", None, "default", False),  # eager: nothing to compile
    ("eval", "inductor", "aot-inductor", False),  # loads the timed step's package
])
def test_a_fresh_copy_compiles_under_the_harness_s_accuracy_settings(tmp_path, test, dynamo, options, compiles):
    assert compile_settings(dummy_driver(tmp_path, test, dynamo, options)) == (
        {"fallback_random": True} if compiles else None)


def test_a_timed_step_that_draws_random_numbers_is_not_the_compiled_run(tmp_path, verifier_runs):
    """A step that moved the seeded generator drew what it was compiled to draw, not eager's: a
    fresh copy compiled under the accuracy runs' settings is judged, and the record says why."""
    harness = timed(dummy_driver(tmp_path))
    step = harness.timed_step
    harness.timed_step = lambda: step() + torch.rand(())
    verification = verify_experiment(harness)
    assert verification["code"] == "PASS" and ("fp32", True) in verifier_runs
    details = verification["details"]
    assert details["compiled_run"] == "fresh copy" and details["fresh_copy_reason"] == DRAWS_RANDOM_NUMBERS
    assert details["inductor_config"] == {"fallback_random": True} and harness.timed_step is None


def test_a_timed_step_that_returns_nothing_is_still_the_compiled_run(tmp_path, verifier_runs):
    """None is a step's output like any other: judged against eager's (and wrong here), not taken
    for a step that drew random numbers and set aside for a fresh copy that would pass."""
    harness = timed(dummy_driver(tmp_path))
    step = harness.timed_step
    harness.timed_step = lambda: (step(), None)[1]
    verification = verify_experiment(harness)
    details = verification["details"]
    assert details["compiled_run"] == "timed step" and "fresh_copy_reason" not in details, details
    assert verification["code"] == "FAIL" and not any(compiled for _, compiled in verifier_runs)
