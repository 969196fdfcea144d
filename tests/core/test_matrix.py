"""The matrix is pure: expansion, validity reasons, filters, order and shards."""

import re

import pytest

from experiment_runner.core.matrix import (
    ExperimentConfig,
    HostCapabilities,
    MatrixChoices,
    SkipRule,
    compile_patterns,
    configurations,
    expand,
    invalid_reason,
    select_models,
)

CPU_ONLY = HostCapabilities()
EVERYTHING = HostCapabilities(cuda=True, cuda_device_count=1, torch_xla=True,
                              xla_accelerators=frozenset({"cpu", "cuda", "tpu"}),
                              dynamo_backends=frozenset({"inductor", "aot_eager"}))


def config(**overrides) -> ExperimentConfig:
    base = dict(accelerator="cpu", xla=None, xla_flags=None, dynamo=None, test="eval", precision="fp32")
    return ExperimentConfig(**{**base, **overrides})


def test_reference_example_expands_to_eight_configurations_per_model():
    plan = expand("torchbench", ["dlrm", "llama"], MatrixChoices(accelerators=["cuda"]), EVERYTHING)
    runs = [(e.model_name, e.config.xla, e.config.dynamo, e.config.test) for e in plan.to_run]
    assert runs[:8] == [
        ("dlrm", None, None, "eval"), ("dlrm", None, None, "train"),
        ("dlrm", None, "inductor", "eval"), ("dlrm", None, "inductor", "train"),
        ("dlrm", "PJRT", None, "eval"), ("dlrm", "PJRT", None, "train"),
        ("dlrm", "PJRT", "openxla", "eval"), ("dlrm", "PJRT", "openxla", "train"),
    ]
    assert len(runs) == 16


@pytest.mark.parametrize("overrides, reason", [
    (dict(accelerator="tpu"), "tpu requires xla=PJRT"),
    (dict(accelerator="cuda"), "cuda requires torch.cuda.is_available()"),
    (dict(dynamo="inductor", xla="PJRT"), "inductor requires xla=None"),
    (dict(dynamo="openxla"), "openxla requires xla=PJRT"),
    (dict(xla="PJRT"), "xla=PJRT requires torch_xla, which is not importable"),
    (dict(dynamo="no_such_backend"), "dynamo backend 'no_such_backend' is not in torch._dynamo.list_backends()"),
])
def test_each_invalid_combination_has_its_reason(overrides, reason):
    assert invalid_reason(config(**overrides), CPU_ONLY) == reason


def test_xla_needs_a_pjrt_device_for_that_accelerator():
    caps = HostCapabilities(torch_xla=True, xla_accelerators=frozenset({"cpu"}))
    assert invalid_reason(config(xla="PJRT"), caps) is None
    assert invalid_reason(config(accelerator="tpu", xla="PJRT"), caps) == \
        "xla=PJRT found no PJRT device for accelerator tpu"


def test_inductor_on_tpu_is_dropped_even_with_xla_none_reason_first():
    assert invalid_reason(config(accelerator="tpu", xla="PJRT", dynamo="inductor"), EVERYTHING) == \
        "inductor requires xla=None"


def test_dropped_combinations_keep_their_reason():
    plan = expand("dummy", ["m"], MatrixChoices(), CPU_ONLY)
    assert len(plan.to_run) == 4
    assert {d.reason for d in plan.dropped} >= {"openxla requires xla=PJRT", "tpu requires xla=PJRT"}
    assert len(plan.to_run) + len(plan.dropped) == len(configurations(MatrixChoices()))


def test_filters_are_case_insensitive_ored_regexes_and_excludes_win():
    names = ["llama", "llama_v2_7b", "BERT_pytorch", "resnet50", "nanogpt"]
    assert select_models(names, compile_patterns(["^LLAMA$", "bert"])) == ["BERT_pytorch", "llama"]
    assert select_models(names, compile_patterns(["llama"]), compile_patterns(["7b"])) == ["llama"]
    with pytest.raises(re.error):
        compile_patterns(["("])


@pytest.mark.parametrize("round_robin", [False, True])
def test_shards_partition_the_sorted_models_without_overlap(round_robin: bool):
    names = [f"m{i:02d}" for i in range(11)]
    shards = [select_models(names, total_partitions=3, partition_id=i, round_robin=round_robin) for i in range(3)]
    assert sorted(sum(shards, [])) == sorted(names)
    assert all(set(a).isdisjoint(b) for a in shards for b in shards if a is not b)
    assert shards[0] == select_models(list(reversed(names)), total_partitions=3, partition_id=0,
                                      round_robin=round_robin)


def test_shards_slice_the_listing_in_code_point_order_as_torchbenchmark_lists_it():
    """torchbenchmark's _list_model_paths sorts paths as strings (uppercase first) and lists every
    folder, so a checkout's __pycache__ moves the reference's block boundaries: ours must move too."""
    names = ["alexnet", "BERT_pytorch", "Background_Matting", "dlrm", "llama"]
    assert select_models(names) == ["BERT_pytorch", "Background_Matting", "alexnet", "dlrm", "llama"]
    assert [select_models(names, total_partitions=3, partition_id=i) for i in range(3)] == [
        ["BERT_pytorch"], ["Background_Matting"], ["alexnet", "dlrm", "llama"]]
    listing = [*names, "__pycache__"]
    assert [select_models(names, total_partitions=3, partition_id=i, listing=listing) for i in range(3)] == [
        ["BERT_pytorch", "Background_Matting"], ["alexnet"], ["dlrm", "llama"]]
    assert select_models(names, total_partitions=3, partition_id=1, round_robin=True, listing=listing) == \
        ["Background_Matting", "llama"], "round-robin deals the models, whatever the listing"


def test_default_shards_are_the_reference_runners_contiguous_blocks_of_the_unfiltered_list():
    """get_benchmark_indices: block i of len // N models, the last block takes the rest; the
    filters apply afterwards, so a filter never moves a model to another shard."""
    names = [f"m{i:02d}" for i in range(11)]
    assert [select_models(names, total_partitions=3, partition_id=i) for i in range(3)] == [
        names[0:3], names[3:6], names[6:11]]
    odd = compile_patterns(["[13579]$"])
    assert select_models(names, odd, total_partitions=3, partition_id=0) == ["m01"]
    assert select_models(names, odd, total_partitions=3, partition_id=0, round_robin=True) == ["m01", "m07"]


def test_order_is_deterministic_whatever_the_input_order():
    a = expand("s", select_models(["b", "a", "c"]), MatrixChoices(), CPU_ONLY)
    b = expand("s", select_models(["c", "a", "b"]), MatrixChoices(), CPU_ONLY)
    assert [e.experiment_id for e in a.to_run] == [e.experiment_id for e in b.to_run]
    assert [e.model_name for e in a.to_run][:4] == ["a"] * 4


def test_skip_rules_become_skipped_entries_unless_no_skip():
    rules = [SkipRule(model="m", test="train", reason="cannot train")]
    plan = expand("s", ["m"], MatrixChoices(dynamo=[None]), CPU_ONLY, rules)
    assert [(p.experiment.config.test, p.skip_reason) for p in plan.planned] == \
        [("eval", None), ("train", "cannot train")]
    assert all(p.skip_reason is None for p in expand("s", ["m"], MatrixChoices(), CPU_ONLY, rules, True).planned)


def test_precision_defaults_per_accelerator_and_test():
    configs = configurations(MatrixChoices(accelerators=["cuda"], xla=[None], dynamo=[None]))
    assert [(c.test, c.precision) for c in configs] == [("eval", "bf16"), ("train", "amp")]
    cpu = configurations(MatrixChoices(accelerators=["cpu"], xla=[None], dynamo=[None]))
    assert [(c.test, c.precision) for c in cpu] == [("eval", "bf16"), ("train", "fp32")], \
        "the reference converts inference to bf16 on a CPU too, and uses no AMP there"
    assert configurations(MatrixChoices(accelerators=["cpu"], xla=[None], dynamo=[None], tests=["eval"],
                                        default_precision="fp32"))[0].precision == "fp32"
    explicit = configurations(MatrixChoices(accelerators=["cpu"], xla=[None], dynamo=[None], tests=["eval"],
                                            precisions=["bf16", "fp32"]))
    assert [c.precision for c in explicit] == ["bf16", "fp32"]


def test_xla_flags_are_crossed_with_every_xla_value_as_in_the_reference():
    configs = configurations(MatrixChoices(accelerators=["cpu"], dynamo=[None], tests=["eval"],
                                           xla_flags=["--a=1", "--b=2"]))
    assert [(c.xla, c.xla_flags) for c in configs] == [(None, "--a=1"), (None, "--b=2"), ("PJRT", "--a=1"),
                                                       ("PJRT", "--b=2")]


def test_reference_only_values_are_planned_and_dropped_with_their_rules():
    plan = expand("dummy", ["dummy"], MatrixChoices(accelerators=["cpu", "tpu"], xla=[None, "PJRT", "XRT"],
                                                    dynamo=[None, "openxla"], tests=["eval"]), EVERYTHING)
    assert all(p.experiment.config.xla != "XRT" for p in plan.planned)
    assert any("XRT was removed" in d.reason for d in plan.dropped)
    xla2 = configurations(MatrixChoices(accelerators=["cpu"], xla=["PJRT"], dynamo=[None, "openxla"],
                                        tests=["eval"], torch_xla2=["torch_export"]))
    reasons = [invalid_reason(c, HostCapabilities()) for c in xla2]
    assert reasons[1] == "torch_xla2 runs without dynamo" and reasons[0].startswith("torch_xla2 (torchax) has no path")
    keep = configurations(MatrixChoices(accelerators=["cuda"], xla=["PJRT"], dynamo=[None, "openxla"],
                                        tests=["eval"], keep_model_data_on_cuda=True))
    reasons = [invalid_reason(c, EVERYTHING) for c in keep]
    assert reasons[0] == "keep_model_data_on_cuda requires dynamo=openxla"
    assert reasons[1].startswith("keep_model_data_on_cuda is an XLA:CUDA path PyTorch/XLA removed")
    assert keep[1].key().endswith("-keep_model_data_on_cuda") and not keep[1].key().count("functionalization")
    dead_ends = expand("dummy", ["dummy"], MatrixChoices(accelerators=["cpu"], xla=["PJRT"], dynamo=[None],
                                                         tests=["eval"], torch_xla2=["torch_export"]), EVERYTHING)
    assert not dead_ends.planned and len(dead_ends.dropped) == 1


def test_experiment_ids_and_dirnames_are_stable_and_safe():
    plan = expand("torchbench", ["weird/name with spaces"], MatrixChoices(dynamo=[None], tests=["eval"]), CPU_ONLY)
    exp = plan.to_run[0]
    assert exp.experiment_id == "torchbench/weird/name with spaces/cpu-None-None-eval-bf16-bsdefault"
    assert re.fullmatch(r"[A-Za-z0-9_.-]+", exp.dirname)
    assert exp.dirname == expand("torchbench", ["weird/name with spaces"],
                                 MatrixChoices(dynamo=[None], tests=["eval"]), CPU_ONLY).to_run[0].dirname


@pytest.mark.parametrize("overrides, reason", [
    (dict(dynamo="inductor", compile_options="reduce-overhead"),
     "compile options 'reduce-overhead' use CUDA graphs, which need accelerator cuda"),
    (dict(dynamo="aot_eager", compile_options="max-autotune"),
     "compile options 'max-autotune' are inductor's; dynamo=aot_eager does not take them"),
    (dict(dynamo="inductor", compile_options="freezing", test="train"),
     "compile options 'freezing' are for inference only (test eval), as in PyTorch's harness"),
    (dict(dynamo="inductor", compile_options="aot-inductor-freezing", test="train"),
     "compile options 'aot-inductor-freezing' are for inference only (test eval), as in PyTorch's harness"),
    (dict(dynamo="aot_eager", compile_options="aot-inductor"),
     "compile options 'aot-inductor' are inductor's; dynamo=aot_eager does not take them"),
])
def test_compile_options_that_cannot_apply_are_dropped_with_their_reason(overrides, reason):
    assert invalid_reason(config(**overrides), EVERYTHING) == reason


def test_compile_options_are_a_dimension_of_dynamo_experiments_and_default_ids_stay():
    choices = MatrixChoices(accelerators=["cpu"], xla=[None], dynamo=[None, "inductor", "aot_eager"], tests=["eval"],
                            compile_options=["default", "max-autotune", "dynamic", "freezing"],
                            default_precision="fp32")
    plan = expand("dummy", ["m"], choices, EVERYTHING)
    ids = [e.experiment_id for e in plan.to_run]
    assert ids == [
        "dummy/m/cpu-None-None-eval-fp32-bsdefault",  # eager: one baseline, whatever the options
        "dummy/m/cpu-None-inductor-eval-fp32-bsdefault",  # the default options keep the id it always had
        "dummy/m/cpu-None-inductor-eval-fp32-bsdefault-max-autotune",
        "dummy/m/cpu-None-inductor-eval-fp32-bsdefault-dynamic",
        "dummy/m/cpu-None-inductor-eval-fp32-bsdefault-freezing",
        "dummy/m/cpu-None-aot_eager-eval-fp32-bsdefault",
        "dummy/m/cpu-None-aot_eager-eval-fp32-bsdefault-dynamic",
    ]
    dropped = {(d.config.dynamo, d.config.compile_options): d.reason for d in plan.dropped}
    assert set(dropped) == {("aot_eager", "max-autotune"), ("aot_eager", "freezing")}
    assert plan.to_run[2].config.label().endswith("compile=max-autotune")
