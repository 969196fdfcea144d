"""The huggingface and timm suites hold PyTorch's dynamo harness lists, sizes and rules as data
(pytorch/benchmark userbenchmark/dynamo/dynamobench @ 0e83c440): pure checks, no model is loaded."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from experiment_runner.core.matrix import (
    Experiment, ExperimentConfig, HostCapabilities, MatrixChoices, compile_patterns, expand, select_models,
)
from benchmark_models.base import LoadRequest
from benchmark_models.registry import get_suite

# huggingface_models_list.txt (GPU) and huggingface_models_list_cpu.txt @ 0e83c440.
HF_GPU_LIST = [
    "AlbertForMaskedLM", "AllenaiLongformerBase", "BartForCausalLM", "BertForMaskedLM", "BlenderbotForCausalLM",
    "BlenderbotForConditionalGeneration", "DebertaV2ForMaskedLM", "DistilBertForMaskedLM", "DistillGPT2",
    "ElectraForCausalLM", "GPT2ForSequenceClassification", "GPTJForCausalLM", "GPTJForQuestionAnswering",
    "GPTNeoForCausalLM", "GPTNeoForSequenceClassification", "GoogleFnet", "LayoutLMForMaskedLM",
    "M2M100ForConditionalGeneration", "MBartForCausalLM", "MT5ForConditionalGeneration", "MegatronBertForCausalLM",
    "MobileBertForMaskedLM", "OPTForCausalLM", "PLBartForCausalLM", "PegasusForCausalLM", "RobertaForCausalLM",
    "T5ForConditionalGeneration", "T5Small", "TrOCRForCausalLM", "XGLMForCausalLM", "XLNetLMHeadModel",
    "YituTechConvBert", "meta-llama/Llama-3.2-1B", "google/gemma-2-2b", "google/gemma-3-4b-it", "openai/whisper-tiny",
    "Qwen/Qwen3-0.6B", "mistralai/Mistral-7B-Instruct-v0.3", "openai/gpt-oss-20b",
]
# pytorch/pytorch#164815 took these off the list (huggingface_models_list.txt @ 0fb2b95f had 55).
HF_PRUNED = {
    "AlbertForQuestionAnswering", "BartForConditionalGeneration", "BertForQuestionAnswering",
    "BlenderbotSmallForCausalLM", "BlenderbotSmallForConditionalGeneration", "CamemBert",
    "DebertaV2ForQuestionAnswering", "DistilBertForQuestionAnswering", "ElectraForQuestionAnswering",
    "LayoutLMForSequenceClassification", "MBartForConditionalGeneration", "MegatronBertForQuestionAnswering",
    "MobileBertForQuestionAnswering", "PLBartForConditionalGeneration", "PegasusForConditionalGeneration",
    "RobertaForQuestionAnswering",
}
PRUNED_REASON = ("removed from PyTorch's huggingface_models_list.txt by pytorch/pytorch#164815 (2025-10-08), so its "
                 "dashboard no longer runs it; --no-skip runs it")
HF_GPU_ONLY = {"BlenderbotForConditionalGeneration", "GPTJForCausalLM", "GPTJForQuestionAnswering", "GPTNeoForCausalLM",
               "GPTNeoForSequenceClassification", "meta-llama/Llama-3.2-1B", "google/gemma-2-2b",
               "google/gemma-3-4b-it", "openai/whisper-tiny", "Qwen/Qwen3-0.6B",
               "mistralai/Mistral-7B-Instruct-v0.3", "openai/gpt-oss-20b"}
# huggingface.yaml skip.all (Reformer, on neither list, left out) and skip.device.cpu.
HF_SKIP_ALL = {"BlenderbotForConditionalGeneration", "GPTNeoForCausalLM", "GPTNeoForSequenceClassification",
               "DebertaV2ForMaskedLM", "GPTJForCausalLM", "GPTJForQuestionAnswering", "google/gemma-3-4b-it",
               "openai/gpt-oss-20b", "mistralai/Mistral-7B-Instruct-v0.3"}
HF_SKIP_CPU = {"meta-llama/Llama-3.2-1B", "google/gemma-2-2b", "google/gemma-3-4b-it", "openai/whisper-tiny",
               "Qwen/Qwen3-0.6B", "mistralai/Mistral-7B-Instruct-v0.3", "openai/gpt-oss-20b"}
TIMM_LIST = [
    "adv_inception_v3", "beit_base_patch16_224", "convnextv2_nano.fcmae_ft_in22k_in1k",
    "deit_base_distilled_patch16_224", "deit_tiny_patch16_224.fb_in1k", "dm_nfnet_f0", "ghostnet_100", "inception_v3",
    "mobilenetv2_100", "mobilenetv3_large_100", "mobilevit_s", "nfnet_l0", "repvgg_a2", "swin_base_patch4_window7_224",
    "tf_efficientnet_b0", "visformer_small", "vit_base_patch14_dinov2.lvd142m", "vit_base_patch16_siglip_256",
]


def config(accelerator: str = "cpu", test: str = "eval") -> ExperimentConfig:
    return ExperimentConfig(accelerator=accelerator, xla=None, xla_flags=None, dynamo=None, test=test, precision="fp32")


def skip_reason(suite: str, model: str, accelerator: str = "cpu", test: str = "eval") -> str | None:
    exp = Experiment(suite, model, config(accelerator, test))
    return next((r.reason for r in get_suite(suite).skip_rules() if r.matches(exp)), None)


def default_batch_size(suite: str, model: str, accelerator: str, test: str = "eval") -> int:
    return get_suite(suite).batch_size(LoadRequest(model, test, "cpu", accelerator, "fp32"))


def test_huggingface_holds_the_harness_gpu_list_and_the_models_pruned_from_it():
    assert sorted(get_suite("huggingface").model_names()) == sorted([*HF_GPU_LIST, *HF_PRUNED])


@pytest.mark.parametrize("accelerator", ["cpu", "cuda", "tpu"])
def test_huggingface_pruned_models_are_skipped_everywhere_with_the_pr(accelerator):
    for model in HF_PRUNED:
        for test in ("eval", "train"):
            assert skip_reason("huggingface", model, accelerator, test) == PRUNED_REASON, model


@pytest.mark.parametrize("model, cuda, cpu", [
    ("BertForQuestionAnswering", 16, 16),  # GPU list 32 / divisor 2; CPU list 16
    ("DebertaV2ForQuestionAnswering", 1, 2),  # 8 / 8; CPU list 2
    ("BlenderbotSmallForCausalLM", 64, 64),  # 256 / 4; CPU list 64
    ("ElectraForQuestionAnswering", 64, 8),
])
def test_huggingface_pruned_models_keep_the_pre_prune_sizes(model, cuda, cpu):
    assert default_batch_size("huggingface", model, "cuda") == cuda
    assert default_batch_size("huggingface", model, "cpu") == cpu


def test_timm_holds_exactly_the_harness_list():
    assert sorted(get_suite("timm").model_names()) == sorted(TIMM_LIST)


@pytest.mark.parametrize("accelerator", ["cpu", "cuda", "tpu"])
def test_huggingface_skip_all_skips_everywhere_and_names_the_rule(accelerator):
    for model in HF_SKIP_ALL:
        for test in ("eval", "train"):
            assert "huggingface.yaml (skip.all" in skip_reason("huggingface", model, accelerator, test), model
    assert "model too big" in skip_reason("huggingface", "openai/gpt-oss-20b", accelerator)


def test_huggingface_cpu_skips_and_the_cpu_list():
    for model in HF_SKIP_CPU - HF_SKIP_ALL:
        assert skip_reason("huggingface", model) == "skipped on CPU by PyTorch's huggingface.yaml (skip.device.cpu)"
        assert skip_reason("huggingface", model, "cuda") is None
    planned_on_cpu = {m for m in HF_GPU_LIST if skip_reason("huggingface", m) is None}
    assert planned_on_cpu == set(HF_GPU_LIST) - HF_SKIP_ALL - HF_SKIP_CPU
    assert not planned_on_cpu & HF_GPU_ONLY, "every model planned on CPU is on the CPU list"
    rules = get_suite("huggingface").skip_rules()
    not_listed = {r.model for r in rules if "huggingface_models_list_cpu.txt" in r.reason}
    assert not_listed == HF_GPU_ONLY and all(r.accelerator == "cpu" for r in rules if r.model in not_listed
                                             and "huggingface_models_list_cpu.txt" in r.reason)


def test_huggingface_llm_entries_are_not_trained():
    assert "generate()" in skip_reason("huggingface", "Qwen/Qwen3-0.6B", "cuda", "train")
    assert skip_reason("huggingface", "Qwen/Qwen3-0.6B", "cuda", "eval") is None
    assert skip_reason("huggingface", "T5Small", "cuda", "train") is None


@pytest.mark.parametrize("model, cuda, cpu", [
    ("AlbertForMaskedLM", 4, 4),  # GPU list 8 / divisor 2; CPU list 4
    ("BlenderbotForCausalLM", 4, 32),  # 32 / 8; the CPU list's size skips the divisor
    ("DistilBertForMaskedLM", 128, 128),  # 256 / 2; CPU list 128
    ("T5Small", 4, 1),
    ("OPTForCausalLM", 2, 2),
    ("meta-llama/Llama-3.2-1B", 1, 1),  # 8 / 8; not on the CPU list: the GPU size after its divisor
    ("GPTJForCausalLM", 1, 1),  # 1, no divisor
])
def test_huggingface_batch_sizes_per_list_and_divisor(model, cuda, cpu):
    for test in ("eval", "train"):  # huggingface.py divides whenever no batch size is given
        assert default_batch_size("huggingface", model, "cuda", test) == cuda
        assert default_batch_size("huggingface", model, "tpu", test) == cuda
        assert default_batch_size("huggingface", model, "cpu", test) == cpu
    suite = get_suite("huggingface")
    assert suite.batch_size(LoadRequest(model, "eval", "cpu", "cpu", "fp32", batch_size=3)) == 3


@pytest.mark.parametrize("model, length", [
    ("DistilBertForMaskedLM", 128), ("TrOCRForCausalLM", 256), ("OPTForCausalLM", 2048),
    ("AllenaiLongformerBase", 1024), ("MT5ForConditionalGeneration", 128), ("T5Small", 1024),
    ("BlenderbotForCausalLM", 128), ("GoogleFnet", 512), ("Qwen/Qwen3-0.6B", 1000), ("openai/whisper-tiny", 3000),
])
def test_huggingface_sequence_lengths_are_the_harness(model, length):
    assert get_suite("huggingface").entry(model)["sequence_length"] == length


def test_huggingface_hub_configs_ship_with_their_source():
    suite = get_suite("huggingface")
    for model in suite.model_names():
        entry = suite.entry(model)
        if "hub_config" in entry:
            hub = suite._data["hub_configs"][entry["hub_config"]]
            assert hub["source"] == f"https://huggingface.co/{entry['hub_config']}/blob/main/config.json"
            assert hub["model_type"] and hub["values"] and hub["confirmed"]
    assert suite.eval_precisions() == {"GoogleFnet": "fp32"}


@pytest.mark.parametrize("model, cuda, cpu", [
    ("beit_base_patch16_224", 64, 64), ("swin_base_patch4_window7_224", 64, 64), ("mobilevit_s", 64, 256),
    ("ghostnet_100", 512, 128), ("mobilenetv2_100", 128, 32),
    ("vit_base_patch16_siglip_256", 128, 128),  # the CPU list misnames it: the GPU list's size
])
def test_timm_batch_sizes_per_list_and_divisor(model, cuda, cpu):
    assert default_batch_size("timm", model, "cuda") == cuda
    assert default_batch_size("timm", model, "cpu") == cpu


def test_timm_skips_nothing_on_cpu_or_cuda():
    assert all(skip_reason("timm", m, acc) is None for m in TIMM_LIST for acc in ("cpu", "cuda"))


@pytest.mark.parametrize("suite, model", [("huggingface", "meta-llama/Llama-3.2-1B"),
                                          ("huggingface", "mistralai/Mistral-7B-Instruct-v0.3"),
                                          ("timm", "vit_base_patch14_dinov2.lvd142m")])
def test_names_with_slash_and_dot_make_safe_ids_folders_and_filters(suite, model):
    exp = Experiment(suite, model, config())
    assert exp.experiment_id == f"{suite}/{model}/{config().key()}"
    assert "/" not in exp.dirname and re.fullmatch(r"[A-Za-z0-9_.-]+", exp.dirname)
    assert exp.dirname not in (".", "..") and not exp.dirname.startswith(".")
    lookalike = Experiment(suite, model.replace("/", "_").replace(".", "x"), config())
    assert lookalike.dirname != exp.dirname
    names = get_suite(suite).model_names() + [model.replace(".", "x")]
    assert select_models(names, compile_patterns([f"^{model}$"])) == sorted({model, model.replace(".", "x")})
    assert select_models(names, compile_patterns([f"^{re.escape(model)}$"])) == [model]


def test_dry_run_plan_on_a_cpu_host_is_the_harness_list_with_named_skips():
    suite = get_suite("huggingface")
    choices = MatrixChoices(accelerators=["cpu"], xla=[None], dynamo=[None], tests=["eval"])
    plan = expand("huggingface", suite.model_names(), choices, HostCapabilities(), suite.skip_rules())
    reasons = {p.experiment.model_name: p.skip_reason for p in plan.planned}
    assert sorted(reasons) == sorted([*HF_GPU_LIST, *HF_PRUNED])
    assert {m for m, r in reasons.items() if r} == HF_SKIP_ALL | HF_SKIP_CPU | HF_PRUNED
    assert all("huggingface.yaml" in r for m, r in reasons.items() if r and m not in HF_PRUNED)
    assert all(reasons[m] == PRUNED_REASON for m in HF_PRUNED)
    no_skip = expand("huggingface", suite.model_names(), choices, HostCapabilities(), suite.skip_rules(), no_skip=True)
    assert not any(p.skip_reason for p in no_skip.planned), "--no-skip runs the pruned models too"


@pytest.mark.e2e
def test_huggingface_dry_run_on_cpu_plans_or_skips_the_harness_list_with_reasons(tmp_path: Path):
    """The CLI shows all 55 models; those huggingface.yaml skips on CPU, and the 16 pruned from the
    list, are skipped with the rule."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", XDG_CACHE_HOME=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-m", "experiment_runner", "--suite-name=huggingface", "--dry-run",
                           "--accelerator=cpu", "--dynamo=None", "--test=eval", f"--output-dirname={tmp_path / 'out'}"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [line.split(". ", 1)[1] for line in proc.stdout.splitlines() if re.match(r"\s*\d+\. ", line)]
    shown = {line.split(":", 1)[0]: line for line in lines}
    assert sorted(shown) == sorted([*HF_GPU_LIST, *HF_PRUNED])
    assert {name for name, line in shown.items() if "[skipped: " in line} == HF_SKIP_ALL | HF_SKIP_CPU | HF_PRUNED
    for name in HF_SKIP_CPU - HF_SKIP_ALL:
        assert "huggingface.yaml (skip.device.cpu)" in shown[name]
    assert all(PRUNED_REASON in shown[name] for name in HF_PRUNED)


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline, and any connection attempt fails loudly."""
    import socket

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(socket.socket, "connect", refuse)


def test_every_hub_config_builds_offline_with_the_installed_transformers(no_network):
    """The shipped configurations are valid for transformers (models are not built: gpt-oss-20b
    has 21B parameters)."""
    from benchmark_models.optional import require

    transformers = require("transformers")
    suite = get_suite("huggingface")
    for model in suite.model_names():
        entry = suite.entry(model)
        if "hub_config" not in entry:
            continue
        values = suite._data["hub_configs"][entry["hub_config"]]["values"]
        built = suite.build_config(entry, transformers)
        text = built.get_text_config()
        for key in ("num_hidden_layers", "hidden_size", "vocab_size", "d_model", "encoder_layers"):
            if key in values:
                assert getattr(built, key) == values[key], (model, key)
        if "text_config" in values:
            assert text.num_hidden_layers == values["text_config"]["num_hidden_layers"]


def test_a_timm_pretrained_tag_downloads_nothing(no_network):
    from benchmark_models.timm_models import TimmSuite

    loaded = TimmSuite().load(LoadRequest("deit_tiny_patch16_224.fb_in1k", "eval", "cpu", "cpu", "fp32", batch_size=1))
    assert loaded.args[0].shape == (1, 3, 224, 224)


def test_a_model_type_unknown_to_transformers_is_skipped_with_the_reason():
    from types import SimpleNamespace

    from benchmark_models.base import ModelSkipped

    suite = get_suite("huggingface")
    old = SimpleNamespace(CONFIG_MAPPING={}, __version__="4.40.0")
    with pytest.raises(ModelSkipped, match=r"'gpt_oss' model, which transformers 4\.40\.0 does not know"):
        suite.build_config(suite.entry("openai/gpt-oss-20b"), old)


def test_an_llm_entry_says_it_times_a_forward_pass_not_the_harness_s_generate():
    """Its record's environment.timed_step keeps export from writing its speedup as the harness's."""
    from benchmark_models import get_suite
    from benchmark_models.base import LoadRequest
    from benchmark_models.huggingface import LLM_FORWARD_ONLY

    suite = get_suite("huggingface")
    llm = suite.load(LoadRequest("openai/whisper-tiny", "eval", "cpu", "cuda", "fp32", batch_size=1))
    assert llm.provenance["timed_step"] == LLM_FORWARD_ONLY and "generate()" in LLM_FORWARD_ONLY
    plain = suite.load(LoadRequest("GoogleFnet", "eval", "cpu", "cpu", "fp32", batch_size=1))
    assert "timed_step" not in plain.provenance
