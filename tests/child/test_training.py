"""Training workloads: the references' loss and optimizer per suite, and a timed workload that
stays put (every timed repeat starts from the same weights and optimizer state)."""

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch._dynamo.testing import reduce_to_scalar_loss

from experiment_runner.child.devices import DeviceRuntime
from experiment_runner.child.driver import ExperimentDriver, apply_denormal_mode, time_iterations
from experiment_runner.child.paired import (HARNESS_EAGER_WARMUP, first_warmup_iterations, measure_pairs,
                                            warm_eager_first)
from experiment_runner.core.matrix import Experiment, ExperimentConfig
from experiment_runner.core.options import RunOptions
from benchmark_models import get_suite
from benchmark_models.base import LoadRequest
from benchmark_models.training import TrainingRecipe, TrainingState, harness_recipe, recipe_for


@pytest.mark.parametrize("suite, model, loss, optimizer", [
    ("torchbench", "llama", "mean_per_output", "Adam(lr=0.01)"),
    ("torchbench", "BERT_pytorch", "mean_per_output", "SGD(lr=0.01)"),  # PyTorch/XLA's TRAIN_WITH_SGD
    ("torchbench", "dlrm", "mean_per_output", "SGD(lr=0.01)"),
    ("huggingface", "OPTForCausalLM", "model_own", "SGD(lr=0.01)"),  # PyTorch's BENCHMARK_USE_SGD
    ("huggingface", "BertForMaskedLM", "model_own", "Adam(lr=0.01)"),
    ("timm", "ghostnet_100", "mean_of_first_output", "SGD(lr=0.01)"),
    ("timm", "mobilenetv2_100", "mean_of_first_output", "Adam(lr=0.01)"),
    ("dummy", "dummy", "mean_per_output", "Adam(lr=0.01)"),
    ("some_plugin", "anything", "mean_per_output", "Adam(lr=0.01)"),
])
def test_each_suite_trains_with_the_references_loss_and_optimizer(suite, model, loss, optimizer):
    recipe = recipe_for(suite, model)
    assert (recipe.loss, recipe.optimizer_spec) == (loss, optimizer)


def test_torchbench_loss_is_torchs_reduce_to_scalar_loss_not_a_sum():
    loaded = get_suite("torchbench").load(LoadRequest("BERT_pytorch", "train", "cpu", "cpu", "fp32", batch_size=1))
    with torch.no_grad():
        output = loaded.run_forward(loaded.module, loaded.args, loaded.kwargs)
    assert isinstance(output, tuple) and len(output) == 2
    loss = loaded.compute_loss(output)
    assert torch.equal(loss, reduce_to_scalar_loss(output))
    summed = sum(o.float().sum() for o in output)
    assert abs(float(loss)) < abs(float(summed)) / 100  # a mean over 20k-word logits, not their sum


def test_timm_reduces_its_logits_as_pytorchs_harness_does():
    loaded = get_suite("timm").load(LoadRequest("mobilenetv2_100", "train", "cpu", "cpu", "fp32", batch_size=1))
    logits = torch.randn(1, 1000)
    assert torch.equal(loaded.compute_loss(logits), logits.sum() / logits.numel())
    assert torch.equal(loaded.compute_loss((logits, torch.ones(3))), logits.sum() / logits.numel())


def test_rewind_restores_weights_buffers_and_optimizer_state_in_place():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2))
    optimizer = TrainingRecipe("mean_per_output", "Adam", 0.01).make_optimizer(module.parameters())
    inputs = torch.randn(16, 4)

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = reduce_to_scalar_loss(module(inputs))
        loss.backward()
        optimizer.step()
        return loss

    step()  # the optimizer's state exists from here on, as after warm-up
    state = TrainingState(module, optimizer)
    state.rewind()
    saved = {k: v.clone() for k, v in module.state_dict().items()}
    exp_avg = optimizer.state[module[0].weight]["exp_avg"]
    saved_exp_avg, saved_step = exp_avg.clone(), optimizer.state[module[0].weight]["step"].clone()
    losses = [float(step().detach()) for _ in range(5)]
    assert losses[-1] < losses[0]  # training moved the weights
    state.rewind()
    for key, value in module.state_dict().items():
        assert torch.equal(value, saved[key]), key
    assert optimizer.state[module[0].weight]["exp_avg"] is exp_avg, "restored in place: same tensor"
    assert torch.equal(exp_avg, saved_exp_avg)
    assert torch.equal(optimizer.state[module[0].weight]["step"], saved_step)
    assert float(step().detach()) == pytest.approx(losses[0])


def harness(tmp_path: Path, **options) -> ExperimentDriver:
    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo=None, test="train",
                              precision="fp32")
    return ExperimentDriver(Experiment("dummy", "dummy", config), RunOptions(**options),
                             DeviceRuntime(config), tmp_path)


def test_every_timed_repeat_starts_from_the_same_state_and_the_losses_are_kept(tmp_path):
    h = harness(tmp_path, repeat=4, iterations_per_run=3, warmup_iterations=2)
    model = h.load()
    step = h.make_step(model)
    seen: list[float] = []
    metrics = time_iterations(lambda: seen.append(float(step().detach())) or step(), h.device, h.options,
                              training_state=model.training_state)
    per_repeat = [seen[2 + 3 * r:2 + 3 * (r + 1)] for r in range(4)]
    assert all(run == pytest.approx(per_repeat[0]) for run in per_repeat), per_repeat
    assert metrics["loss_first_timed_step"] != metrics["loss_last_timed_step"]  # 2 steps per call here
    without = time_iterations(step, h.device, h.options)
    assert "loss_first_timed_step" not in without


@pytest.mark.parametrize("flush", [True, False])
def test_the_denormal_mode_is_set_either_way(flush):
    tiny = torch.tensor([1e-40], dtype=torch.float32)
    try:
        apply_denormal_mode(RunOptions(flush_denormal=flush))
        assert (float(tiny * 1.0) == 0.0) is flush
    finally:
        torch.set_flush_denormal(False)


@pytest.mark.parametrize("speedup, expected", [("paired", 3), ("harness", HARNESS_EAGER_WARMUP)])
def test_the_baseline_s_first_warm_up_trains_a_copy_and_leaves_the_timed_model_as_it_was(tmp_path, speedup, expected):
    """paired.warm_eager_first: eager iterations before the compile, on a deep copy (its own
    parameters and optimizer), as PyTorch's harness does; the model the pairs time is untouched."""
    h = harness(tmp_path, speedup=speedup, warmup_iterations=3)
    model = h.load()
    saved = {key: value.clone() for key, value in model.module.state_dict().items()}
    calls: list[torch.nn.Module] = []

    def counted(module: torch.nn.Module, args: tuple, kwargs: dict):
        calls.append(module)
        return module(*args, **kwargs)

    warm_eager_first(h, replace(model, forward=counted), h.device, h.options)
    assert len(calls) == expected == first_warmup_iterations(h.options)
    assert all(module is calls[0] and module is not model.module for module in calls)
    assert any(not torch.equal(value, saved[key]) for key, value in calls[0].state_dict().items())  # it trained
    for key, value in model.module.state_dict().items():
        assert torch.equal(value, saved[key]), key
    assert model.training_state is None


@pytest.mark.parametrize("speedup, before_pairs", [("paired", 3), ("harness", 0)])
def test_between_the_compile_and_the_pairs_eager_warms_up_only_where_the_harness_would(tmp_path, speedup,
                                                                                      before_pairs):
    """Under harness the pairs' first eager sample is the model's first eager step after the compile,
    as in the harness's speedup_experiment (its warm-up ran on a copy before); paired warms it up."""
    h = harness(tmp_path, speedup=speedup, warmup_iterations=3, adaptive_pairs=False, repeat=6)
    model = h.load()
    calls: list[torch.nn.Module] = []

    def counted(module: torch.nn.Module, args: tuple, kwargs: dict):
        calls.append(module)
        return module(*args, **kwargs)

    model = replace(model, forward=counted)
    compiled = h.make_step(replace(model, forward=None))
    timings: dict[str, float] = {}
    paired = measure_pairs(h, model, compiled, h.device, h.options, 1, timings)
    assert len(paired["baseline_per_iter_time"]) == 30
    assert len(calls) == 30 + before_pairs
    assert set(timings) == {"pairs_warmup_s", "pairs_s"}


def mlp_by_hand(module: torch.nn.Sequential, inputs: torch.Tensor) -> tuple[float, dict[str, torch.Tensor]]:
    """The dummy MLP's mean-of-output loss and its gradients, in float64, by hand (matrix products
    only, no autograd): the independent computation a training step is checked against."""
    w = {name: p.detach().double() for name, p in module.named_parameters()}
    x = inputs.double()
    z1 = x @ w["0.weight"].T + w["0.bias"]
    a1 = z1.clamp(min=0)
    z2 = a1 @ w["2.weight"].T + w["2.bias"]
    a2 = z2.clamp(min=0)
    y = a2 @ w["4.weight"].T + w["4.bias"]
    dy = torch.full_like(y, 1 / y.numel())
    dz2 = (dy @ w["4.weight"]) * (z2 > 0)
    dz1 = (dz2 @ w["2.weight"]) * (z1 > 0)
    grads = {"4.weight": dy.T @ a2, "4.bias": dy.sum(0), "2.weight": dz2.T @ a1, "2.bias": dz2.sum(0),
             "0.weight": dz1.T @ x, "0.bias": dz1.sum(0)}
    return float(y.sum() / y.numel()), grads


def harness_step(tmp_path: Path, recipe: str) -> ExperimentDriver:
    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo=None, test="train",
                              precision="fp32", training_recipe=recipe)
    return ExperimentDriver(Experiment("dummy", "dummy", config), RunOptions(), DeviceRuntime(config), tmp_path)


def one_step(h: ExperimentDriver, model) -> tuple:
    """Run the step once: its loss, gradients and parameters after, the by-hand loss and gradients
    at the parameters before, and those parameters."""
    expected_loss, expected_grads = mlp_by_hand(model.module, model.args[0])
    before = {name: p.detach().clone() for name, p in model.module.named_parameters()}
    loss = h.make_step(model)()
    grads = {name: p.grad for name, p in model.module.named_parameters()}
    after = {name: p.detach() for name, p in model.module.named_parameters()}
    return float(loss), grads, after, expected_loss, expected_grads, before


def assert_matches_by_hand(loss, grads, expected_loss, expected_grads):
    assert loss == pytest.approx(expected_loss, rel=1e-5)
    for name, expected in expected_grads.items():
        assert grads[name] is not None, f"no gradient for {name}: no backward"
        assert torch.allclose(grads[name].double(), expected, rtol=1e-4, atol=1e-7), name


def test_the_harness_step_on_the_cpu_computes_loss_and_gradients_and_takes_no_optimizer_step(tmp_path):
    """PyTorch's harness trains on the CPU without an optimizer (init_optimizer): the step's loss
    and gradients are the by-hand float64 ones, and the parameters are left exactly as they were."""
    h = harness_step(tmp_path, "dynamo_harness")
    model = h.load()
    assert (model.recipe.optimizer_spec, model.recipe.clone_inputs) == ("none", True)
    loss, grads, after, expected_loss, expected_grads, before = one_step(h, model)
    assert_matches_by_hand(loss, grads, expected_loss, expected_grads)
    for name, value in before.items():
        assert torch.equal(after[name], value), f"{name} moved: a step the harness does not take"


def test_the_harness_sgd_step_moves_each_parameter_by_lr_times_its_gradient(tmp_path):
    """On CUDA the harness steps its SGD models with SGD(lr=0.01, foreach=True): the same step, with
    the recipe's optimizer, here on the CPU's tensors."""
    h = harness_step(tmp_path, "dynamo_harness")
    model = h.load()
    model.recipe = harness_recipe(model.recipe, "torchbench", "resnet18", "cuda", "inductor")
    assert model.recipe.optimizer_spec == "SGD(lr=0.01, foreach=True)" and model.recipe.step_outside_dynamo
    loss, grads, after, expected_loss, expected_grads, before = one_step(h, model)
    assert_matches_by_hand(loss, grads, expected_loss, expected_grads)
    for name, grad in expected_grads.items():
        assert torch.allclose(after[name].double(), before[name].double() - 0.01 * grad, rtol=1e-5, atol=1e-7), name


def test_the_default_step_takes_pytorch_xlas_adam_step_on_the_cpu_too(tmp_path):
    """PyTorch/XLA's step (the default recipe) takes its Adam step on every device: Adam's first
    step moves each parameter by lr * g / (|g| + eps)."""
    h = harness_step(tmp_path, "pytorch_xla")
    model = h.load()
    assert model.recipe.optimizer_spec == "Adam(lr=0.01)" and not model.recipe.clone_inputs
    loss, grads, after, expected_loss, expected_grads, before = one_step(h, model)
    assert_matches_by_hand(loss, grads, expected_loss, expected_grads)
    for name, grad in expected_grads.items():
        moved = before[name].double() - 0.01 * grad / (grad.abs() + 1e-8)
        assert torch.allclose(after[name].double(), moved, rtol=1e-4, atol=1e-6), name


@pytest.mark.parametrize("suite, model, accelerator, dynamo, optimizer, train_mode, loss", [
    ("torchbench", "resnet18", "cpu", "inductor", "none", False, "mean_per_output"),  # no optimizer off CUDA
    ("torchbench", "resnet18", "cuda", "inductor", "SGD(lr=0.01, foreach=True)", False, "mean_per_output"),
    ("torchbench", "llama", "cuda", "inductor", "Adam(lr=0.01, capturable=True, foreach=True)", False,
     "mean_per_output"),
    ("torchbench", "demucs", "cuda", "aot_eager", "SGD(lr=0.01, foreach=True)", True, "mean_per_output"),
    ("huggingface", "MobileBertForMaskedLM", "cuda", "inductor", "none", True, "model_own"),  # CI_SKIP_OPTIMIZER
    ("huggingface", "M2M100ForConditionalGeneration", "cuda", "inductor", "SGD(lr=0.01, foreach=True)", False,
     "model_own"),
    ("timm", "mobilevit_s", "cuda", "inductor", "SGD(lr=0.01, foreach=True)", True, "mean_of_first_output*0.001"),
    ("timm", "vit_base_patch14_dinov2.lvd142m", "cuda", "inductor", "SGD(lr=0.01, foreach=True)", True,
     "mean_of_first_output"),
    ("timm", "vit_base_patch14_dinov2.lvd142m", "cuda", "aot_eager",
     "Adam(lr=0.01, capturable=True, foreach=True)", True, "mean_of_first_output"),
])
def test_the_harness_recipe_is_its_init_optimizer_loss_scale_and_accuracy_mode(suite, model, accelerator, dynamo,
                                                                               optimizer, train_mode, loss):
    recipe = harness_recipe(recipe_for(suite, model), suite, model, accelerator, dynamo)
    assert recipe.optimizer_spec == optimizer
    assert recipe.checked_in_train_mode is train_mode
    assert recipe.loss_spec(model_own=suite == "huggingface") == loss


@pytest.mark.parametrize("harness", [False, True], ids=["own recipe", "harness recipe"])
def test_a_scaled_compute_loss_model_is_scaled_once(harness: bool) -> None:
    """timm's scaled_compute_loss divides the reduced loss by 1000, once, under either recipe
    (the suite's own loss and the harness recipe's scale once multiplied to 1e-6)."""
    model = get_suite("timm").load(LoadRequest("mobilevit_s", "train", "cpu", "cpu", "fp32", batch_size=1))
    if harness:
        model.recipe = harness_recipe(model.recipe, "timm", "mobilevit_s", "cpu", "inductor")
    output = torch.full((2, 3), 5.0)
    assert model.compute_loss(output).item() == pytest.approx(reduce_to_scalar_loss(output).item() / 1000)
    assert model.recipe.loss_spec(model.loss is not None) == "mean_of_first_output*0.001"
