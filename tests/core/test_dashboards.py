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
from experiment_runner.parent.session import print_dry_run

BACKENDS = frozenset({"inductor", "aot_eager", "eager"})  # torch._dynamo.list_backends(exclude_tags=())'s
CPU_ONLY = HostCapabilities(dynamo_backends=BACKENDS)
WITH_CUDA = HostCapabilities(cuda=True, cuda_device_count=1, dynamo_backends=BACKENDS)


def plan(names: tuple[str, ...], caps: HostCapabilities = WITH_CUDA, **choices):
    return expand("timm", ["ghostnet_100"], MatrixChoices(dashboards=names, **choices), caps)


HARNESS_PRECISION = {"fp32": "--float32", "amp": "--amp", "bf16": "--bfloat16"}
HARNESS_BACKEND = {"--inductor": "inductor", "--export-aot-inductor": "inductor", "inductor": "inductor",
                   "aot_eager": "aot_eager", "eager": "eager"}


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
        backend = flags[flags.index("--backend") + 1] if "--backend" in flags else next(
            flag for flag in flags if flag in HARNESS_BACKEND)
        assert HARNESS_BACKEND[backend] == wanted.dynamo
        assert ("--freezing" in flags) == ("freezing" in wanted.compile_options)
        assert ("--export-aot-inductor" in flags) == wanted.compile_options.startswith("aot-inductor")
        assert ("--dynamic-batch-only" in flags) == (wanted.compile_options == "dynamic")
        assert ("--performance" in flags) == (wanted.target == dashboards.PERFORMANCE)
        assert ("TORCHINDUCTOR_MAX_AUTOTUNE=1" in flags) == wanted.compile_options.endswith("autotune")
        assert ("TORCHINDUCTOR_CPP_WRAPPER=1" in flags) == (wanted.compile_options == "cpp-wrapper")
        if wanted.target == dashboards.PERFORMANCE:  # the harness runs CUDA graphs unless told not to
            assert ("--disable-cudagraphs" not in flags) == uses_cuda_graphs(config)


def test_pytorchs_ci_trains_on_cuda_only_and_never_an_aot_inductor_or_cpu_job():
    assert dashboards.training_jobs() == ("inductor", "dynamic_inductor", "aot_eager", "dynamic_aot_eager",
                                          "dynamo_eager", "inductor_with_cudagraphs", "inductor_no_cudagraphs",
                                          "inductor_dynamic", "inductor_max_autotune")
    for name in dashboards.training_jobs()[:5]:
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


@pytest.mark.e2e
def test_cuda_on_a_cpu_host_lists_every_configuration_and_refuses_to_run_in_one_line(run_cli):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA host runs them")
    shown = run_cli("--suite-name=dummy", "--dashboard=cuda", "--dry-run")
    assert shown.returncode == 0
    for name in dashboards.groups()["cuda"]:
        assert f"[{name}]" in shown.stdout, name
    refused = run_cli("--suite-name=dummy", "--dashboard=cuda")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "experiment_runner: error: every combination was dropped as invalid here: cuda requires "
        "torch.cuda.is_available(); --dry-run lists them"]


@pytest.mark.parametrize(("argv", "message"), [
    (("--dashboard=cpu_inductor", "--test=train"),
     "--dashboard=cpu_inductor runs no train in PyTorch's CI (the jobs with a training run: inductor, "
     "dynamic_inductor, aot_eager, dynamic_aot_eager, dynamo_eager, inductor_with_cudagraphs, "
     "inductor_no_cudagraphs, inductor_dynamic, inductor_max_autotune)"),
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
    from experiment_runner.parent.session import build_plan
    from experiment_runner.parent.suites import suite_catalog

    def planned(argv: list[str], suite: str = "torchbench") -> tuple:
        config = parse_config([f"--suite-name={suite}", "--dry-run", *argv])
        (experiment,) = build_plan(config.matrix, suite_catalog(suite), ["tiny"], CPU_ONLY).to_run
        return config.options.verify, experiment.config.batch_size, config.options.speedup

    assert planned(["--dashboard=cpu_inductor", *argv]) == (verify, batch_size, speedup)
    plain = parse_config(["--suite-name=torchbench", "--dry-run"])  # without --dashboard nothing changes
    assert (plain.options.verify, plain.matrix.batch_size, plain.options.speedup) == (False, None, "isolated")
    assert (plain.options.pairs_adaptive, plain.options.pairs_half_width, plain.options.max_pairs) == (True, 0.02, 100)
    assert planned(["--dashboard=cpu_inductor"], "dummy")[1] is None  # no suite of PyTorch's: the models' own


@pytest.mark.parametrize(("argv", "rule"), [
    ((), (True, 0.05, 10, 30)),  # the job's speedup, known within ±5%, from at most its 30 pairs
    (("--no-adaptive-pairs",), (False, 0.05, 10, 30)),  # the job's fixed 30
    (("--pairs-half-width=0.02", "--max-pairs=60", "--min-pairs=12"), (True, 0.02, 12, 60)),
    (("--speedup=paired",), (True, 0.05, 10, 30)),
])
def test_a_dashboard_run_stops_its_pairs_at_five_percent_unless_told_otherwise(argv, rule):
    from experiment_runner.cli import parse_config

    options = parse_config(["--suite-name=torchbench", "--dry-run", "--dashboard=cpu_inductor", *argv]).options
    assert (options.pairs_adaptive, options.pairs_half_width, options.min_pairs, options.max_pairs) == rule
    harness = parse_config(["--suite-name=torchbench", "--dry-run", "--speedup=harness"]).options
    assert not harness.pairs_adaptive  # --speedup=harness alone keeps the harness's exact count


def test_each_way_a_dashboard_experiment_ran_unlike_its_job_is_in_its_record(tmp_path):
    from experiment_runner.core.matrix import Experiment
    from experiment_runner.core.options import RunOptions
    from experiment_runner.core.protocol import ChildResult, PublishedResult
    from experiment_runner.core.record import ChildOutcome, RecordContext, build_record
    from experiment_runner.core.record_schema import validate_record

    def overrides(options: RunOptions, batch_size: int, dynamo: str | None = "inductor") -> dict | None:
        config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo=dynamo, test="eval",
                                  precision="fp32", batch_size=batch_size)
        ctx = RecordContext(run_id="r", fingerprint="0123456789ab", options=options, output_dir=tmp_path)
        result = ChildResult("ok", batch_size, "fp32", metrics={"per_iter_time": [0.01]})
        record = build_record(ctx, Experiment("torchbench", "tiny", config), ChildOutcome(PublishedResult(result), 0))
        validate_record(record)
        return record["experiment"]["dashboard_overrides"]

    assert overrides(RunOptions(verify=True, speedup="harness"), 4) == {}
    assert overrides(RunOptions(verify=False, speedup="isolated"), 16) == {
        "verify": False, "batch_size": 16, "speedup": "isolated"}
    assert overrides(RunOptions(verify=True, speedup="harness"), 4, dynamo=None) is None  # no dashboard's


def test_cuda_plans_the_accuracy_jobs_and_the_performance_modes_each_group_on_its_own():
    groups = dashboards.groups()
    assert groups["cuda"] == groups["cuda-accuracy"] + groups["cuda-perf"]
    assert dashboards.dashboards()["inductor_with_cudagraphs"].expected_file("timm", "eval") is None
    assert {dashboards.dashboards()[name].target for name in groups["cuda-perf"]} == {dashboards.PERFORMANCE}
    assert groups["cuda-perf"] == (
        "inductor_with_cudagraphs", "inductor_no_cudagraphs", "inductor_dynamic", "inductor_cpp_wrapper",
        "inductor_with_cudagraphs_freezing", "inductor_with_cudagraphs_freezing_autotune", "inductor_aot_inductor",
        "inductor_max_autotune")
    assert dashboards.performance_source().startswith("pytorch/pytorch .ci/pytorch/test.sh @ 0033967f")


def test_a_performance_mode_runs_at_the_models_own_batch_and_is_its_own_experiment():
    ran = plan(("inductor", "inductor_with_cudagraphs"), tests=("eval",), dashboard_batch_size=8).to_run
    accuracy, performance = (e.config for e in ran)
    # Both compile as inductor on CUDA with CUDA graphs: the same settings, two jobs.
    assert (accuracy.compile_options, performance.compile_options) == ("default", "default")
    assert (accuracy.batch_size, performance.batch_size) == (8, None)
    assert (accuracy.dashboard, performance.dashboard) == ("inductor", "inductor_with_cudagraphs")
    assert len({e.experiment_id for e in ran}) == 2 and ran[1].experiment_id.endswith("-inductor_with_cudagraphs")
    # A mode with settings of its own needs no name beside them; plain settings name the accuracy job.
    (autotuned,) = plan(("inductor_max_autotune",), tests=("eval",)).to_run
    assert autotuned.config.job is None and autotuned.config.dashboard == "inductor_max_autotune"
    assert dataclasses.replace(performance, job=None, batch_size=8).dashboard == "inductor"
    # --batch-size is every job's; only a performance mode's records it as an override.
    given = plan(("inductor", "inductor_with_cudagraphs"), tests=("eval",), batch_size=2,
                 dashboard_batch_size=8).to_run
    assert [e.config.batch_size for e in given] == [2, 2]
    assert dashboards.overrides("inductor_with_cudagraphs", "timm", "cuda", True, 64, "harness") == {}
    assert dashboards.overrides("inductor_with_cudagraphs", "timm", "cuda", True, 2, "harness", 2) == {
        "batch_size": 2}


def test_the_performance_modes_compile_options_are_inductors_and_leave_cuda_graphs_as_the_harness_does():
    def on(options: str, accelerator: str = "cuda", test: str = "eval", dynamo: str = "inductor") -> ExperimentConfig:
        return ExperimentConfig(accelerator=accelerator, xla=None, xla_flags=None, dynamo=dynamo, test=test,
                                precision="bf16", compile_options=options)
    assert [uses_cuda_graphs(on(o)) for o in ("no-cudagraphs", "cpp-wrapper", "autotune", "freezing-autotune")] == [
        False, False, True, True]
    assert not uses_cuda_graphs(on("autotune", "cpu"))
    assert invalid_reason(on("freezing-autotune", test="train"), WITH_CUDA) == (
        "compile options 'freezing-autotune' are for inference only (test eval), as in PyTorch's harness")
    assert invalid_reason(on("cpp-wrapper", dynamo="aot_eager"), WITH_CUDA) == (
        "compile options 'cpp-wrapper' are inductor's; dynamo=aot_eager does not take them")
    assert invalid_reason(on("cpp-wrapper", test="train"), WITH_CUDA) is None


def test_a_changed_pair_rule_and_the_autocast_dtype_are_in_the_record(tmp_path):
    """--adaptive-pairs under --dashboard, or more pairs than the job's 30, is a departure from the
    job's speedup (dashboard_overrides.pairs); an amp record names the dtype it autocast to."""
    from experiment_runner.core.matrix import Experiment
    from experiment_runner.core.options import RunOptions
    from experiment_runner.core.protocol import ChildResult, PublishedResult
    from experiment_runner.core.record import ChildOutcome, RecordContext, build_record
    from experiment_runner.core.record_schema import validate_record

    def experiment(options: RunOptions, accelerator: str = "cpu", precision: str = "fp32") -> dict:
        config = ExperimentConfig(accelerator=accelerator, xla=None, xla_flags=None, dynamo="inductor", test="eval",
                                  precision=precision, batch_size=4)
        ctx = RecordContext(run_id="r", fingerprint="0123456789ab", options=options, output_dir=tmp_path)
        result = ChildResult("ok", 4, precision, metrics={"per_iter_time": [0.01]})
        record = build_record(ctx, Experiment("torchbench", "tiny", config), ChildOutcome(PublishedResult(result), 0))
        validate_record(record)
        return record["experiment"]

    harness = RunOptions(verify=True, speedup="harness")
    assert experiment(dataclasses.replace(harness, adaptive_pairs=True))["dashboard_overrides"] == {"pairs": "adaptive"}
    assert experiment(dataclasses.replace(harness, repeat=50))["dashboard_overrides"] == {"pairs": 50}
    assert experiment(dataclasses.replace(harness, adaptive_pairs=False))["dashboard_overrides"] == {}
    assert experiment(dataclasses.replace(harness, speedup="isolated"))["dashboard_overrides"] == {"speedup": "isolated"}
    assert experiment(harness)["autocast_dtype"] is None
    assert experiment(harness, precision="amp")["autocast_dtype"] == "bfloat16"
    assert experiment(harness, accelerator="cuda", precision="amp")["autocast_dtype"] == "float16"


def test_dry_run_shows_the_batch_of_each_figure_and_which_is_not_pytorchs(capsys: pytest.CaptureFixture[str]):
    # A CPU host: the CUDA configurations are dropped, and their batches still shown.
    planned = plan(("cpu_inductor", "inductor_with_cudagraphs"), caps=CPU_ONLY, tests=("eval",),
                   dashboard_batch_size=8)
    print_dry_run(planned, set())
    out = capsys.readouterr().out.splitlines()
    rows = {line.split("[")[1].split("]")[0]: line.split("]: ")[1] for line in out if "]: verdict" in line}
    # An accuracy job verifies at PyTorch's accuracy batch; PyTorch's speedup is its performance run's.
    assert rows["cpu_inductor"] == ("verdict bs=8 (PyTorch's bs=8), speedup bs=8 (PyTorch's the model's own); "
                                    "speedup at another batch than PyTorch's")
    # A performance mode times at the model's own batch, where PyTorch's --accuracy run takes bs=8.
    assert rows["inductor_with_cudagraphs"] == (
        "verdict the model's own (PyTorch's bs=8), speedup the model's own (PyTorch's the model's own); "
        "verdict at another batch than PyTorch's")
    assert dashboards.batches("timm", None).differing() == ("verdict",)
    assert dashboards.batches("timm", 8).differing() == ("speedup",)
    assert dashboards.batches("huggingface", 8).differing() == ("verdict", "speedup")
    assert dashboards.batches("dummy", 8) is None
    # No dashboard, no batch lines.
    print_dry_run(expand("timm", ["ghostnet_100"], MatrixChoices(dynamo=("inductor",), tests=("eval",),
                                                                 accelerators=("cpu",)), CPU_ONLY), set())
    assert "batches of the dashboard figures" not in capsys.readouterr().out
