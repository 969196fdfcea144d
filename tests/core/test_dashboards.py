"""--dashboard: PyTorch's inductor dashboard configurations, planned under their CI names."""

from __future__ import annotations

import dataclasses

import pytest

from experiment_runner.core import dashboards
from experiment_runner.core.matrix import (
    ExperimentConfig,
    HostCapabilities,
    MatrixChoices,
    expand,
    invalid_reason,
    uses_cuda_graphs,
)

BACKENDS = frozenset({"inductor", "aot_eager", "eager"})  # torch._dynamo.list_backends(exclude_tags=())'s
CPU_ONLY = HostCapabilities(dynamo_backends=BACKENDS)
WITH_CUDA = HostCapabilities(cuda=True, cuda_device_count=1, dynamo_backends=BACKENDS)


def plan(names: tuple[str, ...], caps: HostCapabilities = WITH_CUDA, **choices):
    return expand("timm", ["ghostnet_100"], MatrixChoices(dashboards=names, **choices), caps)


HARNESS_PRECISION = {"fp32": "--float32", "amp": "--amp", "bf16": "--bfloat16"}
HARNESS_BACKEND = {"--inductor": "inductor", "--export-aot-inductor": "inductor", "aot_eager": "aot_eager",
                   "eager": "eager"}


@pytest.mark.parametrize("name", sorted(dashboards.dashboards()))
def test_each_configuration_plans_one_experiment_per_run_of_its_job_named_as_pytorchs_ci_names_it(name):
    wanted = dashboards.dashboards()[name]
    planned = plan((name,)).to_run
    assert [(e.config.test, e.config.precision) for e in planned] == [(r.test, r.precision) for r in wanted.runs]
    for experiment, run in zip(planned, wanted.runs):
        config = experiment.config
        assert (config.accelerator, config.dynamo, config.compile_options) == (
            wanted.accelerator, wanted.dynamo, wanted.compile_options)
        assert config.dashboard == name and f"[{name}]" in config.label()
        # A training run takes the harness's step; inference has no step to choose.
        assert config.training_recipe == ("dynamo_harness" if run.test == "train" else "pytorch_xla")
        # The harness's flags for it say the same: its device, mode, precision and what it compiles with.
        flags = run.harness_flags.split()
        assert flags[flags.index("--device") + 1] == wanted.accelerator
        assert {"eval": "--inference", "train": "--training"}[run.test] in flags
        assert HARNESS_PRECISION[run.precision] in flags
        backend = flags[flags.index("--backend") + 1] if "--backend" in flags else flags[0]
        assert HARNESS_BACKEND[backend] == wanted.dynamo
        assert ("--freezing" in flags) == ("freezing" in wanted.compile_options)
        assert ("--export-aot-inductor" in flags) == wanted.compile_options.startswith("aot-inductor")
        assert ("--dynamic-batch-only" in flags) == (wanted.compile_options == "dynamic")


def test_pytorchs_ci_trains_on_cuda_only_and_never_an_aot_inductor_or_cpu_job():
    assert dashboards.training_jobs() == ("inductor", "dynamic_inductor", "aot_eager", "dynamic_aot_eager",
                                          "dynamo_eager")
    for name in dashboards.training_jobs():
        job = dashboards.dashboards()[name]
        assert job.accelerator == "cuda" and job.run("train").precision == "amp"
        assert job.expected_file("timm", "train") == f"{name}_timm_training.csv"


def test_test_keeps_a_jobs_training_run_and_accelerator_moves_it_to_the_cpu_recorded_as_an_override():
    (trained,) = plan(("inductor",), tests=("train",)).to_run
    assert (trained.config.accelerator, trained.config.test, trained.config.precision) == ("cuda", "train", "amp")
    (on_cpu,) = plan(("inductor",), CPU_ONLY, tests=("train",), accelerators=("cpu",)).to_run
    assert (on_cpu.config.accelerator, on_cpu.config.dashboard) == ("cpu", "inductor")
    assert dashboards.overrides("inductor", "timm", "cpu", True, 8, "harness") == {"accelerator": "cpu"}
    assert dashboards.overrides("inductor", "timm", "cuda", True, 8, "harness") == {}
    # The same settings with the default training step are no job's: the record names no dashboard.
    assert dataclasses.replace(on_cpu.config, training_recipe="pytorch_xla").dashboard is None


def test_a_group_plans_its_device_and_a_cpu_host_drops_cuda_with_the_reason():
    assert [e.config.dashboard for e in plan(("cpu",)).to_run] == list(dashboards.groups()["cpu"])
    on_cpu = plan(("cpu", "cuda"), CPU_ONLY)
    assert len(on_cpu.to_run) == 5
    assert {(d.config.dashboard, d.config.test): d.reason for d in on_cpu.dropped} == {
        (name, run.test): "cuda requires torch.cuda.is_available()" for name in dashboards.groups()["cuda"]
        for run in dashboards.dashboards()[name].runs}
    assert len(plan(("cpu", "cpu_inductor")).to_run) == 5  # a configuration is planned once


def test_a_models_own_inference_precision_never_replaces_the_dashboards():
    choices = MatrixChoices(dashboards=("cpu_inductor",), eval_precisions={"ghostnet_100": "fp16"})
    (experiment,) = expand("timm", ["ghostnet_100"], choices, CPU_ONLY).to_run
    assert experiment.config.precision == "fp32"


def test_other_experiments_name_no_dashboard():
    base = dict(accelerator="cpu", xla=None, xla_flags=None, dynamo="inductor", test="eval", precision="fp32")
    assert ExperimentConfig(**base).dashboard == "cpu_inductor"
    for change in (dict(precision="bf16"), dict(test="train"), dict(dynamo="aot_eager"),
                   dict(compile_options="max-autotune"), dict(test="train", precision="amp")):
        assert ExperimentConfig(**{**base, **change}).dashboard is None


def test_cuda_graphs_where_the_harness_uses_them():
    def on_cuda(options: str) -> ExperimentConfig:
        return ExperimentConfig(accelerator="cuda", xla=None, xla_flags=None, dynamo="inductor", test="eval",
                                precision="bf16", compile_options=options)
    assert [uses_cuda_graphs(on_cuda(o)) for o in ("default", "dynamic", "freezing", "aot-inductor")] == [
        True, True, True, False]
    assert invalid_reason(on_cuda("freezing"), WITH_CUDA) is None  # freezing is not CPU-only in the harness


def test_no_cuda_graphs_flag_on_a_cpu_graph():
    # The dashboard's CPU performance rows pass --disable-cudagraphs; with the flag on, inductor
    # reorders a CPU graph's kernels (docs/benchmarks/paired_vs_harness.md, 2026-11-28).
    for options in ("default", "dynamic", "freezing", "max-autotune", "aot-inductor-freezing"):
        config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo="inductor", test="eval",
                                  precision="fp32", compile_options=options)
        assert not uses_cuda_graphs(config), options


def test_the_settings_come_with_their_source_commits():
    assert dashboards.source().startswith("pytorch/pytorch .ci/pytorch/test.sh @ ")
    assert "llama" in dashboards.dynamic_batch_skips() and dashboards.harness_iterations() == 2


@pytest.mark.e2e
def test_dashboard_beside_a_dimension_flag_is_one_line(run_cli):
    result = run_cli("--suite-name=dummy", "--dashboard=cpu", "--compile-options=freezing", "--dry-run")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "experiment_runner: error: --dashboard sets the dynamo backend, precision, compile options and training "
        "step as PyTorch's CI job of that name does; --compile-options cannot go with it"]


@pytest.mark.parametrize(("argv", "message"), [
    (("--dashboard=cpu_inductor", "--test=train"),
     "--dashboard=cpu_inductor runs no train in PyTorch's CI (the jobs with a training run: inductor, "
     "dynamic_inductor, aot_eager, dynamic_aot_eager, dynamo_eager)"),
    (("--dashboard=inductor", "--accelerator=cpu"),
     "--accelerator beside --dashboard moves a job's training runs to another device and needs --test=train: "
     "each device's inference is a job of its own (cpu_inductor, inductor, ...)"),
    (("--dashboard=inductor", "--training-recipe=pytorch_xla", "--test=train"),
     "--dashboard sets the dynamo backend, precision, compile options and training step as PyTorch's CI job of "
     "that name does; --training-recipe cannot go with it"),
])
def test_what_a_dashboard_cannot_plan_is_one_line(argv, message):
    from experiment_runner.cli import parse_config
    from experiment_runner.errors import UsageError

    with pytest.raises(UsageError) as raised:
        parse_config(["--suite-name=timm", "--dry-run", *argv])
    assert str(raised.value) == message


def test_an_eager_experiment_beside_a_dashboard_is_refused_saying_where_the_speedup_comes_from():
    from experiment_runner.cli import parse_config
    from experiment_runner.errors import UsageError

    with pytest.raises(UsageError, match=r"--dynamo cannot go with it \(its speedup needs no eager experiment: the "
                                         r"compiled experiment times eager in its own process, --speedup=harness"):
        parse_config(["--suite-name=torchbench", "--dashboard=cpu_inductor", "--dynamo=None"])


@pytest.mark.parametrize(("argv", "verify", "batch_size", "speedup"), [
    ((), True, 4, "harness"),  # as PyTorch's CI job runs it: accuracy checked at batch 4, the harness's speedup
    (("--no-verify", "--batch-size=16", "--speedup=isolated"), False, 16, "isolated"),
    (("--verify", "--speedup=paired"), True, 4, "paired"),
])
def test_a_dashboard_run_takes_the_jobs_settings_unless_told_otherwise(argv, verify, batch_size, speedup):
    from experiment_runner.cli import parse_config

    config = parse_config(["--suite-name=torchbench", "--dashboard=cpu_inductor", "--dry-run", *argv])
    assert (config.options.verify, config.matrix.batch_size, config.options.speedup) == (verify, batch_size, speedup)
    plain = parse_config(["--suite-name=torchbench", "--dry-run"])  # without --dashboard nothing changes
    assert (plain.options.verify, plain.matrix.batch_size, plain.options.speedup) == (False, None, "isolated")
    assert parse_config(["--suite-name=dummy", "--dashboard=cpu", "--dry-run"]).matrix.batch_size is None


def test_each_way_a_dashboard_experiment_ran_unlike_its_job_is_in_its_record(tmp_path):
    from experiment_runner.core.matrix import Experiment
    from experiment_runner.core.options import RunOptions
    from experiment_runner.core.record import ChildOutcome, RecordContext, build_record
    from experiment_runner.core.record_schema import validate_record

    def overrides(options: RunOptions, batch_size: int, dynamo: str | None = "inductor") -> dict | None:
        config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo=dynamo, test="eval",
                                  precision="fp32", batch_size=batch_size)
        ctx = RecordContext(run_id="r", fingerprint="0123456789ab", options=options, output_dir=tmp_path)
        result = {"status": "ok", "metrics": {"per_iter_time": [0.01]}, "batch_size": batch_size}
        record = build_record(ctx, Experiment("torchbench", "tiny", config), ChildOutcome(result, 0))
        validate_record(record)
        return record["experiment"]["dashboard_overrides"]

    assert overrides(RunOptions(verify=True, speedup="harness"), 4) == {}
    assert overrides(RunOptions(verify=False, speedup="isolated"), 16) == {
        "verify": False, "batch_size": 16, "speedup": "isolated"}
    assert overrides(RunOptions(verify=True, speedup="harness"), 4, dynamo=None) is None  # no dashboard's
