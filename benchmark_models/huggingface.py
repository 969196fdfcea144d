"""`huggingface`: every model of PyTorch's huggingface benchmark lists, offline, random weights.

The 16 models pytorch/pytorch#164815 took off those lists are kept, skipped unless --no-skip.

Most models are built from their config class's defaults, as PyTorch's harness builds them.
The harness reads a published config.json from the hub for a few (its EXTRA_MODELS and LLM
entries); those configurations ship as data (data/huggingface.json `hub_configs`) and are built
with `AutoConfig.for_model`, so nothing is downloaded (HF_HUB_OFFLINE=1 works). Inputs follow
the harness: random int64 token ids of a per-model sequence length, labels that fit the head,
`use_cache` off, and the model's own loss (the first output, since labels are always passed).

The harness's rules (skip lists, batch-size divisors, the CPU list's sizes) are data too; see
`HuggingFaceSuite.skip_rules` and `HuggingFaceSuite.batch_size`.
"""

from __future__ import annotations

from typing import Any

from experiment_runner.core.matrix import SkipRule
from benchmark_models.base import DataFileSuite, LoadRequest, ModelSkipped, harness_batch_size
from benchmark_models.model import BenchmarkModel
from benchmark_models.optional import require
from benchmark_models.training import recipe_for

_ALL = "skipped on every configuration by PyTorch's huggingface.yaml (skip.all: {why})"
_CPU = "skipped on CPU by PyTorch's huggingface.yaml (skip.device.cpu)"
_NOT_ON_CPU_LIST = "not on PyTorch's huggingface_models_list_cpu.txt, the list its CPU benchmarks run"
_PRUNED = ("removed from PyTorch's huggingface_models_list.txt by {pr} ({merged}), so its dashboard no longer "
           "runs it; --no-skip runs it")
# What a record of an LLM entry says its timed step is (environment.timed_step): the harness times
# generate() on them (huggingface_llm_models.py @ 36c1971f: a 1000-token prompt, 2000 new tokens,
# static cache, greedy), which no CPU run here could afford; export never writes it as the harness's.
LLM_FORWARD_ONLY = ("forward only: one forward pass over the prompt, not the generate() PyTorch's harness times "
                    "(2000 new tokens, static cache, greedy)")
_LLM_TRAIN = ("not trained: PyTorch's harness benchmarks its LLM entries (huggingface_llm_models.py) with generate() "
              "and has no training inputs for them")


def make_inputs(name: str, entry: dict[str, Any], config: Any, batch_size: int, device: str) -> dict[str, Any]:
    """Token ids plus the labels this head's loss needs."""
    import torch

    seq = int(entry["sequence_length"])
    vocab = int(config.vocab_size)

    def ids(high: int, shape: tuple[int, ...]) -> "torch.Tensor":
        return torch.randint(0, max(high, 1), shape, dtype=torch.int64, device=device)

    input_ids = ids(int(entry.get("input_id_high", vocab)), (batch_size, seq))
    if entry.get("eos_last"):
        input_ids[:, -1] = config.eos_token_id
    inputs: dict[str, Any] = {"input_ids": input_ids}
    if entry.get("decoder_input_ids"):
        inputs["decoder_input_ids"] = input_ids
    if name.endswith("QuestionAnswering"):
        inputs["start_positions"] = ids(seq, (batch_size,))
        inputs["end_positions"] = ids(seq, (batch_size,))
    elif name.endswith(("MaskedLM", "CausalLM", "HeadModel")) or "hub_config" in entry:
        inputs["labels"] = ids(vocab, (batch_size, seq))
    elif name.endswith("SequenceClassification"):
        inputs["labels"] = ids(config.num_labels - 1, (batch_size,))
    elif name.endswith("ConditionalGeneration"):
        inputs["labels"] = ids(vocab - 1, (batch_size, seq))
    else:
        raise ValueError(f"no label recipe for the head of {name}")
    return inputs


def llm_inputs(entry: dict[str, Any], config: Any, batch_size: int, device: str) -> dict[str, Any]:
    """The harness's LLM inputs: a random prompt of token ids; for whisper, log-mel features of
    30 s of audio and the decoder's start token (a forward pass needs one; generate() adds it)."""
    import torch

    seq = int(entry["sequence_length"])
    if entry["llm"] == "speech_to_text":
        features = torch.randn(batch_size, config.num_mel_bins, seq, device=device)
        start = torch.full((batch_size, 1), config.decoder_start_token_id, dtype=torch.int64, device=device)
        return {"input_features": features, "decoder_input_ids": start}
    vocab = config.get_text_config().vocab_size
    return {"input_ids": torch.randint(0, vocab, (batch_size, seq), dtype=torch.int64, device=device)}


def own_loss(output: Any) -> Any:
    """The loss the model computed from the labels it was given (a ModelOutput is a dict)."""
    return output["loss"] if isinstance(output, dict) else output[0]


class HuggingFaceSuite(DataFileSuite):
    name = "huggingface"
    source = "transformers"
    requires = ("transformers",)
    meta_buildable = True
    data_file = "huggingface.json"

    def skip_rules(self) -> list[SkipRule]:
        """The models PyTorch's list no longer has (rules.pruned); huggingface.yaml's skip.all and
        skip.device.cpu; on cpu, the models its CPU list leaves out; training of the LLM entries.
        (skip.control_flow only applies to AOT export, which this runner has not.) The first
        matching rule names the reason."""
        rules = self._data["rules"]
        pruned = rules["pruned"]
        found = [SkipRule(model=m, reason=_PRUNED.format(pr=pruned["pr"], merged=pruned["merged"]))
                 for m in pruned["models"]]
        found += [SkipRule(model=m, reason=_ALL.format(why=group["why"]))
                  for group in rules["skip_all"] for m in group["models"]]
        found += [SkipRule(model=m, reason=_CPU, accelerator="cpu") for m in rules["skip_device_cpu"]]
        models = self._data["models"]
        found += [SkipRule(model=m["name"], reason=_NOT_ON_CPU_LIST, accelerator="cpu")
                  for m in models if "cpu" not in m["list_batch_size"]]
        found += [SkipRule(model=m["name"], reason=_LLM_TRAIN, test="train") for m in models if "llm" in m]
        return found

    def eval_precisions(self) -> dict[str, str]:
        """huggingface.yaml's only_fp32 models (FNet's FFT) run inference in fp32."""
        return {m: "fp32" for m in self._data["rules"]["only_fp32"]}

    def batch_size(self, request: LoadRequest) -> int:
        return harness_batch_size(self.entry(request.model_name), request)

    def build_config(self, entry: dict[str, Any], transformers: Any) -> Any:
        """The shipped hub configuration, or the model class's defaults."""
        hub_id = entry.get("hub_config")
        if hub_id is None:
            return getattr(transformers, entry["name"]).config_class()
        hub = self._data["hub_configs"][hub_id]
        if hub["model_type"] not in transformers.CONFIG_MAPPING:
            raise ModelSkipped(f"{entry['name']} is a {hub['model_type']!r} model, which transformers "
                               f"{transformers.__version__} does not know; it needs a newer transformers")
        return transformers.AutoConfig.for_model(hub["model_type"], **hub["values"])

    def load(self, request: LoadRequest) -> BenchmarkModel:
        entry = self.entry(request.model_name)
        batch_size = self.batch_size(request)
        transformers = require("transformers")
        config = self.build_config(entry, transformers)
        for key, value in entry.get("config", {}).items():
            setattr(config, key, value)
        if hasattr(config, "use_cache"):
            config.use_cache = False
        model_cls = getattr(transformers, entry.get("model_class", request.model_name))
        module = model_cls.from_config(config) if model_cls.__name__.startswith("Auto") else model_cls(config)
        module = module.to(request.device)

        if "llm" in entry:
            inputs = llm_inputs(entry, config, batch_size, request.device)
        else:
            inputs = make_inputs(request.model_name, entry, config, batch_size, request.device)
        return BenchmarkModel(module=module, kwargs=inputs, batch_size=batch_size, source=self.source,
                              recipe=recipe_for(self.name, request.model_name), loss=own_loss,
                              provenance={"timed_step": LLM_FORWARD_ONLY} if "llm" in entry else {})
