"""Verification within the memory the host has: planned from the eager run, never an OOM kill."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from experiment_runner.child.devices import DeviceRuntime
from experiment_runner.child.harness import ExperimentHarness
from experiment_runner.core.matrix import Experiment, ExperimentConfig
from experiment_runner.core.options import RunOptions
from verifier import memory, verify_experiment


def harness(tmp_path: Path, test: str = "eval") -> ExperimentHarness:
    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo="eager", test=test,
                              precision="fp32", batch_size=4)
    return ExperimentHarness(Experiment("dummy", "dummy", config), RunOptions(verify=True), DeviceRuntime(config),
                             tmp_path)


def test_the_estimate_widens_the_eager_run_to_float64_and_keeps_three_outputs():
    output = {"logits": torch.zeros(1000, 1000), "ids": torch.zeros(10, dtype=torch.long)}
    assert memory.float_elements(output) == 1_000_000
    run = 64 * 2**20
    fp32, bf16 = memory.plan(output, run, "fp32"), memory.plan(output, run, "bf16")
    assert fp32.with_reference > fp32.without_reference >= run
    assert fp32.with_reference >= 8_000_000 * (1 + memory.COMPARE_TEMPORARIES)  # float64 output and comparison
    assert bf16.with_reference >= 4 * run  # bfloat16 data takes four times the bytes in float64
    assert memory.MemoryPlan(10, 5, None).fits(10**12)  # a host that cannot tell is not refused


@pytest.mark.parametrize("available, code, reference", [
    (None, "PASS", "float64"),
    (150, "PASS", None),  # the reference alone does not fit: left out, said why
    (10, "VERIFIER_SKIPPED", None),  # nothing fits: skipped with the estimate
])
def test_what_does_not_fit_is_left_out_and_said(tmp_path, monkeypatch, available, code, reference):
    """In training, whose loss needs the float64 reference (the scalar rule)."""
    monkeypatch.setattr(memory, "plan", lambda *args: memory.MemoryPlan(200, 100, available))
    verification = verify_experiment(harness(tmp_path, "train"))
    details = verification["details"]
    assert verification["code"] == code, verification
    assert details["memory"]["available_gib"] == (None if available is None else round(available / memory.GIB, 2))
    assert details.get("reference") == reference
    if available == 150:
        assert "float64 reference would need" in details["reference_skipped"]
    if code == "VERIFIER_SKIPPED":
        assert "would not fit in the memory this host has available" in details["reason"]


@pytest.mark.parametrize("peaks, measured", [({"timed_peak_rss_bytes": 1000 + 4096}, 4096), ({}, 0)])
def test_the_eager_run_is_its_growth_of_the_resident_high_water_mark(tmp_path, monkeypatch, peaks, measured):
    seen = []
    real_plan = memory.plan
    h = harness(tmp_path)
    monkeypatch.setattr(memory, "resident_bytes", lambda: 1000)
    monkeypatch.setattr(h.device, "peak_memory", lambda: peaks)  # {}: a kernel that cannot reset the mark
    monkeypatch.setattr(memory, "plan", lambda output, run_bytes, precision: seen.append(run_bytes) or
                        real_plan(output, run_bytes, precision))
    assert verify_experiment(h)["code"] == "PASS"
    assert seen == [measured]
