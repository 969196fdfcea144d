"""The dashboard configurations' compile paths, as PyTorch's harness runs them: the batch marked
dynamic, AOT Inductor, and the graph-break count of its accuracy run."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch
from torch import nn

from benchmark_models.model import BenchmarkModel
from benchmark_models.training import TrainingRecipe
from experiment_runner.child.devices import DeviceRuntime
from experiment_runner.child.driver import (AotInductorModule, AotPackage, ExperimentDriver, input_signature,
                                             state_versions)
from experiment_runner.child.instrument.dynamo import harness_accuracy_stats, harness_training_stats
from experiment_runner.child.main import NO_BREAK, harness_accuracy_counters, run_task
from experiment_runner.core import dashboards
from experiment_runner.core.matrix import DEFAULT_COMPILE_OPTIONS, Experiment, ExperimentConfig
from experiment_runner.core.options import RunOptions
from experiment_runner.core.protocol import Task
from verifier import verify_experiment


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


def harness_for(tmp_path: Path, options: str, batch_size: int | None = None, verify: bool = False) -> ExperimentDriver:
    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo="inductor", test="eval",
                              precision="fp32", batch_size=batch_size, compile_options=options)
    return ExperimentDriver(Experiment("dummy", "dummy", config), RunOptions(verify=verify), DeviceRuntime(config),
                             tmp_path)


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
        return harness_accuracy_stats(model, contextlib.nullcontext, iterations=2)["graph_breaks"]

    assert count(False) == 0
    before = count(True)
    assert before > 0
    # The experiment's own compiled frames (cached, breaks already counted) must not hide any.
    module = Breaking(True).eval()
    torch.compile(module, backend="eager")(torch.randn(2, 4))
    assert count(True) == before


@pytest.mark.parametrize("breaks", [False, True])
def test_the_timed_eval_step_breaks_in_the_frames_the_harness_forward_pass_breaks_in(tmp_path, breaks):
    """The timed step calls the module itself, as the harness's forward_pass does: a frame of ours in
    between would be one more frame for a break to break (DistillGPT2: 5 against the harness's 4)."""
    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo="eager", test="eval",
                              precision="fp32", batch_size=2)
    driver = ExperimentDriver(Experiment("dummy", "dummy", config), RunOptions(), DeviceRuntime(config), tmp_path)
    model = BenchmarkModel(module=Breaking(breaks).eval(), args=(torch.randn(2, 4),), batch_size=2)
    harness = harness_accuracy_stats(model, contextlib.nullcontext, iterations=2)
    torch._dynamo.reset()
    before = sum(torch._dynamo.utils.counters["graph_break"].values())
    driver.make_step(model)()
    timed = sum(torch._dynamo.utils.counters["graph_break"].values()) - before
    torch._dynamo.reset()
    assert timed == harness["graph_breaks"] == (2 if breaks else 0)


@pytest.mark.parametrize("breaks", [False, True])
def test_the_accuracy_rows_counters_are_one_compile_of_the_forward_as_dynamo_counts_it(breaks):
    """The harness compiles forward_pass and calls it twice: the second call runs the first one's
    code, so the row holds one forward's calls and graphs (a replay compiling the loop around it
    would capture the forward twice), whatever the experiment counted before."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    with torch.no_grad():
        torch.compile(Breaking(breaks).eval(), backend="eager")(torch.randn(2, 4))
    once = {group: dict(values) for group, values in torch._dynamo.utils.counters.items()}
    model = BenchmarkModel(module=Breaking(breaks).eval(), args=(torch.randn(2, 4),), batch_size=2)
    stats = harness_accuracy_stats(model, contextlib.nullcontext, iterations=2)
    assert stats["calls_captured"] == once["stats"]["calls_captured"] > 0
    assert stats["unique_graphs"] == once["stats"]["unique_graphs"] == (2 if breaks else 1)
    assert stats["unique_graph_breaks"] == len(once.get("graph_break", {})) == int(breaks)
    assert stats["fallbacks_to_eager"] == stats["autograd_captures"] == stats["autograd_compiles"] == 0
    # The eager backend the replay traces with never reaches inductor's cudagraph counter.
    assert "cudagraph_skips" not in stats


def test_the_replay_runs_under_the_determinism_of_the_harness_accuracy_process(tmp_path, monkeypatch):
    """What some models trace depends on it (GPT-2's attention takes one call more with deterministic
    algorithms), so the replay sets it, and puts back what the experiment had."""
    seen = []

    def stats(model: BenchmarkModel, autocast: object, iterations: int) -> dict[str, int]:
        seen.append(torch.are_deterministic_algorithms_enabled())
        return {"graph_breaks": 0}

    monkeypatch.setattr("experiment_runner.child.main.harness_accuracy_stats", stats)
    assert not torch.are_deterministic_algorithms_enabled()
    assert harness_accuracy_counters(harness_for(tmp_path, DEFAULT_COMPILE_OPTIONS)) == ({"graph_breaks": 0},
                                                                                        "replayed")
    assert seen == [True] and not torch.are_deterministic_algorithms_enabled()


class OracleStep:
    """The training step of PyTorch's harness as its accuracy check compiles it
    (benchmarks/dynamo common.py and torchbench.py: forward_and_backward_pass, written out here
    independently of the replay): the count to match."""

    def __init__(self, optimizer: torch.optim.Optimizer | None, loss: str) -> None:
        self.optimizer, self.loss = optimizer, loss

    @torch._disable_dynamo(recursive=True)
    def zero_grad(self, mod: nn.Module) -> None:
        if self.optimizer is None:
            mod.zero_grad(True)
        else:
            self.optimizer.zero_grad(True)

    def compute_loss(self, pred: torch.Tensor) -> torch.Tensor:
        if self.loss == "own":  # huggingface's: pred[0]
            return pred[0].sum()
        if self.loss == "scaled":  # timm's scaled_compute_loss
            return torch._dynamo.testing.reduce_to_scalar_loss(pred) / 1000.0
        return torch._dynamo.testing.reduce_to_scalar_loss(pred)

    def forward_and_backward_pass(self, mod: nn.Module, inputs: list, collect_outputs: bool = True) -> object:
        cloned = torch._dynamo.utils.clone_inputs(inputs)
        self.zero_grad(mod)
        pred = mod(*cloned)
        loss = self.compute_loss(pred)
        loss.backward()
        if self.optimizer is not None:
            self.optimizer.step()
        if collect_outputs:
            return torch._dynamo.testing.collect_results(mod, pred, loss, cloned)
        return None


def make_optimizer(kind: str, module: nn.Module) -> torch.optim.Optimizer | None:
    if kind == "none":
        return None
    if kind == "SGD":
        optimizer = torch.optim.SGD(module.parameters(), lr=0.01, foreach=True)
        optimizer.step = torch._dynamo.disable(optimizer.step)
        return optimizer
    return torch.optim.Adam(module.parameters(), lr=0.01, capturable=True, foreach=True)


def oracle_count(breaks: bool, kind: str, loss: str) -> int:
    torch.manual_seed(0)
    module = Breaking(breaks)
    # Compiled as the harness compiles its model_iter_fn: the bound method.
    step = torch.compile(OracleStep(make_optimizer(kind, module), loss).forward_and_backward_pass, backend="eager")
    torch._dynamo.reset()
    before = sum(torch._dynamo.utils.counters["graph_break"].values())
    inputs = [torch.randn(2, 4)]  # run_n_iterations passes the same inputs to every call
    step(module, inputs, collect_outputs=False)
    step(module, inputs, collect_outputs=True)
    return sum(torch._dynamo.utils.counters["graph_break"].values()) - before


# Each loss as its suite builds the model: huggingface's own loss (recipe model_own), the reduction,
# and timm's scaled_compute_loss models (mobilevit_s), the recipe carrying the harness's scale.
LOSSES = {
    "own": dict(recipe=TrainingRecipe(loss="model_own", optimizer=None, lr=0.0), loss=lambda pred: pred[0].sum()),
    "reduce": dict(recipe=TrainingRecipe(loss="mean_per_output", optimizer=None, lr=0.0)),
    "scaled": dict(recipe=TrainingRecipe(loss="mean_of_first_output", optimizer=None, lr=0.0, loss_scale=0.001)),
}


@pytest.mark.parametrize("breaks, kind, loss", [
    (False, "none", "reduce"), (False, "SGD", "reduce"), (False, "Adam", "reduce"), (True, "Adam", "reduce"),
    (False, "none", "own"), (False, "SGD", "scaled"), (True, "none", "scaled"),
])
def test_the_harness_training_graph_break_count_is_its_steps_frame_for_frame(breaks, kind, loss):
    expected = oracle_count(breaks, kind, loss)
    torch.manual_seed(0)
    module = Breaking(breaks)
    model = BenchmarkModel(module=module, args=(torch.randn(2, 4),), batch_size=2, **LOSSES[loss])
    stats = harness_training_stats(model, make_optimizer(kind, module), contextlib.nullcontext, 2)
    assert stats["graph_breaks"] == expected
    # The step breaks whatever the model does (backward and the harness's skipped calls).
    assert expected > 0


@pytest.mark.e2e  # run_task describes the host (uname)
@pytest.mark.parametrize("model, method", [("whole", NO_BREAK), ("breaks", "replayed")])
def test_the_harness_count_is_replayed_after_verification_only_where_a_frame_broke(tmp_path, monkeypatch, model,
                                                                                     method):
    monkeypatch.setenv("EXPERIMENT_RUNNER_SUITES", "graph_break=graph_break_suite:GraphBreakSuite")
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "support"))
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo="eager", test="eval",
                              precision="fp32", batch_size=2)
    task = Task(Experiment("graph_break", model, config), RunOptions(verify=True, repeat=1), str(tmp_path))
    result = run_task(task)
    breaks = result.metrics["graph_breaks"]
    assert result.status == "ok" and result.verification_code == "PASS", result.error
    assert breaks["harness_count_method"] == method
    assert (breaks["total"] > 0) == (breaks["harness_count"] > 0) == (model == "breaks")
    # The accuracy row's other counters come from the same run: the replay's, or the timed compile's.
    assert breaks["harness_stats"]["graph_breaks"] == breaks["harness_count"]
    assert breaks["harness_stats"]["calls_captured"] == breaks["calls_captured"] > 0
    assert breaks["harness_stats"]["cudagraph_skips"] == 0  # inductor's, of the timed compile: none on the CPU
    # The verifier ran the timed step either way: a replay comes after it, as it resets dynamo.
    assert result.verification["details"]["compiled_run"] == "timed step"
    phases = list(result.timings)
    assert ("harness_graph_breaks_s" in phases) == (method == "replayed")
    if method == "replayed":
        assert phases.index("harness_graph_breaks_s") > phases.index("verify_s")


@pytest.mark.e2e  # run_task describes the host (uname)
def test_a_training_run_with_the_harness_step_always_replays_it_with_the_jobs_optimizer(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPERIMENT_RUNNER_SUITES", "graph_break=graph_break_suite:GraphBreakSuite")
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "support"))
    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo="eager", test="train",
                              precision="fp32", batch_size=2, training_recipe=dashboards.HARNESS_RECIPE)
    counts = {}
    for model in ("whole", "breaks"):
        (tmp_path / model).mkdir()
        result = run_task(Task(Experiment("graph_break", model, config), RunOptions(verify=True, repeat=1),
                               str(tmp_path / model)))
        assert result.status == "ok" and result.verification_code == "PASS", result.error
        breaks = result.metrics["graph_breaks"]
        # No CI job trains in fp32 on the CPU: the harness on this device takes no optimizer.
        assert breaks["harness_count_method"] == "replayed with optimizer none, the harness's on cpu"
        assert list(result.timings).index("harness_graph_breaks_s") > list(result.timings).index("verify_s")
        counts[model] = breaks["harness_count"]
    # Even a model that breaks nowhere breaks the harness's step; one that breaks adds to that.
    assert 0 < counts["whole"] < counts["breaks"]


@pytest.mark.e2e  # run_task describes the host (uname)
def test_a_replay_that_raises_leaves_the_verdict_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPERIMENT_RUNNER_SUITES", "graph_break=graph_break_suite:GraphBreakSuite")
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "support"))

    def broken(harness: ExperimentDriver) -> tuple[dict[str, int], str]:
        raise RuntimeError("replay broke")

    monkeypatch.setattr("experiment_runner.child.main.harness_accuracy_counters", broken)
    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo="eager", test="eval",
                              precision="fp32", batch_size=2)
    result = run_task(Task(Experiment("graph_break", "breaks", config), RunOptions(verify=True, repeat=1),
                           str(tmp_path)))
    breaks = result.metrics["graph_breaks"]
    assert result.status == "ok" and result.verification_code == "PASS", result.error
    assert breaks["harness_count_error"] == "RuntimeError: replay broke"
    assert "harness_count" not in breaks and "harness_stats" not in breaks


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


def test_a_kept_package_is_loaded_only_for_the_inputs_precision_and_freezing_it_was_built_for(tmp_path, monkeypatch):
    """Anything else it was not compiled for (another batch, dtype, precision or freezing) compiles afresh."""
    compiled: list[str] = []
    monkeypatch.setattr(torch.export, "export", lambda *a, **k: compiled.append("export"))
    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", lambda *a, package_path, **k: package_path)
    monkeypatch.setattr(torch._inductor, "aoti_load_package", lambda path: lambda *args, **kwargs: path)
    x = torch.randn(3, 8)
    path = tmp_path / "kept.pt2"
    path.write_bytes(b"")
    kept = AotPackage(path, "fp32", True, input_signature((x,), {}))

    def call(inputs: torch.Tensor, precision: str = "fp32", freezing: bool = True) -> AotInductorModule:
        module = AotInductorModule(nn.Identity(), freezing, tmp_path / "new.pt2", precision, reuse=kept)
        module(inputs)
        return module

    assert call(torch.randn(3, 8)).reused and compiled == []
    for other in (call(torch.randn(4, 8)), call(x.double()), call(x, "bf16"), call(x, freezing=False)):
        assert not other.reused
    assert compiled == ["export"] * 4
    path.unlink()
    assert not call(x).reused  # a package no longer on disk is not loaded


class Memo:
    """State a model keeps outside its parameters and buffers (a cache object, a step counter)."""

    def __init__(self) -> None:
        self.last: torch.Tensor | None = None
        self.calls = 0


class Remembering(nn.Module):
    """Counts its calls and keeps its last input doubled in a plain object: a forward with side
    effects that torch.export does not undo (it leaves a FakeTensor there)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.memo = Memo()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.memo.last = x * 2
        self.memo.calls += 1
        return self.linear(x)


def test_aot_inductor_exports_a_copy_and_leaves_the_eager_module_as_it_was(tmp_path, monkeypatch):
    """The module is the eager baseline of the pairs: the export (as the harness's, of a deep copy)
    leaves its parameter and buffer objects, their values and its attributes untouched."""
    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", lambda *a, package_path, **k: package_path)
    monkeypatch.setattr(torch._inductor, "aoti_load_package", lambda path: lambda *args, **kwargs: None)
    module = Remembering().eval()
    versions = state_versions(module)
    values = {name: value.clone() for name, value in module.state_dict().items()}
    AotInductorModule(module, freezing=False, package=tmp_path / "aot.pt2")(torch.randn(2, 4))
    assert state_versions(module) == versions
    assert all(torch.equal(value, values[name]) for name, value in module.state_dict().items())
    assert (module.memo.last, module.memo.calls) == (None, 0)


@pytest.mark.e2e  # AOT Inductor runs the C++ compiler
def test_the_verifier_loads_the_package_the_timed_step_built(tmp_path, monkeypatch):
    """With --verify the timed step's package stays on disk, and the verifier's compiled run of
    a fresh copy of the model loads it instead of compiling again; discarding removes it."""
    compiles: list[str] = []
    compile_and_package = torch._inductor.aoti_compile_and_package
    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package",
                        lambda *a, **k: compiles.append("compile") or compile_and_package(*a, **k))
    harness = harness_for(tmp_path, "aot-inductor-freezing", batch_size=4, verify=True)
    model = harness.load()
    harness.make_step(model)()
    package = harness.aot_package
    assert package is not None and package.path.exists() and compiles == ["compile"]
    timings: dict[str, float] = {}
    verification = verify_experiment(harness, timings)
    assert verification["code"] == "PASS", verification
    assert compiles == ["compile"] and timings["verify_compiled_s"] > 0  # loaded, not compiled again
    harness.discard_aot_package()
    assert not package.path.exists() and harness.aot_package is None


@pytest.mark.parametrize("options, inductor", [
    ("no-cudagraphs", None),
    ("cpp-wrapper", {"cpp_wrapper": True}),  # TORCHINDUCTOR_CPP_WRAPPER=1
    ("autotune", {"max_autotune": True}),  # TORCHINDUCTOR_MAX_AUTOTUNE=1: the setting, not the mode
    ("freezing-autotune", {"freezing": True, "max_autotune": True}),
])
def test_the_performance_modes_compile_with_the_inductor_settings_the_harness_sets(tmp_path, monkeypatch, options,
                                                                                   inductor):
    seen: dict = {}
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: seen.update(kwargs) or fn)
    harness_for(tmp_path, options).compile(lambda: None)
    assert seen.get("options") == inductor and "mode" not in seen and seen["backend"] == "inductor"
