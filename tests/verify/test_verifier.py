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
from experiment_runner.child.driver import ExperimentDriver
from experiment_runner.core.matrix import Experiment, ExperimentConfig
from experiment_runner.core.options import RunOptions
from experiment_runner.core.record import VERIFY_STEPS
from verifier import (Context, UnsupportedOutput, compare, identical, policy_for,
                      verify_experiment)
from verifier.closeness import COSINE_MIN_ELEMENTS, COSINE_THRESHOLD, Comparison
from verifier.run import reference_subject
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
                   tolerance=1e-2)
    fp32 = compare(noisy(TRUTH, 0.05, 2), noisy(TRUTH, 0.125, 3), TRUTH, tolerance=1e-2)
    assert bf16.passed and bf16.worst.multiplier == 3.0
    assert not fp32.passed and fp32.worst.multiplier == 2.0


def test_small_tensors_and_raised_tolerances_get_the_larger_multiplier():
    small = TRUTH[:999]
    assert compare(noisy(small, 0.05, 2), noisy(small, 0.125, 3), small, tolerance=1e-2).worst.multiplier == 3.0
    assert compare(noisy(TRUTH, 0.05, 2), noisy(TRUTH, 0.125, 3), TRUTH, tolerance=2e-2).worst.multiplier == 3.0


def test_cosine_where_chosen():
    eager = TRUTH.float()
    close = compare(eager, eager + 1e-3 * torch.randn(4096, generator=gen(4)), TRUTH, tolerance=1e-6, cosine=True)
    assert close.passed and close.method == "cosine" and close.worst.cosine > COSINE_THRESHOLD
    far = compare(eager, torch.randn(4096, generator=gen(5)), TRUTH, tolerance=1e-6, cosine=True)
    assert not far.passed and far.method == "cosine" and "cosine similarity" in far.worst.reason


def test_without_a_float64_reference_eager_alone_judges():
    """PyTorch's harness sets cosine similarity when its float64 run fails; we judge by allclose
    against eager, which never passes what eager alone would fail (issue 52)."""
    eager = TRUTH.float()
    outcome = compare(eager, noisy(TRUTH, 1e-3, 3), None, tolerance=1e-4)
    assert not outcome.passed and outcome.method == "allclose"
    assert "there is no float64 reference" in outcome.worst.reason
    assert compare(eager, noisy(TRUTH, 1e-6, 3), None, tolerance=1e-4).passed


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


# --- the issue-12 reproducers and the rules that fix them --------------------------------

def test_a_tripled_loss_fails_though_the_float64_run_gave_float32():
    """The float64 run's loss is float32 when the loss is built with .float(): upcast, RMSE rule."""
    outcome = compare({"loss": torch.tensor(2.)}, {"loss": torch.tensor(6.)}, {"loss": torch.tensor(2.)},
                      tolerance=1e-3)
    assert not outcome.passed and outcome.method == "scalar" and outcome.failed_paths == ["loss"]
    assert outcome.worst.rmse_result == pytest.approx(4.0) and outcome.worst.rmse_eager == 0.0


def test_python_float_against_a_float64_tensor_uses_the_scalar_rule():
    outcome = compare(2.0, 6.0, torch.tensor(2., dtype=torch.float64), tolerance=1e-3)
    assert not outcome.passed and outcome.method == "scalar"
    assert compare(2.0, 2.0000001, torch.tensor(2., dtype=torch.float64), tolerance=1e-3).passed


def test_all_nan_reference_cannot_pass_a_result_that_differs_from_eager():
    a = torch.randn(100, generator=gen(7))
    nan64 = torch.full((100,), float("nan"), dtype=torch.float64)
    outcome = compare(a, -a, nan64, tolerance=1e-3)
    assert not outcome.passed and outcome.worst.unreferenced == 100
    assert "NaN/inf at all 100 positions" in outcome.worst.reason
    assert compare(a, a.clone(), nan64, tolerance=1e-3).passed


@pytest.mark.parametrize("size", [33, 1000])
@pytest.mark.parametrize("reference", ["none", "all NaN", "all inf"])
def test_a_result_ten_percent_off_fails_where_the_reference_cannot_speak(size, reference):
    """Issue 52's first reproduction: cosine similarity 0.996 used to pass it at tolerance 1e-4."""
    eager = torch.randn(size, generator=gen(size))
    result = eager * (1 + 0.1 * torch.randn(size, generator=gen(size + 1)))
    fp64 = {"none": None, "all NaN": torch.full((size,), math.nan, dtype=torch.float64),
            "all inf": torch.full((size,), math.inf, dtype=torch.float64)}[reference]
    outcome = compare(eager, result, fp64, tolerance=1e-4)
    assert not outcome.passed and outcome.method == "allclose"
    assert "judged against eager alone" in outcome.worst.reason
    assert outcome.worst.cosine > COSINE_THRESHOLD  # what used to decide


def test_a_reference_that_cannot_speak_gives_eager_alones_verdict_with_the_dtypes_rounding():
    """A non-finite reference is judged as none, and none means eager alone: allclose widened by
    two units in the last place of the leaf's dtype. Two bf16 runs that round the same values
    differently, one step apart, failed allclose at tolerance 1e-3 (issue 70); a result a few
    roundings further off still fails, with no cosine rescue."""
    g = torch.randn(64, 64, generator=gen(11), dtype=torch.float64)
    eager = g.bfloat16()
    result = (g * (1 + 1e-3 * torch.randn(g.shape, generator=gen(12), dtype=torch.float64))).bfloat16()
    wrong = (g * 1.03).bfloat16()  # 3% off: four to eight bf16 steps
    inf64 = torch.full_like(g, float("inf"))
    assert not torch.allclose(eager.double(), result.double(), atol=1e-3, rtol=1e-3)  # what used to decide
    for reference in (None, inf64):
        outcome = compare(eager, result, reference, tolerance=1e-3)
        assert outcome.passed and "two units in the last place of bfloat16" in outcome.notes[""]
        failed = compare(eager, wrong, reference, tolerance=1e-3)
        assert not failed.passed and "judged against eager alone" in failed.worst.reason
    half = g.half()  # the band knows the dtype: fp16's steps are eight times finer than bf16's
    assert not compare(half, (g * 1.005).half(), None, tolerance=1e-3).passed
    assert compare(eager, result, g, tolerance=1e-3).passed  # the reference speaks: the RMSE rule


def test_a_low_precision_loss_without_a_reference_gets_the_rounding_band():
    """One bf16 step from eager passes against eager alone at tolerance 1e-4; three steps fail."""
    eager = torch.tensor(1.890625, dtype=torch.bfloat16)
    steps = [eager]
    for _ in range(3):
        steps.append(torch.nextafter(steps[-1], torch.tensor(3.0, dtype=torch.bfloat16)))
    assert compare(eager, steps[1], None, tolerance=1e-4).passed
    assert not compare(eager, steps[3], None, tolerance=1e-4).passed


def test_where_the_reference_is_not_finite_those_positions_are_judged_against_eager():
    eager, result = noisy(TRUTH, 1e-3, 2), noisy(TRUTH, 1e-3, 3)
    reference = TRUTH.clone()
    reference[:10] = float("nan")
    reference[10:20] = float("inf")
    result[:20] = eager[:20]  # agrees with eager where there is no truth: the RMSE decides the rest
    outcome = compare(eager, result, reference, tolerance=1e-4)
    assert outcome.passed and outcome.method == "rmse" and outcome.worst.unreferenced == 20
    result[15] = eager[15] * (1 + 5e-5)  # within the tolerance of eager there
    assert compare(eager, result, reference, tolerance=1e-4).passed
    result[15] = eager[15] + 1.0  # cosine 0.9999 used to pass this; eager alone fails it
    outcome = compare(eager, result, reference, tolerance=1e-4)
    assert not outcome.passed and "1 differ beyond allclose" in outcome.worst.reason
    small, small_ref = eager[:8].clone(), reference[8:16].clone()  # 2 NaN, 6 finite
    assert not compare(small, small * 1.01, small_ref, tolerance=1e-4).passed  # allclose alone, as without


# --- issue 52: a scalar loss judged by the tolerance as a relative error budget -----------------

def test_a_loss_six_percent_off_fails_though_allclose_passes():
    """Issue 40's second reproduction: eager 0.2% from float64, the compiled loss 6%."""
    outcome = compare({"loss": torch.tensor(1.890625)}, {"loss": torch.tensor(2.0087166)},
                      {"loss": torch.tensor(1.89488006, dtype=torch.float64)}, tolerance=4e-2)
    assert not outcome.passed and outcome.method == "scalar" and outcome.failed_paths == ["loss"]
    worst = outcome.worst
    assert worst.floor == pytest.approx(4e-2 * 1.89488006) == worst.threshold
    assert worst.rmse_result == pytest.approx(0.11384, rel=1e-3) and "6.01% of it" in worst.reason


def test_a_noisy_eager_loss_does_not_widen_the_budget_for_a_wrong_one():
    """Issue 52's second reproduction: bf16 eager 1.5% off float64, the compiled loss 5.6% off,
    tolerance 4e-2: the old allowance (3 x eager's error + a floor) was 0.107 against 0.098."""
    fp64 = torch.tensor(1.7453347, dtype=torch.float64)
    outcome = compare(torch.tensor(1.71875, dtype=torch.bfloat16), torch.tensor(1.6477488, dtype=torch.bfloat16),
                      fp64, tolerance=4e-2)
    assert not outcome.passed and outcome.method == "scalar"
    assert outcome.worst.threshold == pytest.approx(4e-2 * 1.7453347)
    # The same two losses the other way round: the compiled one is the closer to float64.
    assert compare(torch.tensor(1.6477488), torch.tensor(1.71875), fp64, tolerance=4e-2).passed


def test_a_loss_this_precision_cannot_hold_to_the_tolerance_earns_eagers_excess():
    """A mean of outputs near zero: eager's own loss is off by four budgets, so a compiled one
    off by as much passes, and one off by ten times as much fails."""
    fp64 = torch.tensor(0.001, dtype=torch.float64)
    budget = 4e-2 * 0.001
    eager = torch.tensor(0.001 + 4 * budget)
    assert compare(eager, torch.tensor(0.001 - 4 * budget), fp64, tolerance=4e-2).passed
    outcome = compare(eager, torch.tensor(0.001 + 40 * budget), fp64, tolerance=4e-2)
    assert not outcome.passed and outcome.worst.threshold == pytest.approx(budget + 3 * 3 * budget)


def test_a_loss_as_close_as_eager_passes_and_exact_eager_does_not_flap():
    fp64 = torch.tensor(1.89488006, dtype=torch.float64)
    close = compare(torch.tensor(1.890625), torch.tensor(1.8987), fp64, tolerance=4e-2)
    assert close.passed and close.method == "scalar"
    exact = fp64.float()  # eager equal to float64 after rounding: the budget, not 0, decides
    ulp = torch.nextafter(exact, torch.tensor(3.0))
    assert compare(exact, ulp, fp64, tolerance=1e-4).passed
    bf16 = torch.tensor(1.890625, dtype=torch.bfloat16)  # a bf16 loss one unit in the last place off
    one_step = torch.nextafter(bf16, torch.tensor(3.0, dtype=torch.bfloat16))
    assert compare(bf16, one_step, torch.tensor(1.890625, dtype=torch.float64), tolerance=1e-4).passed
    assert compare(2.0, 2.0 + 1e-9, 2.0, tolerance=1e-4).passed  # a Python float loss
    assert compare(2.0, 2.05, 2.0, tolerance=4e-2).passed  # 2.5% off, within the 4% budget
    assert not compare(2.0, 2.1, 2.0, tolerance=4e-2).passed


def test_a_bf16_loss_floor_is_one_and_a_half_steps_not_two_eps():
    """Issue 70: the floor was 2 eps x |fp64|, 1.56% of a bf16 loss (up to four steps), looser
    than any tolerance in use. It is now three times eager's rounding (half a step): two steps
    from float64 fail at tolerance 1e-4, one passes."""
    fp64 = torch.tensor(1.890625, dtype=torch.float64)
    eager = fp64.bfloat16()
    up = torch.tensor(3.0, dtype=torch.bfloat16)
    one = torch.nextafter(eager, up)
    two = torch.nextafter(one, up)
    assert compare(eager, one, fp64, tolerance=1e-4).passed
    outcome = compare(eager, two, fp64, tolerance=1e-4)
    assert not outcome.passed and outcome.method == "scalar"
    assert outcome.worst.floor == pytest.approx(1.5 * 2**-7)


def test_a_loss_without_a_reference_is_judged_against_eager_alone():
    assert compare(torch.tensor(1.890625), torch.tensor(1.95), None, tolerance=4e-2).passed
    assert not compare(torch.tensor(1.890625), torch.tensor(2.2), None, tolerance=4e-2).passed
    nan64 = torch.tensor(float("nan"), dtype=torch.float64)
    outcome = compare({"loss": torch.tensor(1.890625)}, {"loss": torch.tensor(1.95)}, {"loss": nan64},
                      tolerance=4e-2)
    assert outcome.passed and "judged by allclose against eager alone" in outcome.notes["loss"]


# --- issue 70: a reference of another shape, or one that does not track eager, cannot speak ----

@pytest.mark.parametrize("wrong", [torch.zeros_like, torch.neg, lambda e: 1.5 * e])
def test_a_reference_of_another_shape_is_never_reshaped(wrong):
    """Issue 70's first reproducer: eager's values transposed hold as many elements, and reshaped
    they scrambled the reference until the RMSE rule passed anything."""
    e = torch.randn(8, 2, generator=gen(70))
    g = e.double().T.contiguous()
    outcome = compare(e, wrong(e), g, tolerance=1e-3)
    assert not outcome.passed and outcome.method == "allclose"
    assert "it holds shape (2, 8) where the outputs hold (8, 2)" in outcome.worst.reason
    assert compare(e, e * (1 + 1e-4), g, tolerance=1e-3).passed


def test_a_reference_that_does_not_track_eager_does_not_widen_the_rmse_threshold():
    """Issue 70's second reproducer: eager is 0.8 off an unrelated float64 run in allclose's
    units, 785 tolerances, and that error passed zeros as this precision's noise."""
    e = torch.randn(1000, generator=gen(71))
    g = torch.randn(1000, generator=gen(72), dtype=torch.float64)
    outcome = compare(e, torch.zeros_like(e), g, tolerance=1e-3)
    assert not outcome.passed and outcome.method == "allclose"
    assert "the float64 reference does not track eager" in outcome.details()["reason"]
    assert compare(e, e * (1 + 1e-4), g, tolerance=1e-3).passed
    # A float64 run that took another branch vouches for nothing, not even a result that took it too.
    assert not compare(e, -e, -e.double(), tolerance=1e-3).passed
    # One value of another branch in a small leaf: its RMS stays under ten tolerances at 4e-2, but
    # that position is judged against eager alone, so it cannot inflate the RMSE for the rest.
    small = TRUTH[:7].float()
    branch = TRUTH[:7].clone()
    branch[0] += 20.0
    astray = compare(small, -small, branch, tolerance=4e-2)
    assert not astray.passed and astray.method == "rmse" and astray.worst.unreferenced == 1
    assert "does not track eager at 1 positions" in astray.notes[""]
    assert compare(small, small * (1 + 1e-3), branch, tolerance=4e-2).passed
    # A reference that tracks eager to within ten tolerances still lets the RMSE rule speak.
    tracking = TRUTH[:1000]
    eager, result = noisy(tracking, 5e-3, 2), noisy(tracking, 5e-3, 3)
    assert compare(eager, result, tracking, tolerance=1e-3).method == "rmse"


def test_a_model_computed_in_bf16_tracks_its_reference_at_bf16s_rounding_not_its_outputs_dtype():
    """The README's llama in eval (bf16) returns float32 logits 0.3% off float64 in allclose's
    units: bf16's rounding, not another branch. Judged by its float32 eps alone the reference
    would not track, and eager alone at 1e-4 failed a correct compile; at bf16's eps it tracks
    and the RMSE rule speaks. An unrelated reference still vouches for nothing."""
    truth = TRUTH[:1000]
    eager, result = noisy(truth, 4e-3, 4), noisy(truth, 3e-3, 5)
    assert not compare(eager, result, truth, tolerance=1e-4).passed
    computed = compare(eager, result, truth, tolerance=1e-4, computed_in=torch.bfloat16)
    assert computed.passed and computed.method == "rmse"
    assert not compare(eager, eager * 1.5, truth, tolerance=1e-4, computed_in=torch.bfloat16).passed
    unrelated = torch.randn(1000, generator=gen(73), dtype=torch.float64)
    refused = compare(eager, torch.zeros_like(eager), unrelated, tolerance=1e-4, computed_in=torch.bfloat16)
    assert not refused.passed and "does not track eager" in refused.details()["reason"]


def test_a_loss_whose_reference_does_not_track_eager_is_judged_against_eager():
    """The scalar rule let the result be three times eager's excess off: a float64 loss of 5
    against eager's 1 passed a loss of 0. Against eager alone it fails, and a note says why a
    loss within the tolerance of eager passes."""
    fp64 = {"loss": torch.tensor(5.0, dtype=torch.float64)}
    outcome = compare({"loss": torch.tensor(1.0)}, {"loss": torch.tensor(0.0)}, fp64, tolerance=1e-3)
    assert not outcome.passed and "does not track eager" in outcome.worst.reason
    close = compare({"loss": torch.tensor(1.0)}, {"loss": torch.tensor(1.0005)}, fp64, tolerance=1e-3)
    assert close.passed and "does not track eager" in close.notes["loss"]


# --- issue 52: a reference of another structure speaks where it can ------------------------------

@pytest.mark.parametrize("reference, where", [
    (lambda g: g, "a: it holds a Tensor without 'a'"),
    (lambda g: {"b": g}, "a: it holds a dict without 'a'"),
    (lambda g: {"a": [g]}, "a: it holds a list"),
    (lambda g: {"a": g[:10]}, "a: it holds 640 values where the outputs hold 4096"),
    (lambda g: {"a": g.long()}, "a: it holds torch.int64 values"),
])
def test_a_reference_of_another_structure_falls_back_to_eager_for_that_leaf(reference, where):
    """Issue 40's third reproduction (a 1% scale error that cosine similarity would pass), now a
    verdict: the leaf the reference lacks is judged against eager alone."""
    g = torch.randn(64, 64, generator=gen(5), dtype=torch.float64)
    eager = g.float()
    outcome = compare({"a": eager}, {"a": eager * 1.01}, reference(g), tolerance=1e-3)
    assert not outcome.passed and outcome.method == "allclose" and f"counterpart at {where}" in outcome.worst.reason
    assert compare({"a": eager}, {"a": eager * (1 + 1e-4)}, reference(g), tolerance=1e-3).passed
    two = compare([eager, eager], [eager * 1.01, eager], [g], tolerance=1e-3)
    assert two.failed_paths == ["0"] and two.worst.method == "rmse"  # the reference speaks for leaf 0
    assert not compare([eager, eager], [eager, eager * 1.01], [g], tolerance=1e-3).passed


def test_a_reference_of_another_structure_still_gives_a_verdict(tmp_path, monkeypatch):
    """Where the comparison needs the reference (a 1% error allclose fails): an unused reference
    is never built, so its structure cannot matter."""
    import verifier_plugin  # noqa: F401 - registers verifier_perturb
    from verifier import run as verifier_run

    real = verifier_run.run_once

    def wrapped_reference(harness, precision, compiled):
        out = real(harness, precision, compiled)
        return {"wrapped": out} if precision == "fp64" else out

    monkeypatch.setattr(verifier_run, "run_once", wrapped_reference)
    verification = verify_experiment(harness_for("eval", "verifier_perturb", tmp_path))
    assert verification["code"] == "FAIL", verification
    assert "counterpart at <output>: it holds a dict" in verification["details"]["reason"]


@pytest.mark.parametrize("size", [1, 5, 15])
def test_cosine_never_decides_a_small_leaf(size):
    eager = torch.arange(1.0, size + 1)
    tripled = eager * 3  # same direction: cosine similarity 1
    no_reference = compare(eager, tripled, None, tolerance=1e-3, cosine=True)
    assert not no_reference.passed and no_reference.method == "allclose"
    assert "judged against eager alone" in no_reference.worst.reason
    chosen = compare(eager, tripled, eager.double(), tolerance=1e-3, cosine=True)
    assert not chosen.passed and chosen.method == ("scalar" if size == 1 else "rmse")


def test_cosine_still_decides_from_sixteen_elements():
    eager = torch.arange(1.0, COSINE_MIN_ELEMENTS + 1)
    outcome = compare(eager, eager * 1.001, None, tolerance=1e-5, cosine=True)
    assert outcome.passed and outcome.method == "cosine"
    assert not compare(eager, eager * 1.001, None, tolerance=1e-5).passed  # not chosen: eager alone


def test_larger_multiplier_for_small_tensors_when_the_data_asks():
    tiny, mid = TRUTH[:10], TRUTH[:400]
    assert compare(noisy(tiny, 0.01, 2), noisy(tiny, 0.05, 3), tiny, tolerance=1e-2,
                   larger_small_multiplier=True).worst.multiplier == 10.0
    assert compare(noisy(mid, 0.01, 2), noisy(mid, 0.05, 3), mid, tolerance=1e-2,
                   larger_small_multiplier=True).worst.multiplier == 8.0
    assert compare(noisy(mid, 0.01, 2), noisy(mid, 0.05, 3), mid, tolerance=1e-2).worst.multiplier == 3.0


def test_integers_under_cosine_and_large_integers_must_be_equal():
    ids = torch.arange(2**40, 2**40 + 100)
    outcome = compare(ids, ids + (ids == 2**40 + 3), ids, tolerance=1e-2, cosine=True)
    assert not outcome.passed and outcome.method == "equal"
    assert not compare(2**53, 2**53 + 1, None, tolerance=1e-2).passed


def test_failed_paths_and_notes_reach_the_details():
    ref = {"loss": torch.tensor(1.0), "grads": {"w": TRUTH[:64].float(), "b": TRUTH[64:80].float()},
           "sparse": TRUTH[:16].float().reshape(4, 4).to_sparse()}
    res = {"loss": torch.tensor(1.5), "grads": {"w": -TRUTH[:64].float(), "b": TRUTH[64:80].float()},
           "sparse": ref["sparse"].clone()}
    details = compare(ref, res, None, tolerance=1e-4).details()
    assert set(details["failed_paths"]) == {"loss", "grads.w"} and details["failed_leaves"] == 2
    assert details["notes"] == {"sparse": "sparse_coo tensor densified"}
    json.dumps(details, allow_nan=False)


# --- every tensor kind gets a verdict ------------------------------------------------------

@pytest.mark.parametrize("convert", [torch.Tensor.to_sparse, torch.Tensor.to_sparse_csr,
                                     lambda t: t.to_sparse_csc(), lambda t: t.to_sparse_bsr((2, 2))],
                         ids=["coo", "csr", "csc", "bsr"])
def test_sparse_tensors_are_densified(convert):
    dense = TRUTH[:64].float().reshape(8, 8)
    ok = compare(convert(dense), convert(dense.clone()), dense.double(), tolerance=1e-4)
    assert ok.passed and "densified" in ok.notes[""]
    bad = compare(convert(dense), convert(dense * 2), dense.double(), tolerance=1e-4)
    assert not bad.passed and bad.method == "rmse"


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_float8_is_upcast(dtype):
    eager = TRUTH[:64].to(dtype)
    ok = compare(eager, eager.clone(), TRUTH[:64], tolerance=1e-4)
    assert ok.passed and ok.notes[""] == f"{str(dtype).removeprefix('torch.')} upcast to float32"
    assert not compare(eager, (TRUTH[:64] * 4).to(dtype), TRUTH[:64], tolerance=1e-4).passed


def test_packed_float4_is_compared_bit_for_bit():
    raw = torch.arange(8, dtype=torch.uint8)
    packed = raw.view(torch.float4_e2m1fn_x2)
    assert compare(packed, raw.clone().view(torch.float4_e2m1fn_x2), None, tolerance=1e-4).passed
    outcome = compare(packed, (raw + 1).view(torch.float4_e2m1fn_x2), None, tolerance=1e-4)
    assert not outcome.passed and "bit for bit" in outcome.notes[""]


def test_quantized_tensors_are_dequantized():
    q = torch.quantize_per_tensor(TRUTH[:32].float(), 0.1, 0, torch.qint8)
    ok = compare(q, q.clone(), None, tolerance=1e-4)
    assert ok.passed and ok.notes[""] == "qint8 tensor dequantized"


def test_meta_and_fake_tensors_compare_shape_and_dtype_only():
    from torch._subclasses.fake_tensor import FakeTensorMode

    meta = torch.empty(3, 4, device="meta")
    outcome = compare({"x": meta}, {"x": torch.empty(3, 4, device="meta")}, None, tolerance=1e-4)
    assert outcome.passed and outcome.method == "metadata" and "no values" in outcome.notes["x"]
    assert "shape mismatch" in compare(meta, torch.empty(4, 3, device="meta"), None, tolerance=1e-4).worst.reason
    mixed = compare(meta, torch.zeros(3, 4), None, tolerance=1e-4)
    assert not mixed.passed and "meta/fake" in mixed.worst.reason
    with FakeTensorMode():
        fake = torch.empty(2)
    assert compare(fake, fake, None, tolerance=1e-4).method == "metadata"


def test_nested_tensors_are_judged_component_by_component():
    parts = [TRUTH[:20].float(), TRUTH[20:50].float()]
    nested = torch.nested.nested_tensor(parts, layout=torch.jagged)
    fp64 = torch.nested.nested_tensor([p.double() for p in parts], layout=torch.jagged)
    assert compare(nested, torch.nested.nested_tensor(parts, layout=torch.jagged), fp64, tolerance=1e-4).passed
    bad = torch.nested.nested_tensor([parts[0], parts[1] * 2], layout=torch.jagged)
    outcome = compare({"h": nested}, {"h": bad}, {"h": fp64}, tolerance=1e-4)
    assert not outcome.passed and outcome.failed_paths == ["h.1"] and outcome.method == "rmse"
    assert "nested tensor" in outcome.notes["h.1"]


def test_numpy_object_and_string_arrays():
    import numpy as np

    objects = np.array([1, "a", 2.5], dtype=object)
    assert compare(objects, objects.copy(), None, tolerance=1e-4).passed
    outcome = compare(objects, np.array([1, "b", 2.5], dtype=object), None, tolerance=1e-4)
    assert not outcome.passed and outcome.failed_paths == ["1"] and "numpy object array" in outcome.notes["1"]
    words = np.array(["x", "y"])
    assert compare(words, words.copy(), None, tolerance=1e-4).passed
    assert not compare(words, np.array(["x", "z"]), None, tolerance=1e-4).passed


def test_zero_dim_and_empty_tensors():
    assert compare(torch.zeros(0, 3), torch.zeros(0, 3), None, tolerance=1e-4).passed
    assert compare(torch.tensor(1.0), torch.tensor(1.00001), torch.tensor(1.0, dtype=torch.float64),
                   tolerance=1e-4).passed
    assert compare(1 + 2j, 1 + 2j, None, tolerance=1e-4).passed
    assert not compare(1 + 2j, 1 - 2j, None, tolerance=1e-4).passed


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
    assert not outcome.passed and outcome.method == "scalar"
    assert not compare(None, torch.ones(1), None, tolerance=1e-4).passed


class Opaque:
    """An output class the comparison cannot walk."""


def test_unsupported_output_types_raise():
    with pytest.raises(UnsupportedOutput, match="Opaque"):
        compare({"x": Opaque()}, {"x": Opaque()}, None, tolerance=1e-4)


def test_sets_compare_as_sets():
    assert compare({"ids": {3, 1, 2}}, {"ids": {1, 2, 3}}, None, tolerance=1e-4).passed
    outcome = compare({"ids": {"a", "b"}}, {"ids": {"a", "c"}}, None, tolerance=1e-4)
    assert not outcome.passed and "1 elements only in eager [\"'b'\"], 1 only in the result [\"'c'\"]" in outcome.worst.reason
    assert not compare({1, 2}, {1, 5}, None, tolerance=1e-4).passed
    assert compare({0.5, 1.5}, {1.5000001, 0.5}, {0.5, 1.5}, tolerance=1e-4).passed
    assert not compare({0.5, 1.5}, {1.6, 0.5}, {0.5, 1.5}, tolerance=1e-4).passed


def test_dense_eager_against_an_equal_sparse_result_compares_values():
    dense = TRUTH[:256].float().reshape(16, 16) * (TRUTH[:256].reshape(16, 16) > 0)
    for sparse in (dense.to_sparse(), dense.to_sparse_csr()):
        outcome = compare(dense, sparse, None, tolerance=1e-4)
        assert outcome.passed and "compared as dense values" in outcome.notes[""]
        assert not compare(dense, (dense * 1.1).to_sparse(), None, tolerance=1e-4).passed


def test_identical_is_bit_exact():
    a = TRUTH.float()
    assert identical({"a": with_nan(a, 1)}, {"a": with_nan(a, 1)}).passed
    nudged = a.clone()
    nudged[5] = torch.nextafter(nudged[5], torch.tensor(math.inf))
    outcome = identical(a, nudged)
    assert not outcome.passed and outcome.method == "exact" and outcome.worst.max_abs_error > 0


@pytest.mark.parametrize("case", ["equal", "signed zeros", "NaN at the same places", "one ulp apart"])
def test_identical_judges_equal_values_as_the_whole_walk_does(case, monkeypatch):
    """The determinism check's shortcut for bit-equal tensors gives the very Comparison the
    element-wise walk gives, whatever the values (the walk is forced by hiding torch.equal's
    answer from the shortcut)."""
    a = TRUTH.float().reshape(8, -1)
    b = a.clone()
    if case == "signed zeros":
        a[0, :4], b[0, :4] = 0.0, -0.0
    elif case == "NaN at the same places":
        a, b = with_nan(a, 3), with_nan(b, 3)
    elif case == "one ulp apart":
        b[1, 2] = torch.nextafter(b[1, 2], torch.tensor(math.inf))

    def judged() -> Comparison:
        return identical({"x": a.clone(), "y": [a]}, {"x": a.clone(), "y": [b]})

    quick = judged()
    monkeypatch.setattr(torch, "equal", lambda x, y: False if x.is_floating_point() else bool((x == y).all()))
    assert quick == judged()
    assert quick.passed == (case != "one ulp apart")


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


@pytest.mark.parametrize("context, expected, source, note", [
    (ctx(model="doctr_reco_predictor", precision="fp16"), 1e-2, "torchbench/doctr_reco_predictor",
     "tolerance.higher_fp16"),
    (ctx(model="drq", precision="bf16"), 1e-2, "torchbench/drq", "tolerance.higher_bf16"),
    (ctx(model="phlippe_resnet", precision="bf16"), 1e-4, "torchbench", None),
    (ctx(model="yolov3", test="train", accelerator="cuda"), 8e-2, "torchbench/yolov3", "tolerance.even_higher"),
    (ctx(model="yolov3", test="train", accelerator="cuda", precision="amp"), 8e-2, "torchbench/yolov3",
     "tolerance.even_higher in the fp16/amp branch"),
    (ctx(model="yolov3", accelerator="cuda", precision="amp"), 1e-3, "torchbench", "fp16/amp"),
    (ctx(model="yolov3", test="train"), 1e-4, "torchbench", None),
    (ctx(suite="huggingface", model="GPT2ForSequenceClassification"), 5e-3,
     "huggingface/GPT2ForSequenceClassification", "tolerance.higher_inference_cpu"),
    (ctx(suite="huggingface", model="GPT2ForSequenceClassification", accelerator="cuda"), 4e-3,
     "huggingface/GPT2ForSequenceClassification", "tolerance.higher_inference"),
    (ctx(suite="huggingface", model="BertForMaskedLM", test="train"), 2e-2, "huggingface/BertForMaskedLM",
     "tolerance.higher_training"),
    (ctx(suite="timm", model="beit_base_patch16_224", test="train"), 0.16, "timm/beit_base_patch16_224",
     "tolerance.highest_training"),
    (ctx(suite="timm", model="inception_v3", test="train"), 4e-2, "timm/inception_v3", "tolerance.higher_training"),
    (ctx(suite="timm", model="inception_v3"), 1e-3, "timm", None),
])
def test_per_model_rules_from_pytorchs_harness(context, expected, source, note):
    policy = policy_for(context)
    assert (policy.tolerance, policy.source) == (expected, source)
    assert policy.rule["from"] == source and policy.rule.get("note", "").startswith(note or "")
    assert policy.describe()["tolerance_rule"] == policy.rule


def test_per_model_lists_from_pytorchs_harness():
    assert "large_models" in policy_for(ctx(model="maml")).skip_reason
    assert policy_for(ctx(model="pytorch_unet", test="train")).skip_reason is not None
    assert policy_for(ctx(model="pytorch_unet")).skip_reason is None
    assert "98355" in policy_for(ctx(model="mobilenet_v3_large")).describe()["nondeterministic"]
    assert policy_for(ctx(model="yolov3")).larger_multiplier_reason is not None
    assert policy_for(ctx(suite="timm", model="vit_base_patch14_dinov2.lvd142m")).larger_multiplier_reason
    assert policy_for(ctx(model="resnet50")).describe() == {
        "tolerance_source": "torchbench", "tolerance_rule": {"from": "torchbench", "tolerance": 1e-4},
        "cosine_chosen": False}


def test_every_suite_cites_where_its_facts_come_from():
    data = load_data("")
    for name in ("torchbench", "huggingface", "timm"):
        assert "benchmarks/dynamo" in data["suites"][name]["source"]


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
    assert policy_for(ctx(model="big", test="train"), override=0.3, data=data).rule["from"] == "torchbench/big"
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

def harness_for(test: str, dynamo: str | None, tmp_path: Path, **options) -> ExperimentDriver:
    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo=dynamo, test=test,
                              precision="fp32", batch_size=4)
    return ExperimentDriver(Experiment("dummy", "dummy", config), RunOptions(verify=True, **options),
                             DeviceRuntime(config), tmp_path)


@pytest.mark.parametrize("test", ["eval", "train"])
def test_eager_backend_passes(test, tmp_path):
    verification = verify_experiment(harness_for(test, "eager", tmp_path, verify_iterations=2))
    assert verification["code"] == "PASS", verification
    # eval's output passes allclose without the reference; train's loss needs it (the scalar rule)
    reference = "float64" if test == "train" else None
    assert verification["tolerance"] == 1e-4 and verification["details"]["reference"] == reference
    assert verification["details"]["eager_deterministic"] is True
    if test == "train":
        assert verification["details"]["iterations"] == 2
        assert verification["details"]["leaves"] == 2 + 2 * 6  # loss, output, 6 grads, 6 params
    json.dumps(verification, allow_nan=False)


def test_train_failure_is_located_in_a_gradient_or_parameter(tmp_path):
    """A wrong backend in training is caught, and the worst path says where."""
    import verifier_plugin  # noqa: F401 - registers verifier_perturb

    verification = verify_experiment(harness_for("train", "verifier_perturb", tmp_path))
    assert verification["code"] == "FAIL" and verification["method"] in ("rmse", "allclose", "scalar")
    assert verification["details"]["path"].split(".")[0] in ("loss", "output", "grads", "params")


@pytest.mark.parametrize("backend, code", [("eager", "PASS"), ("verifier_loss_x1_5", "FAIL")])
def test_training_verification_does_not_assume_a_summed_loss(backend, code, tmp_path, monkeypatch):
    """With a mean loss (PyTorch's reduce_to_scalar_loss) a scaled loss still fails, by its path."""
    import verifier_plugin  # noqa: F401 - registers verifier_loss_x1_5

    load = ExperimentDriver.load

    def mean_loss(self, precision=None):
        model = load(self, precision)
        model.loss = lambda output: output.mean()
        return model

    monkeypatch.setattr(ExperimentDriver, "load", mean_loss)
    verification = verify_experiment(harness_for("train", backend, tmp_path))
    assert verification["code"] == code, verification
    assert ("loss" in verification["details"]["failed_paths"]) == (code == "FAIL")


def test_eager_raising_is_eager_failed(tmp_path, monkeypatch):
    harness = harness_for("eval", None, tmp_path)
    monkeypatch.setattr(harness, "make_step", lambda *a, **k: (_ for _ in ()).throw(ZeroDivisionError("boom")))
    verification = verify_experiment(harness)
    assert verification["code"] == "EAGER_FAILED"
    assert "ZeroDivisionError" in verification["details"]["error"]["traceback_tail"]


def test_each_step_of_the_verification_is_timed(tmp_path, monkeypatch):
    """The steps that ran have their seconds (core/record.py VERIFY_STEPS); a step that broke
    keeps the time it took, and the steps after it are absent."""
    timings: dict[str, float] = {}
    assert verify_experiment(harness_for("train", "eager", tmp_path), timings)["code"] == "PASS"
    assert set(timings) == set(VERIFY_STEPS) and all(seconds > 0 for seconds in timings.values())

    harness, broken = harness_for("eval", None, tmp_path), {}
    monkeypatch.setattr(harness, "make_step", lambda *a, **k: (_ for _ in ()).throw(ZeroDivisionError("boom")))
    assert verify_experiment(harness, broken)["code"] == "EAGER_FAILED"
    assert set(broken) == {"verify_eager_s"}


def test_xla_experiments_are_checked_against_native_eager(tmp_path):
    """Eager on the lazy XLA device is what is under test, so the reference runs natively."""
    plain = harness_for("eval", "inductor", tmp_path)
    assert reference_subject(plain) is plain
    config = ExperimentConfig(accelerator="tpu", xla="PJRT", xla_flags="--x", dynamo="openxla", test="train",
                              precision="bf16")
    xla = ExperimentDriver(Experiment("dummy", "dummy", config), RunOptions(verify=True),
                            DeviceRuntime(config), tmp_path)
    reference = reference_subject(xla)
    assert reference.config == ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo=None,
                                                test="train", precision="bf16")
    assert reference.device.torch_device == "cpu" and reference.experiment.model_name == "dummy"
