"""The float64 reference only where a verdict needs it (issue 41): `compare` given DEFERRED
judges without it and raises ReferenceNeeded at the first leaf whose rule reads it (the scalar
rule, the RMSE rule); a comparison that returns is the one the reference would have given. The
procedure builds the reference only then, and the record says which."""

from __future__ import annotations

import logging
import random

import torch

from conftest import dummy_driver
from verifier import DEFERRED, ReferenceNeeded, compare, verify_experiment
from verifier import run as verifier_run

import verifier_agreement

TRUTH = torch.randn(4096, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def needed_at(ref, res, **rules) -> dict[str, str] | None:
    """Where DEFERRED stops the comparison, or None when it reached a verdict without the reference."""
    try:
        compare(ref, res, DEFERRED, **rules)
    except ReferenceNeeded as need:
        return need.where()
    return None


# --- which leaves need it ------------------------------------------------------------------

def test_leaves_allclose_and_equality_decide_need_no_reference():
    eager = TRUTH.float()
    outputs = {"logits": eager, "ids": torch.arange(5), "shape": (2, 3), "flag": None}
    nearly = {**outputs, "logits": eager * (1 + 5e-5)}
    assert needed_at(outputs, nearly, tolerance=1e-4) is None
    outcome = compare(outputs, nearly, DEFERRED, tolerance=1e-4)
    assert outcome.passed and outcome.method == "allclose"


def test_failures_that_need_no_reference_are_reached_without_it():
    eager = TRUTH.float()
    nan = eager.clone()
    nan[3] = float("nan")
    for result in (nan, eager.reshape(64, 64), eager.double()):
        assert needed_at(eager, result, tolerance=1e-4) is None
        assert not compare(eager, result, DEFERRED, tolerance=1e-4).passed
    assert needed_at(torch.arange(5), torch.arange(5) + 1, tolerance=1e-4) is None


def test_a_one_element_leaf_that_allclose_passes_needs_it_for_the_scalar_rule():
    outputs = {"logits": TRUTH.float(), "loss": torch.tensor(1.890625)}
    six_percent = {**outputs, "loss": torch.tensor(2.0087166)}  # allclose at 4e-2 passes it; the scalar rule does not
    assert needed_at(outputs, six_percent, tolerance=4e-2) == {"path": "loss", "rule": "scalar"}
    assert needed_at(2.0, 2.05, tolerance=4e-2) == {"path": "<output>", "rule": "scalar"}  # a Python float loss
    nan = torch.tensor(float("nan"))
    assert needed_at(nan, nan.clone(), tolerance=4e-2) is None  # no scalar rule for a NaN loss


def test_a_leaf_that_allclose_fails_needs_it_for_the_rmse_rule():
    eager, result = verifier_agreement._noise(random.Random(0), TRUTH, 1e-3, torch.float32), TRUTH.float()
    assert needed_at({"a": [eager]}, {"a": [result]}, tolerance=1e-4) == {"path": "a.0", "rule": "rmse"}
    small = TRUTH[:8].float()
    assert needed_at(small, small * 1.01, tolerance=1e-4, cosine=True) == {"path": "<output>", "rule": "rmse"}


def test_where_cosine_similarity_decides_the_reference_is_not_needed():
    eager = TRUTH.float()
    close, far = eager + 1e-3 * torch.randn(4096, generator=torch.Generator().manual_seed(4)), -eager
    assert needed_at(eager, close, tolerance=1e-6, cosine=True) is None
    deferred, full = (compare(eager, close, DEFERRED, tolerance=1e-6, cosine=True),
                      compare(eager, close, TRUTH, tolerance=1e-6, cosine=True))
    assert deferred.details() == full.details() and deferred.passed and deferred.method == "cosine"
    assert not compare(eager, far, DEFERRED, tolerance=1e-6, cosine=True).passed


def test_no_verdict_changes_on_the_agreement_corpus():
    """Every case of benchmarks/verifier_agreement.py judged first with DEFERRED, then with its
    reference where one is needed, gets the verdict (and, where it had a reference, the figures)
    of judging it with the reference from the start; both branches occur in every family that can
    reach them."""
    logging.getLogger("torch._dynamo.utils").setLevel(logging.CRITICAL)
    rng = random.Random(0)
    branches: dict[bool, int] = {True: 0, False: 0}
    for _ in range(1500):
        case = verifier_agreement.draw(rng)
        rules = {"tolerance": case.tol, "cosine": case.cosine}
        full = compare(case.ref, case.res, case.fp64, **rules)
        try:
            deferred, needed = compare(case.ref, case.res, DEFERRED, **rules), False
        except ReferenceNeeded:
            deferred, needed = compare(case.ref, case.res, case.fp64, **rules), True
        branches[needed] += 1
        assert deferred.passed == full.passed, case.family
        if case.fp64 is not None:  # without one, the full outcome says the reference is missing
            assert deferred.details() == full.details(), case.family
    assert min(branches.values()) > 300, branches


# --- the procedure ------------------------------------------------------------------------

def test_an_eval_output_allclose_passes_builds_no_reference(tmp_path, verifier_runs):
    timings: dict[str, float] = {}
    verification = verify_experiment(dummy_driver(tmp_path, "eval", "eager"), timings)
    assert verification["code"] == "PASS" and verification["method"] == "allclose"
    details = verification["details"]
    assert details["reference_not_needed"] is True and details["reference"] is None
    assert "reference_needed_at" not in details
    assert ("fp64", False) not in verifier_runs and "verify_float64_s" not in timings


def test_a_training_loss_builds_the_reference_and_says_where(tmp_path, verifier_runs):
    timings: dict[str, float] = {}
    verification = verify_experiment(dummy_driver(tmp_path, "train", "eager"), timings)
    assert verification["code"] == "PASS"
    details = verification["details"]
    assert details["reference_needed_at"] == {"path": "loss", "rule": "scalar"}
    assert details["reference"] == "float64" and "reference_not_needed" not in details
    assert verifier_runs.count(("fp64", False)) == 1 and timings["verify_float64_s"] > 0


def test_a_float64_run_that_would_fail_matters_only_where_it_is_needed(tmp_path, monkeypatch):
    real = verifier_run.run_once

    def broken_float64(harness, precision, compiled):
        if precision == "fp64":
            raise RuntimeError("no float64 kernel")
        return real(harness, precision, compiled)

    monkeypatch.setattr(verifier_run, "run_once", broken_float64)
    unneeded = verify_experiment(dummy_driver(tmp_path, "eval", "eager"))["details"]
    assert unneeded["reference_not_needed"] is True and "reference_error" not in unneeded
    needed = verify_experiment(dummy_driver(tmp_path, "train", "eager"))
    assert needed["code"] == "PASS" and needed["details"]["reference"] is None  # allclose decides the loss
    assert "no float64 kernel" in needed["details"]["reference_error"]["message"]
