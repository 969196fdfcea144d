"""The reference runner's documented invocations parse here and plan the same experiments.

Invocations are PyTorch/XLA's benchmarks/README.md examples and the commands of nightly.sh,
run_benchmark.sh, run_top_tier_bm.sh, run_single_graph_bm.sh and
test/benchmarks/run_torchbench_tests.sh (pytorch/xla, 2025-09, before CUDA was removed from
benchmarks/), with their shell variables filled in.

`reference_plan` is what the reference's `--dry-run` enumerates, re-implemented from its
source for this test: ExperimentLoader.list_experiment_configs and _is_available (validity
rules), ModelLoader.get_benchmark_indices (contiguous shards of the unfiltered list) and
skip_model (filters), tiers.py, and run_single_config for --experiment-config/--model-config.
Hosts are simulated by their capabilities; the model list is our torchbench catalog on both
sides. Planned experiments are compared as sets (the reference's own order is a set's).
"""

from __future__ import annotations

import dataclasses
import json
import re
from itertools import product

import pytest

from experiment_runner.cli import build_parser, parse_config
from experiment_runner.core.matrix import HostCapabilities
from experiment_runner.core.run_config import RunConfig
from experiment_runner.errors import UsageError
from experiment_runner.parent.session import build_plan, check_requested, select_shard
from experiment_runner.parent.suites import suite_catalog
from benchmark_models.data_files import read_data

CUDA_HOST = HostCapabilities(cuda=True, cuda_device_count=1, torch_xla=True,
                             xla_accelerators=frozenset({"cpu", "cuda"}))
TPU_HOST = HostCapabilities(torch_xla=True, xla_accelerators=frozenset({"cpu", "tpu"}))
CPU_HOST = HostCapabilities(torch_xla=True, xla_accelerators=frozenset({"cpu"}))
PROFILING = ["--dump-dynamo-counters", "--collect-dynamo-counters", "--dump-pytorch-profiles",
             "--dump-pytorch-xla-metrics", "--profile-cuda-cpu", "--profile-cuda-cpu-individual-ops"]
XLA_TEST_CONFIG = ('{"accelerator":"%s","xla":"PJRT","dynamo":"openxla","test":"eval","torch_xla2":null,'
                   '"xla_flags":null,"keep_model_data_on_cuda":false,"enable_functionalization": %s}')

INVOCATIONS = {
    "README: alexnet on GPU": (CUDA_HOST, [
        "--dynamo=openxla", "--dynamo=inductor", "--xla=PJRT", "--xla=None", "--test=eval", "--test=train",
        "--suite-name=torchbench", "--accelerator=cuda", "--output-dirname=experiment_results", "--repeat=5",
        "--print-subprocess", "--no-resume", "--filter=^alexnet$"]),
    "README: a single configuration": (CUDA_HOST, [
        "--suite-name=torchbench", "--progress-bar", '--model-config={"model_name":"BERT_pytorch"}',
        '--experiment-config={"accelerator":"cuda","xla":"PJRT","xla_flags":null,"dynamo":"openxla",'
        '"torch_xla2":null,"test":"train","keep_model_data_on_cuda":false,"enable_functionalization":false}',
        "--repeat", "1"]),
    "README: verification": (CUDA_HOST, [
        "--xla=PJRT", "--dynamo=openxla", "--test=eval", "--filter=BERT_pytorch$", "--suite-name=torchbench",
        "--accelerator=cuda", "--progress-bar", "--output-dirname=/tmp/output", "--repeat=2", "--print-subprocess",
        "--no-resume", "--verify"]),
    "nightly.sh: openxla": (CUDA_HOST, [
        "--test=eval", "--test=train", "--xla=PJRT", "--dynamo=None", "--dynamo=openxla", "--suite-name=torchbench",
        "--accelerator=cuda", "--output-dirname=results", "--repeat=8", "--print-subprocess",
        "--timestamp=1700000000", *PROFILING]),
    "nightly.sh: inductor": (CUDA_HOST, [
        "--test=eval", "--test=train", "--xla=None", "--dynamo=inductor", "--suite-name=torchbench",
        "--accelerator=cuda", "--output-dirname=results", "--repeat=8", "--print-subprocess",
        "--timestamp=1700000000"]),
    "run_benchmark.sh: dry run": (CUDA_HOST, [
        "--suite-name=torchbench", "--accelerator=cuda", "--progress-bar", "--dry-run"]),
    "run_top_tier_bm.sh": (CUDA_HOST, [
        "--dynamo=inductor", "--dynamo=openxla", "--xla=None", "--xla=PJRT", "--test=eval", "--test=train",
        "--filter-by-tier=1", "--filter-by-tier=2", "--filter-by-tier=3", "--suite-name=torchbench",
        "--accelerator=cuda", "--output-dirname=out", "--repeat=5", "--print-subprocess", "--no-resume"]),
    "run_single_graph_bm.sh": (CUDA_HOST, [
        "--dynamo=inductor", "--dynamo=openxla", "--xla=None", "--xla=PJRT", "--test=eval",
        "--filter-by-single-graph", "--pure-wall-time", "--suite-name=torchbench", "--accelerator=cuda",
        "--output-dirname=out", "--repeat=5", "--print-subprocess", "--no-resume"]),
    "run_torchbench_tests.sh: TPU": (TPU_HOST, [
        "--suite-name=torchbench", "--experiment-config=" + XLA_TEST_CONFIG % ("tpu", "false"),
        '--model-config={"model_name":"dlrm"}']),
    "run_torchbench_tests.sh: CPU, functionalization": (CPU_HOST, [
        "--suite-name=torchbench", "--experiment-config=" + XLA_TEST_CONFIG % ("CPU", "true"),
        '--model-config={"model_name":"llama"}']),
    "defaults everywhere, shard 2 of 3, on a TPU host": (TPU_HOST, [
        "--suite-name=torchbench", "--total-partitions=3", "--partition-id=2"]),
    "dummy with flags crossed with xla": (CPU_HOST, [
        "--suite-name=dummy", "--filter=^dummy$", "--xla-flags=--xla_cpu_enable_fast_math=false",
        "--xla=None", "--xla=PJRT", "--xla=XRT", "--exclude-by-tier=1"]),
}

DIMENSIONS = ("accelerator", "xla", "xla_flags", "dynamo", "torch_xla2", "test", "keep_model_data_on_cuda",
              "enable_functionalization")


def reference_plan(argv: list[str], caps: HostCapabilities, names: list[str]) -> set[tuple]:
    # The same argparse surface; its values are read raw below (no single-config or tier rewriting).
    args = RunConfig.from_values(vars(build_parser().parse_args(argv))).matrix
    if args.experiment_config is not None:
        exp = json.loads(args.experiment_config)
        exp["accelerator"] = exp["accelerator"].lower()
        return {(json.loads(args.model_config)["model_name"], *(exp.get(k) for k in DIMENSIONS))}
    tiers = read_data("torchbench_tiers.json")["tiers"]
    filters = list(args.filter) + [f"^({'|'.join(tiers[str(t)])})$" for t in args.filter_by_tier]
    excludes = list(args.exclude) + [f"^({'|'.join(tiers[str(t)])})$" for t in args.exclude_by_tier]
    filters, excludes = filters or ["."], excludes or ["^$"]
    ordered = sorted(names)  # torchbenchmark._list_model_paths: sorted path strings, uppercase first
    size = len(ordered) // args.total_partitions
    end = (args.partition_id + 1) * size if args.partition_id < args.total_partitions - 1 else len(ordered)
    models = [n for n in ordered[args.partition_id * size:end]
              if re.search("|".join(filters), n, re.I) and not re.search("|".join(excludes), n, re.I)]
    choices = {
        "accelerator": set(args.accelerator or ["cpu", "cuda", "tpu"]),
        "xla": set(args.xla or [None, "PJRT", "XRT"]),
        "xla_flags": set(args.xla_flags or [None]),
        "dynamo": set(args.dynamo or [None, "inductor", "openxla"]),
        "torch_xla2": set(args.torch_xla2 or [None]),
        "test": set(args.test or ["eval", "train"]),
        "keep_model_data_on_cuda": {args.keep_model_data_on_cuda},
        "enable_functionalization": {args.enable_functionalization},
    }
    configs = [dict(zip(DIMENSIONS, values)) for values in product(*(choices[k] for k in DIMENSIONS))]
    return {(model, *(cfg[k] for k in DIMENSIONS)) for model in models for cfg in configs
            if reference_available(cfg, caps)}


def reference_available(cfg: dict, caps: HostCapabilities) -> bool:
    dynamo, acc, xla = cfg["dynamo"], cfg["accelerator"], cfg["xla"]
    if cfg["torch_xla2"] and dynamo is not None:
        return False
    if dynamo == "inductor" and (acc == "tpu" or xla is not None):
        return False
    if dynamo == "openxla" and xla is None:
        return False
    if not cfg["torch_xla2"] and xla is not None and acc not in caps.xla_accelerators:
        return False
    if (acc == "tpu" and xla is None) or (acc in ("cpu", "cuda") and xla == "XRT"):
        return False
    return not (cfg["keep_model_data_on_cuda"] and dynamo != "openxla")


def our_plan(argv: list[str], caps: HostCapabilities) -> tuple[set[tuple], list[str]]:
    args = parse_config(argv).matrix
    check_requested(args, caps)
    suite = suite_catalog(args.suite_name)
    if args.suite_name == "torchbench":  # the real package's names the invocations filter for, besides ours
        tiers = read_data("torchbench_tiers.json")["tiers"].values()
        names = sorted(set(suite.model_names) | {"alexnet"} | {n for tier in tiers for n in tier})
        suite = dataclasses.replace(suite, model_names=names)
    plan = build_plan(args, suite, select_shard(args, suite.model_names), caps)
    planned = {(p.experiment.model_name, *(getattr(p.experiment.config, k) for k in DIMENSIONS))
               for p in plan.planned}
    return planned, suite.model_names


@pytest.mark.parametrize("name", INVOCATIONS)
def test_reference_invocations_plan_the_same_experiments(name: str) -> None:
    caps, argv = INVOCATIONS[name]
    ours, names = our_plan(argv, caps)
    reference = reference_plan(argv, caps, names)
    # The deliberate differences (docs/compatibility.md): XRT, which the reference plans on TPU
    # hosts, torch_xla2 and keep_model_data_on_cuda, which this runner has no path for, are
    # dropped; and CUDA experiments on a host without CUDA, which the reference plans (to
    # fail), are dropped too.
    reference = {e for e in reference if e[2] != "XRT" and e[5] is None and not e[7] and (caps.cuda or e[1] != "cuda")}
    assert ours == reference
    assert ours, "every invocation plans something here"


def test_a_request_the_reference_rejects_is_rejected() -> None:
    """run_benchmark.sh's comment runs --accelerator=gpu: not a choice there either."""
    with pytest.raises(UsageError, match="invalid choice: 'gpu'"):
        build_parser().parse_args(["--suite-name=torchbench", "--accelerator=gpu"])


# Every flag of the reference's parse_args, with a value of its type and choices.
REFERENCE_FLAGS = [
    "--suite-name=torchbench", "--filter=a", "-k", "a", "--exclude=b", "-x", "b", "--filter-by-tier=1",
    "--exclude-by-tier=3", "--log-level=debug", "--accelerator=cpu", "--xla=PJRT", "--xla=XRT", "--xla=None",
    "--dynamo=None", "--dynamo=inductor", "--dynamo=openxla", "--test=eval", "--repeat=3", "--iterations-per-run=2",
    "--batch-size=4", "--total-partitions=2", "--partition-id=1", "--enable-functionalization", "--dry-run",
    "--print-subprocess", "--subprocess-timeout=60", "--progress-bar", "--randomize-input",
    "--collect-full-output", "--save-output", "--output-dirname=out", "--output-basename=r.jsonl", "--no-resume",
    "--dump-hlo", "--dump-dynamo-counters", "--collect-dynamo-counters", "--dump-pytorch-profiles",
    "--dump-pytorch-xla-metrics", "--profile-cuda-cpu", "--profile-cuda-cpu-individual-ops",
    "--xla-flags=--xla_dump_to=/tmp/x", "--torch-xla2=extract_jax", "--torch-xla2=torch_export", "--disable-tf32",
    "--matmul-precision=default", "--matmul-precision=high", "--matmul-precision=highest", "--timestamp=1.5",
    "--pure-wall-time", "--filter-by-single-graph", "--verify", "--verify-iterations=2", "--no-skip",
    "--profile-xla-duration-ms=100", "--save-ir-format=stablehlo", "--keep-model-data-on-cuda",
]


def test_every_reference_flag_parses_with_its_values_and_is_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    config = parse_config(REFERENCE_FLAGS)
    assert (config.session.log_level, config.session.timestamp, config.matrix.torch_xla2) == (
        "debug", 1.5, ("extract_jax", "torch_export"))
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    help_text = capsys.readouterr().out
    for flag in {f.split("=")[0] for f in REFERENCE_FLAGS if f.startswith("--")} | {"--profile-xla"}:
        assert flag in help_text, flag
    with pytest.raises(UsageError, match="one profiling path at a time"):
        parse_config(["--suite-name=dummy", "--profile-xla", "--profile-cuda-cpu"])


@pytest.mark.parametrize("argv, message", [
    (["--experiment-config={}"], "go together"),
    (["--experiment-config=[1]", '--model-config={"model_name": "m"}'], "must be a JSON object"),
    (["--experiment-config={nope", '--model-config={"model_name": "m"}'], "not valid JSON"),
    (['--experiment-config={"accelerator": "cpu"}', '--model-config={"model_name": "m"}'], "missing dynamo"),
    (['--experiment-config={"accelerator": "gpu", "xla": null, "dynamo": null, "test": "eval"}',
      '--model-config={"model_name": "m"}'], "unknown accelerator 'gpu'"),
])
def test_bad_single_configs_are_one_line_errors(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_config(["--suite-name=dummy", *argv])


def test_child_environment_follows_the_reference(tmp_path) -> None:
    """XLA_DISABLE_FUNCTIONALIZATION=1 for xla children unless --enable-functionalization;
    XLA_FLAGS for every experiment that has them, xla or not."""
    from experiment_runner.core.matrix import Experiment, ExperimentConfig
    from experiment_runner.core.options import RunOptions
    from experiment_runner.core.protocol import Task
    from experiment_runner.parent.launch.env import child_environment

    def env_of(**config: object) -> dict[str, str]:
        fields = dict(accelerator="cpu", xla="PJRT", xla_flags=None, dynamo=None, test="eval", precision="fp32")
        task = Task(Experiment("dummy", "dummy", ExperimentConfig(**{**fields, **config})),  # type: ignore[arg-type]
                    RunOptions(), str(tmp_path))
        return child_environment(task, base={"XLA_DISABLE_FUNCTIONALIZATION": "0"})

    assert env_of()["XLA_DISABLE_FUNCTIONALIZATION"] == "1"
    assert "XLA_DISABLE_FUNCTIONALIZATION" not in env_of(enable_functionalization=True)
    assert "XLA_DISABLE_FUNCTIONALIZATION" not in env_of(xla=None)
    assert env_of(xla=None, xla_flags="--xla_dump_to=/tmp/d")["XLA_FLAGS"] == "--xla_dump_to=/tmp/d"
