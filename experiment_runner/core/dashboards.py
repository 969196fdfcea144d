"""PyTorch's inductor accuracy dashboards, by the names its CI and expected-results files use.

`--dashboard=cpu_inductor_amp_freezing` plans exactly the experiments PyTorch's CI job of that
name runs (inductor, eval, the job's precision and compile options on its device), and every
record of such an experiment names its dashboard configuration, so `check-expected` and `export`
can pick PyTorch's file for it. The settings are data (dashboards.json) with their source.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

DATA_FILE = "dashboards.json"
DYNAMO = "inductor"
TEST = "eval"
# How the dashboard's performance job measures a speedup (--speedup): the harness's own way.
SPEEDUP = "harness"


@dataclass(frozen=True)
class Dashboard:
    """One configuration of PyTorch's inductor inference dashboard."""

    name: str
    harness_flags: str  # what PyTorch's CI passes its harness for this configuration
    accelerator: str
    precision: str
    compile_options: str

    def expected_file(self, harness_suite: str) -> str:
        """PyTorch's expected-results file for this configuration and a suite (its harness's
        suite name: torchbench, huggingface, timm)."""
        return f"{self.name}_{harness_suite}_inference.csv"


@cache
def _data() -> dict:
    return json.loads(files(__package__).joinpath(DATA_FILE).read_text(encoding="utf-8"))


def source() -> str:
    return _data()["source"]


def dashboards() -> dict[str, Dashboard]:
    return {name: Dashboard(name, **fields) for name, fields in _data()["configurations"].items()}


def groups() -> dict[str, tuple[str, ...]]:
    """Shorthands for every configuration of one device's dashboard (`--dashboard=cpu`)."""
    return {name: tuple(members) for name, members in _data()["groups"].items()}


def choices() -> tuple[str, ...]:
    return (*groups(), *dashboards())


def resolve(names: tuple[str, ...]) -> list[Dashboard]:
    """The configurations `--dashboard` values name, groups expanded, in order, once each."""
    known, shorthands = dashboards(), groups()
    chosen = [member for name in names for member in shorthands.get(name, (name,))]
    return [known[name] for name in dict.fromkeys(chosen)]


def name_of(accelerator: str, xla: str | None, dynamo: str | None, test: str, precision: str,
            compile_options: str) -> str | None:
    """The dashboard configuration an experiment is, or None when it is none of them."""
    if dynamo != DYNAMO or test != TEST or xla is not None:
        return None
    return next((d.name for d in dashboards().values()
                 if (d.accelerator, d.precision, d.compile_options) == (accelerator, precision, compile_options)),
                None)


def dynamic_batch_skips() -> frozenset[str]:
    """Models whose batch the harness never marks dynamic (CI_SKIP_DYNAMIC_BATCH_ONLY)."""
    return frozenset(_data()["dynamic_batch"]["skip_models"])


def harness_iterations() -> int:
    """How many steps the harness's accuracy run compiles and runs (its --iterations default)."""
    return int(_data()["graph_breaks"]["iterations"])


def accuracy_batch_size(suite: str) -> int | None:
    """The batch size PyTorch's accuracy runs (the ones its expected files come from) use for a
    suite of ours; None for a suite the harness does not run."""
    return _data()["accuracy_batch_size"]["sizes"].get(suite)


def overrides(suite: str, verify: bool, batch_size: int | None, speedup: str) -> dict[str, Any]:
    """How an experiment of a dashboard configuration ran unlike its CI job: each setting that
    differs, with the value used ({} when it ran as the job runs it). The record keeps it, so a
    reader can tell a job's figure from one taken otherwise (record.experiment.dashboard_overrides)."""
    found: dict[str, Any] = {}
    if not verify:
        found["verify"] = False
    wanted = accuracy_batch_size(suite)
    if wanted is not None and batch_size != wanted:
        found["batch_size"] = batch_size
    if speedup != SPEEDUP:
        found["speedup"] = speedup
    return found
