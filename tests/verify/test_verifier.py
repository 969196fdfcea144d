"""The verifier's comparison, branch by branch, its tolerance data, and its in-process
procedure on tiny models (the end-to-end CLI runs are in test_verifier_e2e.py)."""

from __future__ import annotations

import json
import math
import sys
from collections import namedtuple
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from experiment_runner.child.devices import DeviceRuntime
from experiment_runner.child.harness import ExperimentHarness
from experiment_runner.core.matrix import Experiment, ExperimentConfig
from experiment_runner.core.options import RunOptions
from verifier import Context, UnsupportedOutput, compare, identical, policy_for, verify_experiment
from verifier.compare import COSINE_THRESHOLD
from verifier.run import reference_harness
from verifier.tolerances import load_data

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def noisy(truth: torch.Tensor, sigma: float, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """truth + Gaussian noise of std sigma, in dtype: a run with a known error."""
    return (truth + sigma * torch.randn(truth.shape, generator=gen(seed), dtype=torch.float64)).to(dtype)


TRUTH = torch.randn(4096, generator=gen(1), dtype=torch.float64)


# --- the four checks ---------------------------------------------------------------------

def test_allclose_passes_within_tolerance():
    eager = TRUTH.float()
    outcome = compare(eager, eager * (1 + 5e-5), TRUTH, tolerance=1e-4)
    assert outcome.passed and outcome.method == "allclose"
    assert 0 < outcome.worst.max_abs_error < 1e-3
    assert outcome.worst.severity <= 1


def test_rmse_rescues_result_as_noisy_as_eager():
    eager, result = noisy(TRUTH, 1e-3, 2), noisy(TRUTH, 1e-3, 3)
    outcome = compare(eager, result, TRUTH, tolerance=1e-4)
    assert outcome.passed and outcome.method == "rmse"
    worst = outcome.worst
    assert worst.multiplier == 2.0
    assert worst.rmse_eager == pytest.approx(1e-3, rel=0.1)
    assert worst.rmse_result <= worst.threshold == pytest.approx(2 * worst.rmse_eager + 1e-5)


def test_rmse_fails_a_result_one_percent_off():
    eager = noisy(TRUTH, 1e-5, 2)
    outcome = compare(eager, eager * 1.01, TRUTH, tolerance=1e-4)
    assert not outcome.passed and outcome.method == "rmse"
    assert outcome.worst.rmse_result > outcome.worst.threshold
    assert "RMSE" in outcome.worst.reason


def test_low_precision_gets_the_larger_multiplier():
    """The same 2.5x excess error passes in bfloat16 (multiplier 3) and fails in float32 (2)."""
    bf16 = compare(noisy(TRUTH, 0.05, 2, torch.bfloat16), noisy(TRUTH, 0.125, 3, torch.bfloat16), TRUTH,
                   tolerance=1e-4)
    fp32 = compare(noisy(TRUTH, 0.05, 2), noisy(TRUTH, 0.125, 3), TRUTH, tolerance=1e-4)
    assert bf16.passed and bf16.worst.multiplier == 3.0
    assert not fp32.passed and fp32.worst.multiplier == 2.0


def test_small_tensors_and_raised_tolerances_get_the_larger_multiplier():
    small = TRUTH[:999]
    assert compare(noisy(small, 0.05, 2), noisy(small, 0.125, 3), small, tolerance=1e-4).worst.multiplier == 3.0
    assert compare(noisy(TRUTH, 0.05, 2), noisy(TRUTH, 0.125, 3), TRUTH, tolerance=2e-2).worst.multiplier == 3.0


def test_cosine_where_chosen():
    eager = TRUTH.float()
    close = compare(eager, eager + 1e-3 * torch.randn(4096, generator=gen(4)), TRUTH, tolerance=1e-6, cosine=True)
    assert close.passed and close.method == "cosine" and close.worst.cosine > COSINE_THRESHOLD
    far = compare(eager, torch.randn(4096, generator=gen(5)), TRUTH, tolerance=1e-6, cosine=True)
    assert not far.passed and far.method == "cosine" and "cosine similarity" in far.worst.reason


def test_cosine_when_the_float64_reference_is_missing():
    eager = TRUTH.float()
    outcome = compare(eager, noisy(TRUTH, 1e-3, 3), None, tolerance=1e-4)
    assert outcome.passed and outcome.method == "cosine"
    assert "no float64 reference" in outcome.worst.reason
    assert not compare(eager, -eager, None, tolerance=1e-4).passed


# --- NaN ---------------------------------------------------------------------------------

def with_nan(t: torch.Tensor, index: int) -> torch.Tensor:
    t = t.clone()
    t[index] = float("nan")
    return t


def test_nan_in_the_same_places_is_equal():
    eager = with_nan(TRUTH.float(), 7)
    assert compare(eager, eager.clone(), TRUTH, tolerance=1e-4).passed


def test_nan_only_in_the_result_fails_whatever_the_rmse():
    eager = TRUTH.float()
    outcome = compare(eager, with_nan(eager, 7), TRUTH, tolerance=1e-4)
    assert not outcome.passed and "NaN positions differ" in outcome.worst.reason
    assert not compare(with_nan(eager, 7), eager, TRUTH, tolerance=1e-4).passed


def test_shared_nan_does_not_poison_the_rmse():
    eager, result = with_nan(noisy(TRUTH, 1e-3, 2), 7), with_nan(noisy(TRUTH, 1e-3, 3), 7)
    outcome = compare(eager, result, with_nan(TRUTH, 7), tolerance=1e-4)
    assert outcome.passed and outcome.method == "rmse" and math.isfinite(outcome.worst.rmse_result)


def test_infinities_must_match():
    eager = TRUTH.float().clone()
    eager[3] = float("inf")
    assert compare(eager, eager.clone(), TRUTH, tolerance=1e-4).passed
    flipped = eager.clone()
    flipped[3] = float("-inf")
    assert not compare(eager, flipped, TRUTH, tolerance=1e-4).passed


# --- structure ---------------------------------------------------------------------------

def test_shape_mismatch():
    outcome = compare({"a": torch.zeros(2, 3)}, {"a": torch.zeros(3, 2)}, None, tolerance=1e-4)
    assert not outcome.passed and outcome.method == "structure" and outcome.worst.path == "a"
    assert "shape mismatch" in outcome.worst.reason


def test_dtype_mismatch():
    outcome = compare([torch.zeros(2)], [torch.zeros(2, dtype=torch.float16)], None, tolerance=1e-4)
    assert not outcome.passed and outcome.worst.path == "0" and "dtype mismatch" in outcome.worst.reason


def test_key_mismatch_names_missing_and_extra_keys():
    outcome = compare({"a": torch.ones(1), "b": torch.ones(1)}, {"a": torch.ones(1), "c": torch.ones(1)},
                      None, tolerance=1e-4)
    assert not outcome.passed and "missing in result ['b']" in outcome.worst.reason
    assert "extra in result ['c']" in outcome.worst.reason


def test_length_and_type_mismatch():
    assert "length mismatch" in compare((1, 2), (1,), None, tolerance=1e-4).worst.reason
    assert "type mismatch" in compare(torch.ones(1), [torch.ones(1)], None, tolerance=1e-4).worst.reason
    assert not compare(1, 1.0, None, tolerance=1e-4).passed


def test_nested_model_output_names_the_worst_path():
    from transformers.modeling_outputs import CausalLMOutput

    logits, hidden = TRUTH.float().reshape(64, 64), (TRUTH[:64].float(), TRUTH[64:128].float())
    ref = CausalLMOutput(logits=logits, hidden_states=hidden)
    fp64 = CausalLMOutput(logits=TRUTH.reshape(64, 64), hidden_states=(TRUTH[:64], TRUTH[64:128]))
    good = CausalLMOutput(logits=logits.clone(), hidden_states=(hidden[0].clone(), hidden[1] * 1.00001))
    assert compare(ref, good, fp64, tolerance=1e-4).passed
    bad = CausalLMOutput(logits=logits.clone(), hidden_states=(hidden[0].clone(), hidden[1] * 1.05))
    outcome = compare(ref, bad, fp64, tolerance=1e-4)
    assert not outcome.passed and outcome.worst.path == "hidden_states.1"
    assert outcome.leaves == 3 and outcome.failures == 1
    worse = CausalLMOutput(logits=logits * 1.1, hidden_states=bad.hidden_states)
    assert compare(ref, worse, fp64, tolerance=1e-4).worst.path == "logits"


def test_training_style_paths_reach_the_failing_gradient():
    grads = {"layers.0.weight": TRUTH[:100].float(), "layers.0.bias": TRUTH[100:110].float()}
    ref = {"loss": torch.tensor(1.5), "grads": grads}
    res = {"loss": torch.tensor(1.5), "grads": {**grads, "layers.0.weight": grads["layers.0.weight"] * 2}}
    fp64 = {"loss": torch.tensor(1.5, dtype=torch.float64), "grads": {k: v.double() for k, v in grads.items()}}
    outcome = compare(ref, res, fp64, tolerance=1e-4)
    assert not outcome.passed and outcome.worst.path == "grads.layers.0.weight"


def test_namedtuples_and_dataclasses_use_field_names():
    Pair = namedtuple("Pair", "first second")

    @dataclass
    class Out:
        scores: torch.Tensor
        label: str

    ref = Pair(Out(torch.ones(3), "x"), torch.zeros(2))
    assert compare(ref, Pair(Out(torch.ones(3), "x"), torch.zeros(2)), None, tolerance=1e-4).passed
    outcome = compare(ref, Pair(Out(torch.ones(3), "y"), torch.zeros(2)), None, tolerance=1e-4)
    assert not outcome.passed and outcome.worst.path == "first.label" and outcome.method == "equal"
    outcome = compare(ref, Pair(Out(torch.ones(3) * 2, "x"), torch.zeros(2)), None, tolerance=1e-4)
    assert outcome.worst.path == "first.scores"


def test_integer_and_bool_tensors_must_be_equal():
    ids = torch.arange(10)
    assert compare(ids, ids.clone(), None, tolerance=1e-2).passed
    outcome = compare(ids, ids + (ids == 3), None, tolerance=1e-2)
    assert not outcome.passed and outcome.method == "equal" and "1 of 10" in outcome.worst.reason
    mask = ids > 4
    assert not compare(mask, ~mask, None, tolerance=1e-2).passed


def test_half_precision_tensors_compare():
    eager = TRUTH[:2000].half()
    assert compare(eager, eager.clone(), TRUTH[:2000], tolerance=1e-3).passed
    assert not compare(eager, eager * 1.1, TRUTH[:2000], tolerance=1e-3).passed


def test_python_scalars_and_none():
    assert compare({"n": 3, "s": "a", "x": None, "f": 0.5}, {"n": 3, "s": "a", "x": None, "f": 0.50001},
                   {"f": 0.5}, tolerance=1e-4).passed
    outcome = compare({"f": 0.5}, {"f": 0.6}, {"f": 0.5}, tolerance=1e-4)
    assert not outcome.passed and outcome.method == "rmse"
    assert not compare(None, torch.ones(1), None, tolerance=1e-4).passed


def test_unsupported_output_types_raise():
    with pytest.raises(UnsupportedOutput, match="set"):
        compare({"x": {1, 2}}, {"x": {1, 2}}, None, tolerance=1e-4)


def test_identical_is_bit_exact():
    a = TRUTH.float()
    assert identical({"a": with_nan(a, 1)}, {"a": with_nan(a, 1)}).passed
    nudged = a.clone()
    nudged[5] = torch.nextafter(nudged[5], torch.tensor(math.inf))
    outcome = identical(a, nudged)
    assert not outcome.passed and outcome.method == "exact" and outcome.worst.max_abs_error > 0


def test_details_are_json():
    outcome = compare(TRUTH.float(), with_nan(TRUTH.float(), 1), TRUTH, tolerance=1e-4)
    details = json.loads(json.dumps(outcome.details(), allow_nan=False))
    assert details["path"] == "<output>" and details["failed_leaves"] == 1


# --- tolerances as data ------------------------------------------------------------------

def ctx(suite: str = "torchbench", test: str = "eval", precision: str = "fp32", accelerator: str = "cpu",
        model: str = "m") -> Context:
    return Context(suite=suite, model=model, test=test, precision=precision, accelerator=accelerator,
                   dynamo="inductor", xla=None)


@pytest.mark.parametrize("context, expected", [
    (ctx(), 1e-4),
    (ctx(test="train"), 1e-4),
    (ctx(test="train", accelerator="cuda"), 1e-3),
    (ctx(precision="amp", accelerator="cuda"), 1e-3),
    (ctx(suite="huggingface"), 1e-3),
    (ctx(suite="huggingface", test="train"), 1e-2),
    (ctx(suite="timm", test="train"), 1e-2),
    (ctx(suite="unknown", precision="fp16"), 1e-3),
    (ctx(suite="unknown"), 1e-4),
])
def test_tolerance_per_suite_test_and_precision(context, expected):
    policy = policy_for(context)
    assert policy.tolerance == expected and not policy.cosine and policy.skip_reason is None


def test_command_line_tolerance_overrides_the_data():
    policy = policy_for(ctx(), override=0.5)
    assert policy.tolerance == 0.5 and policy.source == "--tolerance"


def test_extra_data_layers_models_skips_and_nondeterminism(tmp_path):
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps({"suites": {"torchbench": {
        "models": {"big": [{"when": {"test": "train"}, "tolerance": 8e-2, "cosine": True}]},
        "skip": [{"model": "huge", "when": {"accelerator": "cpu"}, "reason": "too slow on cpu"}],
        "nondeterministic": [{"model": "racy"}],
    }}}))
    data = load_data(str(extra))
    big = policy_for(ctx(model="big", test="train"), data=data)
    assert (big.tolerance, big.cosine, big.source) == (8e-2, True, "torchbench/big")
    assert policy_for(ctx(model="big"), data=data).tolerance == 1e-4
    assert policy_for(ctx(model="huge"), data=data).skip_reason == "too slow on cpu"
    assert policy_for(ctx(model="huge", accelerator="cuda"), data=data).skip_reason is None
    assert policy_for(ctx(model="racy"), data=data).nondeterministic


def test_unknown_condition_in_data_is_an_error(tmp_path):
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps({"default": [{"when": {"colour": "red"}, "tolerance": 1}]}))
    with pytest.raises(ValueError, match="colour"):
        load_data(str(extra))


# --- the procedure in process, on the dummy suite ----------------------------------------

def harness_for(test: str, dynamo: str | None, tmp_path: Path, **options) -> ExperimentHarness:
    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo=dynamo, test=test,
                              precision="fp32", batch_size=4)
    return ExperimentHarness(Experiment("dummy", "dummy_mlp", config), RunOptions(verify=True, **options),
                             DeviceRuntime(config), tmp_path)


@pytest.mark.parametrize("test", ["eval", "train"])
def test_eager_backend_passes(test, tmp_path):
    verification = verify_experiment(harness_for(test, "eager", tmp_path, verify_iterations=2))
    assert verification["code"] == "PASS", verification
    assert verification["tolerance"] == 1e-4 and verification["details"]["reference"] == "float64"
    assert verification["details"]["eager_deterministic"] is True
    if test == "train":
        assert verification["details"]["iterations"] == 2
        assert verification["details"]["leaves"] == 2 + 2 * 6  # loss, output, 6 grads, 6 params
    json.dumps(verification, allow_nan=False)


def test_train_failure_is_located_in_a_gradient_or_parameter(tmp_path):
    """A wrong backend in training is caught, and the worst path says where."""
    import verifier_plugin  # noqa: F401 - registers verifier_perturb

    verification = verify_experiment(harness_for("train", "verifier_perturb", tmp_path))
    assert verification["code"] == "FAIL" and verification["method"] in ("rmse", "allclose")
    assert verification["details"]["path"].split(".")[0] in ("loss", "output", "grads", "params")


def test_eager_raising_is_eager_failed(tmp_path, monkeypatch):
    harness = harness_for("eval", None, tmp_path)
    monkeypatch.setattr(harness, "make_step", lambda *a, **k: (_ for _ in ()).throw(ZeroDivisionError("boom")))
    verification = verify_experiment(harness)
    assert verification["code"] == "EAGER_FAILED"
    assert "ZeroDivisionError" in verification["details"]["error"]["traceback_tail"]


def test_xla_experiments_are_checked_against_native_eager(tmp_path):
    """Eager on the lazy XLA device is what is under test, so the reference runs natively."""
    plain = harness_for("eval", "inductor", tmp_path)
    assert reference_harness(plain) is plain
    config = ExperimentConfig(accelerator="tpu", xla="PJRT", xla_flags="--x", dynamo="openxla", test="train",
                              precision="bf16")
    xla = ExperimentHarness(Experiment("dummy", "dummy_mlp", config), RunOptions(verify=True),
                            DeviceRuntime(config), tmp_path)
    reference = reference_harness(xla)
    assert reference.config == ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo=None,
                                                test="train", precision="bf16")
    assert reference.device.torch_device == "cpu" and reference.experiment.model_name == "dummy_mlp"
