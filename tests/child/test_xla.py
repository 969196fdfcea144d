"""PyTorch/XLA for real: torch_xla on the CPU PJRT device, no mocks.

The tests marked `xla` need torch_xla and run in the XLA environment with
`PJRT_DEVICE=CPU pytest -m xla` (.ci/xla.sh); the unmarked ones check the pure dump settings
and run everywhere. The XLA fork server's tests are in test_xla_forkserver.py.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from conftest import invoke_cli

from experiment_runner.child.devices.xla import XLA_MATMUL_PRECISION
from experiment_runner.core.matrix import Experiment, ExperimentConfig
from experiment_runner.core.options import RunOptions
from experiment_runner.core.protocol import Task
from experiment_runner.core.xla_dumps import artifact_environment
from experiment_runner.parent.launch.env import child_environment

XLA_METRICS = ("trace_total_time", "trace_per_iter_time", "xla_CompileTime_time_s", "xla_CompileTime_number",
               "xla_ExecuteTime_time_s", "xla_ExecuteTime_number")
REPEAT = 2
ITERATIONS = 2


def xla_config(**changes: object) -> ExperimentConfig:
    fields = dict(accelerator="cpu", xla="PJRT", xla_flags=None, dynamo=None, test="eval", precision="fp32")
    fields.update(changes)
    return ExperimentConfig(**fields)  # type: ignore[arg-type]


def test_dump_hlo_is_appended_to_the_experiments_own_xla_flags(tmp_path: Path) -> None:
    task = Task(Experiment("dummy", "dummy", xla_config(xla_flags="--xla_cpu_use_thunk_runtime=false")),
                RunOptions(dump_hlo=True, save_ir_format="stablehlo"), str(tmp_path))
    env = child_environment(task, base={"XLA_FLAGS": "--inherited", "XLA_SAVE_TENSORS_FILE": "/elsewhere"})
    assert env["XLA_FLAGS"] == f"--xla_cpu_use_thunk_runtime=false --xla_dump_to={tmp_path / 'hlo'}"
    assert env["PJRT_DEVICE"] == "CPU"
    assert env["XLA_SAVE_TENSORS_FMT"] == "stablehlo"
    assert Path(env["XLA_SAVE_TENSORS_FILE"]).parent == tmp_path / "ir"
    assert (tmp_path / "ir").is_dir(), "torch_xla does not create the IR folder itself"


def test_no_dump_options_leave_the_environment_alone(tmp_path: Path) -> None:
    assert artifact_environment(RunOptions(), tmp_path, "--x") == {}
    env = child_environment(Task(Experiment("dummy", "dummy", xla_config(xla=None)),
                                 RunOptions(dump_hlo=True), str(tmp_path)), base={"XLA_FLAGS": "--inherited"})
    assert "XLA_FLAGS" not in env and "PJRT_DEVICE" not in env, "dumps only concern xla experiments"


# ---------------------------------------------------------------- torch_xla in this process


@pytest.fixture(scope="module")
def xla_runtime():
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    pytest.importorskip("torch_xla")
    from experiment_runner.child.devices.xla import XlaRuntime

    return XlaRuntime(xla_config())


@pytest.mark.xla
def test_runtime_counts_one_graph_per_iteration_and_clears_metrics_per_repeat(xla_runtime, tmp_path) -> None:
    import torch

    xla_runtime.prepare(RunOptions(dump_pytorch_xla_metrics=True), tmp_path)
    weight = torch.randn(16, 16).to(xla_runtime.torch_device)
    step = lambda: (weight @ weight).relu().sum()  # noqa: E731
    repeats = []
    for _ in range(2):
        xla_runtime.begin_repeat()
        for _ in range(3):
            xla_runtime.run_iteration(step)
        xla_runtime.synchronize()
        repeats.append(xla_runtime.end_repeat())
    first, second = repeats
    assert first["xla_CompileTime_number"] == 1 and first["xla_CompileTime_time_s"] > 0
    assert second["xla_CompileTime_number"] == 0, "metrics are cleared per repeat; the graph is cached"
    assert second["xla_ExecuteTime_number"] == 3 and second["xla_ExecuteTime_time_s"] > 0
    assert second["trace_per_iter_time"] == pytest.approx(second["trace_total_time"] / 3)
    report = (tmp_path / "repeat_1" / "pytorch-xla-metrics.txt").read_text()
    assert "ExecuteTime" in report
    assert xla_runtime.artifacts()["pytorch_xla_metrics.repeat_1"] == "repeat_1/pytorch-xla-metrics.txt"


@pytest.mark.xla
def test_per_op_profile_keeps_only_the_ops_that_fell_back_to_the_cpu(xla_runtime) -> None:
    import torch

    x = torch.randn(8, device=xla_runtime.torch_device)
    x.nonzero().cpu()  # nonzero has a data-dependent shape: torch_xla runs it on the CPU
    assert xla_runtime.profiled_op("aten::nonzero")
    assert not xla_runtime.profiled_op("aten::mm")


@pytest.mark.xla
def test_reset_rng_makes_device_random_numbers_repeat(xla_runtime) -> None:
    import torch

    draws = []
    for _ in range(2):
        xla_runtime.reset_rng(1337)
        draws.append(torch.randn(8, device=xla_runtime.torch_device).cpu())
    assert torch.equal(draws[0], draws[1])


@pytest.mark.xla
@pytest.mark.parametrize("flag", ["medium", "highest"])
def test_matmul_precision_reaches_xla(xla_runtime, tmp_path, flag) -> None:
    from torch_xla.backends import get_mat_mul_precision

    xla_runtime.prepare(RunOptions(matmul_precision=flag), tmp_path)
    assert get_mat_mul_precision() == XLA_MATMUL_PRECISION[flag]


@pytest.mark.xla
def test_amp_on_xla_computes_matmuls_in_bfloat16(xla_runtime) -> None:
    import torch

    from experiment_runner.child.devices.xla import xla_autocast

    x = torch.randn(4, 4).to(xla_runtime.torch_device)
    with xla_autocast(xla_config(precision="amp")):
        assert (x @ x).dtype == torch.bfloat16


# ---------------------------------------------------------------- real experiments via the CLI


@pytest.fixture(scope="module")
def dummy_run(tmp_path_factory, cli_cache):
    out = tmp_path_factory.mktemp("xla-dummy")
    run = invoke_cli(["--suite-name=dummy", "--accelerator=cpu", "--xla=PJRT", f"--repeat={REPEAT}",
                      f"--iterations-per-run={ITERATIONS}", "--verify", "--dump-hlo",
                      "--save-ir-format=stablehlo", "--dump-pytorch-xla-metrics"],
                     out, cli_cache, env={"PJRT_DEVICE": "CPU"}, timeout=900)
    assert run.returncode == 0, run.stderr
    return run


@pytest.mark.xla
def test_lazy_and_openxla_eval_and_train_pass_verification(dummy_run) -> None:
    records = dummy_run.records()
    assert [(r["experiment"]["dynamo"], r["experiment"]["test"]) for r in records] == [
        (None, "eval"), (None, "train"), ("openxla", "eval"), ("openxla", "train")]
    for r in records:
        assert r["status"] == "ok", r["error"]
        assert r["verification_code"] == "PASS", r["verification"]
        assert r["verification"]["details"]["eager_device"] == "cpu", "checked against native eager"
        assert r["experiment"]["xla"] == "PJRT" and r["experiment"]["accelerator_model"]


@pytest.mark.xla
def test_xla_metrics_per_repeat_hold_no_compilation(dummy_run) -> None:
    for r in dummy_run.records():
        metrics = r["metrics"]
        for key in XLA_METRICS:
            assert len(metrics[key]) == REPEAT, key
        # Warm-up holds the compilation: the timed repeats only execute cached graphs.
        assert metrics["xla_CompileTime_number"] == [0] * REPEAT
        assert all(n >= ITERATIONS for n in metrics["xla_ExecuteTime_number"]), "a graph per iteration"
        assert all(0 < t for t in metrics["xla_ExecuteTime_time_s"])
        for trace, per_iter, total in zip(metrics["trace_total_time"], metrics["trace_per_iter_time"],
                                          metrics["total_time"]):
            assert 0 < trace < total
            assert per_iter == pytest.approx(trace / ITERATIONS)


@pytest.mark.xla
def test_dumps_are_non_empty_files_where_the_record_says(dummy_run) -> None:
    out = dummy_run.output_dir
    for r in dummy_run.records():
        artifacts = r["artifacts"]
        hlo = out / artifacts["hlo"]
        modules = list(hlo.glob("*.txt"))
        assert modules and all(p.stat().st_size > 0 for p in modules)
        assert any("HloModule" in p.read_text() for p in modules)
        (ir_key,) = [k for k in artifacts if k.startswith("ir_stablehlo")]
        assert re.search(r"stablehlo\.|func\.func", (out / artifacts[ir_key]).read_text())
        for i in range(REPEAT):
            report = out / artifacts[f"pytorch_xla_metrics.repeat_{i}"]
            assert report.parent.name == f"repeat_{i}" and "ExecuteTime" in report.read_text()


@pytest.mark.xla
def test_profile_xla_writes_an_xplane_trace_and_save_output_each_repeats_output(tmp_path, cli_cache) -> None:
    """--profile-xla: the XPlane trace of the timed runs lands in xla-profile/ (the child waits for
    it); --save-output: each timed repeat's output, on the CPU, as the reference saves it."""
    run = invoke_cli(["--suite-name=dummy", "--accelerator=cpu", "--xla=PJRT", "--dynamo=None", "--test=eval",
                      "--repeat=2", "--profile-xla", "--profile-xla-duration-ms=1000", "--save-output"],
                     tmp_path / "out", cli_cache, env={"PJRT_DEVICE": "CPU"}, timeout=600)
    import torch

    assert run.returncode == 0, run.stderr
    (record,) = run.records()
    assert record["status"] == "ok", record["error"]
    artifacts = record["artifacts"]
    traces = list((run.output_dir / artifacts["xla_profile"]).rglob("*.xplane.pb"))
    assert traces and all(t.stat().st_size > 0 for t in traces)
    for i in range(2):
        output = torch.load(run.output_dir / artifacts[f"output_repeat_{i}"])
        assert output.device.type == "cpu" and torch.isfinite(output).all()


@pytest.mark.xla
def test_builtin_torchbench_llama_passes_on_lazy_and_openxla(tmp_path, cli_cache) -> None:
    run = invoke_cli(["--suite-name=torchbench", "--accelerator=cpu", "--filter=llama", "--xla=PJRT",
                      "--test=eval", "--batch-size=1", "--repeat=1", "--verify"],
                     tmp_path / "out", cli_cache, env={"PJRT_DEVICE": "CPU"}, timeout=900)
    assert run.returncode == 0, run.stderr
    records = run.records()
    assert [r["experiment"]["dynamo"] for r in records] == [None, "openxla"]
    for r in records:
        assert r["model"]["source"] == "builtin"
        assert (r["status"], r["verification_code"]) == ("ok", "PASS"), (r["error"], r["verification"])
        assert r["metrics"]["xla_ExecuteTime_number"][0] >= 1
