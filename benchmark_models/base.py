"""The one small interface every model suite implements, catalog half.

A suite has two halves. The catalog half (`model_names`, `skip_rules`, `source`) is read
by the parent and must not import torch: it reads the suite's data files. The loading
half (`load`, returning a `model.BenchmarkModel`) runs only inside the experiment's child.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from experiment_runner.core.matrix import ACCELERATORS, TESTS, SkipRule
from benchmark_models.data_files import read_data

if TYPE_CHECKING:
    from benchmark_models.model import BenchmarkModel


@dataclass(frozen=True)
class LoadRequest:
    """What the worker asks a suite for."""

    model_name: str
    test: str  # "eval" or "train"
    device: str  # a torch device string: "cpu", "cuda", or the XLA device string
    accelerator: str  # "cpu", "cuda" or "tpu": which batch-size table applies
    precision: str  # "fp32", "bf16", "fp16" or "amp"
    batch_size: int | None = None  # None: the suite's default for this model and accelerator


class ModelNotFound(LookupError):
    """The suite has no model of that name."""


class ModelSkipped(Exception):
    """The model cannot run in this configuration (e.g. torchbench's NotImplementedError).

    The worker turns it into a `skipped` record carrying the message as the reason.
    """


class Suite(ABC):
    """A named collection of models. Subclasses register in benchmark_models.registry."""

    name: ClassVar[str]
    source: ClassVar[str] = "builtin"
    # The precision of every experiment without --precision; None: the per-accelerator default.
    default_precision: ClassVar[str | None] = None
    # Packages the suite's models need beyond torch, checked once in the parent before planning.
    requires: ClassVar[tuple[str, ...]] = ()
    # Whether `load` may run once more on the meta device (shapes only) to size a model before
    # building it for real: only for loads without side effects (no downloads, files, processes).
    meta_buildable: ClassVar[bool] = False

    @property
    def description(self) -> str:
        """Where the models come from, as a run's first line says it."""
        return f"{self.source} models"

    @abstractmethod
    def model_names(self) -> list[str]:
        """Every model of the suite, without importing torch."""

    def listing(self) -> list[str]:
        """What the reference runner slices into contiguous shards: the models, unless the
        suite's source lists more (see TorchBenchSuite)."""
        return self.model_names()

    def skip_rules(self) -> list[SkipRule]:
        """Model × configuration combinations that cannot run, as data."""
        return []

    def import_check(self) -> tuple[str, str] | None:
        """A package the suite's models import first, and the folder to put on sys.path for it,
        for the parent to import once in a child before planning (its own dependencies may be
        missing); None: nothing beyond `requires`."""
        return None

    def default_batch_size(self, model_name: str, test: str, accelerator: str) -> int | None:
        """The batch size a model runs at without --batch-size, read from the catalog (no torch);
        None: the model's own default, known only once it is built."""
        return None

    def batch_size_table(self) -> dict[str, dict[str, dict[str, int | None]]]:
        """default_batch_size of every model, test and accelerator: model → test → accelerator."""
        return {model: {test: {acc: self.default_batch_size(model, test, acc) for acc in ACCELERATORS}
                        for test in TESTS} for model in self.model_names()}

    def eval_precisions(self) -> dict[str, str]:
        """Models whose inference runs in another precision than the default bf16 (without
        --precision), as the references run them: model → precision ("amp" only where AMP exists)."""
        return {}

    @abstractmethod
    def load(self, request: LoadRequest) -> BenchmarkModel:
        """Build the model and its inputs on request.device (child process only)."""


def tier_filter(tiers: list[int]) -> str | None:
    """The regex --filter-by-tier/--exclude-by-tier add for TorchBench tiers 1-3
    (data/torchbench_tiers.json), whole names; undefined tiers add nothing, as in the reference."""
    import re

    data = read_data("torchbench_tiers.json")["tiers"]
    names = [name for tier in tiers for name in data.get(str(tier), [])]
    return f"^({'|'.join(map(re.escape, names))})$" if names else None


def harness_batch_size(entry: dict[str, Any], request: LoadRequest) -> int:
    """PyTorch's dynamo harness's default batch size for an entry with `list_batch_size` (its
    GPU list's size, and its CPU list's where it has one) and an optional `divisor`: --batch-size,
    else the CPU list's size on cpu (read with --batch-size-file, which skips the divisor), else
    the GPU list's divided by the divisor, at least 1."""
    if request.batch_size is not None:
        return request.batch_size
    sizes = entry["list_batch_size"]
    if request.accelerator == "cpu" and "cpu" in sizes:
        return int(sizes["cpu"])
    return max(int(sizes["cuda"] / entry.get("divisor", 1)), 1)


def skip_rules_from(entries: list[dict]) -> list[SkipRule]:
    return [SkipRule(**entry) for entry in entries]


class DataFileSuite(Suite):
    """A suite whose catalog is a JSON file in benchmark_models/data:
    {"models": [{"name": ..., "batch_size": ...}, ...], "skips": [SkipRule fields, ...]}."""

    data_file: ClassVar[str]

    def __init__(self) -> None:
        self._data = read_data(self.data_file)
        self._entries = {m["name"]: m for m in self._data["models"]}

    def model_names(self) -> list[str]:
        return list(self._entries)

    def skip_rules(self) -> list[SkipRule]:
        return skip_rules_from(self._data.get("skips", []))

    def entry(self, model_name: str) -> dict[str, Any]:
        try:
            return self._entries[model_name]
        except KeyError:
            raise ModelNotFound(model_name) from None

    def default_batch_size(self, model_name: str, test: str, accelerator: str) -> int | None:
        return self.batch_size(LoadRequest(model_name, test, accelerator, accelerator, "fp32"))

    def batch_size(self, request: LoadRequest) -> int:
        """--batch-size, else the data file's default. `batch_size` may be split by test, then
        by accelerator; an accelerator without its own size takes cuda's (PyTorch's list)."""
        if request.batch_size is not None:
            return request.batch_size
        sizes = self.entry(request.model_name)["batch_size"]
        if isinstance(sizes, dict) and request.test in sizes:
            sizes = sizes[request.test]
        if isinstance(sizes, dict):
            sizes = sizes.get(request.accelerator, sizes["cuda"])
        return int(sizes)
