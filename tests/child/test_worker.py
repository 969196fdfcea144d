"""The worker's pieces in-process, on a real tiny model: input randomization, the train step's
full output, matmul precision and the timing loop's bookkeeping."""

from pathlib import Path

import pytest
import torch

from experiment_runner.child.devices import DeviceRuntime
from experiment_runner.child.harness import ExperimentHarness, apply_matmul_precision, randomize_inputs, time_iterations
from experiment_runner.core.matrix import Experiment, ExperimentConfig
from experiment_runner.core.options import RunOptions


def harness(tmp_path: Path, test: str = "eval", **options) -> ExperimentHarness:
    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo=None, test=test, precision="fp32")
    return ExperimentHarness(Experiment("dummy", "dummy", config), RunOptions(**options),
                             DeviceRuntime(config), tmp_path)


def test_randomized_inputs_keep_shapes_dtypes_and_integer_ranges():
    ids = torch.randint(5, 9, (4, 16))
    images = torch.randn(2, 3)
    out = randomize_inputs({"ids": ids, "images": (images,), "mask": ids > 6})
    assert out["ids"].shape == ids.shape and out["ids"].dtype == torch.int64
    assert 5 <= int(out["ids"].min()) and int(out["ids"].max()) <= 8
    assert out["images"][0].shape == images.shape and not torch.equal(out["images"][0], images)
    assert out["mask"].dtype == torch.bool


def test_randomize_input_changes_values_but_stays_reproducible(tmp_path):
    plain = harness(tmp_path).load().args[0]
    randomized = harness(tmp_path, randomize_input=True).load().args[0]
    again = harness(tmp_path, randomize_input=True).load().args[0]
    assert randomized.shape == plain.shape and not torch.equal(randomized, plain)
    assert torch.equal(randomized, again), "randomized from the run's seed: every experiment sees the same inputs"


def test_collect_full_output_makes_train_steps_return_the_output_too(tmp_path):
    h = harness(tmp_path, test="train", collect_full_output=True)
    loss, output = h.make_step(h.load())()
    assert loss.dim() == 0 and output.shape == (32, 10)
    h = harness(tmp_path, test="train")
    assert h.make_step(h.load())().dim() == 0


@pytest.mark.parametrize("options, expected", [
    (RunOptions(), "high"),  # the reference runner's default: TF32
    (RunOptions(disable_tf32=True), "highest"),
    (RunOptions(matmul_precision="default"), "highest"),
    (RunOptions(matmul_precision="medium"), "medium"),
    (RunOptions(disable_tf32=True, matmul_precision="medium"), "medium"),
])
def test_matmul_precision_flags(options, expected):
    previous = torch.get_float32_matmul_precision()
    try:
        apply_matmul_precision(options)
        assert torch.get_float32_matmul_precision() == expected
        assert torch.backends.cuda.matmul.allow_tf32 == (expected != "highest")  # TF32 follows the precision
        if options.disable_tf32:
            assert not torch.backends.cudnn.allow_tf32
    finally:
        torch.set_float32_matmul_precision(previous)
        torch.backends.cudnn.allow_tf32 = True


def test_timing_keeps_warm_up_apart_and_one_sample_per_repeat(tmp_path):
    calls = []
    h = harness(tmp_path, repeat=4, iterations_per_run=3, warmup_iterations=2)
    step = h.make_step(h.load())
    metrics = time_iterations(lambda: calls.append(1) or step(), h.device, h.options)
    assert len(calls) == 2 + 4 * 3
    assert len(metrics["warmup_time"]) == 2
    assert len(metrics["total_time"]) == len(metrics["per_iter_time"]) == 4
    assert all(t == pytest.approx(3 * p) for t, p in zip(metrics["total_time"], metrics["per_iter_time"]))
