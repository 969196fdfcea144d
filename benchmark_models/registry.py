"""Suites by name. Modules are imported lazily so a missing optional package only
matters to the suite that needs it."""

from __future__ import annotations

import importlib
import os

from benchmark_models.base import Suite

# Extra suites as "name=module:Class,..." so plug-ins (and test-only suites) reach the
# child processes too, which import the registry afresh.
EXTRA_SUITES_ENV = "EXPERIMENT_RUNNER_SUITES"

_SUITES: dict[str, str] = {
    "dummy": "benchmark_models.dummy:DummySuite",
    "torchbench": "benchmark_models.torchbench:TorchBenchSuite",
    "huggingface": "benchmark_models.huggingface:HuggingFaceSuite",
    "timm": "benchmark_models.timm_models:TimmSuite",
}


class UnknownSuite(KeyError):
    pass


def _all_suites() -> dict[str, str]:
    suites = dict(_SUITES)
    for item in filter(None, os.environ.get(EXTRA_SUITES_ENV, "").split(",")):
        name, _, target = item.partition("=")
        suites[name.strip()] = target.strip()
    return suites


def available_suites() -> list[str]:
    return list(_all_suites())


def is_builtin(name: str) -> bool:
    """Built-in suites' catalogs are data files, safe to read in the parent; a plugin suite
    is user code that may import torch at module level, so only children import it."""
    return name in _SUITES and _all_suites()[name] == _SUITES[name]


def get_suite(name: str) -> Suite:
    suites = _all_suites()
    try:
        target = suites[name]
    except KeyError:
        raise UnknownSuite(f"unknown suite {name!r}; choose from {', '.join(suites)}") from None
    module_name, _, class_name = target.partition(":")
    return getattr(importlib.import_module(module_name), class_name)()
