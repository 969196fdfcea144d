"""The verifier runs under the determinism PyTorch's accuracy runs set (setup_determinism), names
it in the record, and leaves the process's settings as they were."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

from conftest import dummy_driver
from experiment_runner.core import dashboards
from verifier import run as verifier_run
from verifier import verify_experiment

CUBLAS = "CUBLAS_WORKSPACE_CONFIG"


def settings_now() -> dict[str, Any]:
    return {"deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "cudnn.deterministic": torch.backends.cudnn.deterministic,
            "cudnn.benchmark": torch.backends.cudnn.benchmark,
            "mkldnn.deterministic": torch.backends.mkldnn.deterministic,
            "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
            "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "sdpa reduced precision": torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed(),
            CUBLAS: os.environ.get(CUBLAS)}


HARNESS_ACCURACY = {"deterministic_algorithms": True, "cudnn.deterministic": True, "cudnn.benchmark": False,
                    "mkldnn.deterministic": True, "cudnn.allow_tf32": False, "cuda.matmul.allow_tf32": False,
                    "sdpa reduced precision": False, CUBLAS: ":4096:8"}


@pytest.mark.parametrize("test", ["eval", "train"])
def test_every_verification_run_is_deterministic_as_the_harness_makes_it(tmp_path, monkeypatch, test):
    monkeypatch.delenv(CUBLAS, raising=False)
    torch.backends.cudnn.benchmark = True  # what a timed run may have left on
    before = settings_now()
    seen: list[dict[str, Any]] = []
    real = verifier_run.run_once

    def spied(harness: Any, precision: str, compiled: bool) -> Any:
        seen.append(settings_now())
        return real(harness, precision, compiled)

    monkeypatch.setattr(verifier_run, "run_once", spied)
    try:
        verification = verify_experiment(dummy_driver(tmp_path, test=test))
        after = settings_now()
    finally:
        torch.backends.cudnn.benchmark = False
    assert verification["code"] == "PASS", verification
    assert len(seen) >= 3 and all(run == HARNESS_ACCURACY for run in seen), seen
    described = verification["details"]["determinism"]
    assert described["torch.use_deterministic_algorithms"] is True and described[f"env.{CUBLAS}"] == ":4096:8"
    assert "setup_determinism" in described["source"]
    assert after == before, "the process's own settings come back"


def test_models_the_harness_exempts_keep_nondeterministic_algorithms():
    assert dashboards.accuracy_determinism("vgg16").settings["torch.use_deterministic_algorithms"] is False
    exempt_rest = dict(dashboards.accuracy_determinism("vgg16").settings, **{"torch.use_deterministic_algorithms": True})
    assert exempt_rest == dashboards.accuracy_determinism("llama").settings
