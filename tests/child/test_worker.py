"""The worker's pieces in-process, on a real tiny model: input randomization, the train step's
full output, matmul precision and the timing loop's bookkeeping."""

from pathlib import Path

import pytest
import torch

from experiment_runner.child.devices import DeviceRuntime
from experiment_runner.child.driver import ExperimentDriver, apply_matmul_precision, randomize_inputs, time_iterations
from experiment_runner.core.matrix import Experiment, ExperimentConfig
from experiment_runner.core.options import RunOptions


def harness(tmp_path: Path, test: str = "eval", **options) -> ExperimentDriver:
    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo=None, test=test, precision="fp32")
    return ExperimentDriver(Experiment("dummy", "dummy", config), RunOptions(**options),
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


@pytest.mark.skipif(not hasattr(torch.backends.mkldnn, "matmul"), reason="torch before 2.9 has no oneDNN precision")
@pytest.mark.parametrize("options, expected", [
    (RunOptions(), "none"),  # TF32 on CUDA only, as PyTorch's harness: CPU matmuls stay IEEE
    (RunOptions(disable_tf32=True), "none"),
    (RunOptions(matmul_precision="high"), "tf32"),  # asked for: torch's whole meaning
    (RunOptions(matmul_precision="medium"), "bf16"),
])
def test_default_tf32_leaves_cpu_matmuls_ieee(options, expected):
    previous = torch.get_float32_matmul_precision()
    try:
        apply_matmul_precision(options)
        assert torch.backends.mkldnn.matmul.fp32_precision == expected
        assert torch.get_float32_matmul_precision() == options.effective_matmul_precision
    finally:
        torch.set_float32_matmul_precision(previous)
        torch.backends.mkldnn.matmul.fp32_precision = "none"
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


def test_calibrated_samples_last_the_minimum_and_record_the_count(tmp_path, monkeypatch):
    """On a clock that a 2 ms step advances exactly: a 1-iteration trial (2 ms) is scaled to the
    20 ms target with 20% headroom (13 iterations, 26 ms), which is long enough and is kept."""
    import experiment_runner.child.driver as harness_module

    clock = [0.0]
    monkeypatch.setattr(harness_module, "perf_counter", lambda: clock[0])
    step = lambda: clock.__setitem__(0, clock[0] + 0.002)  # noqa: E731
    h = harness(tmp_path, repeat=3, warmup_iterations=1, min_sample_time=0.02)
    metrics = time_iterations(step, h.device, h.options)
    assert (metrics["iterations_per_run"], metrics["iterations_per_run_calibrated"]) == (13, True)
    assert metrics["calibration"] == [{"iterations": 1, "elapsed_s": pytest.approx(0.002)},
                                      {"iterations": 13, "elapsed_s": pytest.approx(0.026)}]
    assert metrics["total_time"] == pytest.approx([0.026] * 3)
    assert metrics["per_iter_time"] == pytest.approx([0.002] * 3), "per_iter_time stays per iteration"
    assert metrics["warmup_time"] == pytest.approx([0.002]), "warm-up is one iteration, calibration apart"
    explicit = time_iterations(step, h.device, RunOptions(repeat=2, iterations_per_run=7, warmup_iterations=0))
    assert (explicit["iterations_per_run"], explicit["iterations_per_run_calibrated"]) == (7, False)
    assert "calibration" not in explicit, "no trials ran"
    assert explicit["total_time"] == pytest.approx([0.014] * 2)


def test_calibration_on_the_real_clock_reaches_the_minimum(tmp_path):
    import time

    h = harness(tmp_path, repeat=3, warmup_iterations=0, min_sample_time=0.02)
    metrics = time_iterations(lambda: time.sleep(0.002), h.device, h.options)
    # sleep never undershoots: fewer than 10 iterations of >= 2 ms would not have reached 20 ms
    # in a trial unless the trial was slowed down, and 20% headroom keeps it under 40.
    assert 1 <= metrics["iterations_per_run"] <= 40
    assert all(t >= 0.002 * metrics["iterations_per_run"] for t in metrics["total_time"])


def test_calibration_leaves_long_steps_at_one_iteration(tmp_path):
    import time

    h = harness(tmp_path, repeat=2, warmup_iterations=0, min_sample_time=0.005)
    assert time_iterations(lambda: time.sleep(0.01), h.device, h.options)["iterations_per_run"] == 1


GRAPHS: list[str] = []


@pytest.fixture
def recording_backend():
    """A dynamo backend that keeps the code of every graph it is given and runs it as is."""
    import torch._dynamo

    if "test_recording" not in torch._dynamo.list_backends(exclude_tags=()):
        @torch._dynamo.register_backend(name="test_recording")
        def _record(gm, example_inputs):
            GRAPHS.append(gm.code)
            return gm.forward
    GRAPHS.clear()
    torch._dynamo.reset()
    yield GRAPHS
    torch._dynamo.reset()


@pytest.mark.parametrize("scope, graphs", [("step", 2), ("model", 1)])
def test_compile_scope_decides_what_the_backend_gets(tmp_path, recording_backend, scope, graphs):
    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo="test_recording", test="train",
                              precision="fp32")
    h = ExperimentDriver(Experiment("dummy", "dummy", config), RunOptions(compile_scope=scope),
                          DeviceRuntime(config), tmp_path)
    step = h.make_step(h.load())
    step()
    step()
    assert len(recording_backend) == graphs, recording_backend
    updates = ["add_" in code or "foreach" in code for code in recording_backend]
    # step: forward + loss in one graph, the optimizer's parameter update in another (backward()
    # itself is autograd's); model: the module's forward only, no optimizer update compiled.
    assert any(updates) == (scope == "step")


def test_compile_options_reach_torch_compile(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: seen.append(kwargs) or fn)
    for options, expected in [("default", {}), ("max-autotune", {"mode": "max-autotune"}),
                              ("dynamic", {}), ("freezing", {"options": {"freezing": True}})]:
        config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo="inductor", test="eval",
                                  precision="fp32", compile_options=options)
        h = ExperimentDriver(Experiment("dummy", "dummy", config), RunOptions(), DeviceRuntime(config), tmp_path)
        h.make_step(h.load())
        assert seen.pop() == {"backend": "inductor", "fullgraph": False, **expected}
