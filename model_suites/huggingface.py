"""`huggingface`: transformers models from PyTorch's huggingface benchmark list.

Each model is built from its config class's defaults with random weights, so nothing is
downloaded (HF_HUB_OFFLINE=1 works). As in PyTorch's harness: random int64 token ids of
a per-family sequence length, labels that fit the head (masked/causal LM, question
answering, sequence classification, conditional generation), `use_cache` off, and the
model's own loss (the first output, since labels are always passed) for training.
"""

from __future__ import annotations

from typing import Any

from model_suites.base import DataFileSuite, LoadRequest
from model_suites.model import BenchmarkModel
from model_suites.optional import require
from model_suites.training import recipe_for

# Encoder-decoder families that take decoder ids; the reference feeds the input ids again.
_SEQ2SEQ_PREFIXES = ("T5", "MT5", "M2M100")


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
    if name.startswith(_SEQ2SEQ_PREFIXES):
        inputs["decoder_input_ids"] = input_ids
    if name.endswith("QuestionAnswering"):
        inputs["start_positions"] = ids(seq, (batch_size,))
        inputs["end_positions"] = ids(seq, (batch_size,))
    elif name.endswith(("MaskedLM", "CausalLM", "HeadModel")):
        inputs["labels"] = ids(vocab, (batch_size, seq))
    elif name.endswith("SequenceClassification"):
        inputs["labels"] = ids(config.num_labels - 1, (batch_size,))
    elif name.endswith("ConditionalGeneration"):
        inputs["labels"] = ids(vocab - 1, (batch_size, seq))
    else:
        raise ValueError(f"no label recipe for the head of {name}")
    return inputs


def own_loss(output: Any) -> Any:
    """The loss the model computed from the labels it was given (a ModelOutput is a dict)."""
    return output["loss"] if isinstance(output, dict) else output[0]


class HuggingFaceSuite(DataFileSuite):
    name = "huggingface"
    source = "transformers"
    requires = ("transformers",)
    data_file = "huggingface.json"

    def load(self, request: LoadRequest) -> BenchmarkModel:
        entry = self.entry(request.model_name)
        batch_size = self.batch_size(request)
        transformers = require("transformers")
        model_cls = getattr(transformers, request.model_name)
        config = model_cls.config_class()
        for key, value in entry.get("config", {}).items():
            setattr(config, key, value)
        if hasattr(config, "use_cache"):
            config.use_cache = False
        module = model_cls(config).to(request.device)

        inputs = make_inputs(request.model_name, entry, config, batch_size, request.device)
        return BenchmarkModel(module=module, kwargs=inputs, batch_size=batch_size, source=self.source,
                              recipe=recipe_for(self.name, request.model_name), loss=own_loss)
