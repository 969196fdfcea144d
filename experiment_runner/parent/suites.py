"""Suites as the parent sees them: a name and a catalog, never model code.

Built-in suites read their data files here; a plugin suite (EXPERIMENT_RUNNER_SUITES) is
resolved by name and its catalog comes from a child (`experiment_runner.child.catalog`),
so no plugin code executes in the parent.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field

from experiment_runner.core.matrix import SkipRule
from experiment_runner.core.requirements import missing
from benchmark_models.registry import UnknownSuite, available_suites, get_suite, is_builtin

CATALOG_TIMEOUT_S = 300


class CatalogError(RuntimeError):
    """The suite's catalog could not be read; the message is one line for the user."""


@dataclass(frozen=True)
class SuiteCatalog:
    name: str
    model_names: list[str]
    skip_rules: list[SkipRule]
    source: str
    default_precision: str | None = None
    description: str = ""
    eval_precisions: dict[str, str] = field(default_factory=dict)
    # What the reference's contiguous shards slice; None: model_names.
    listing: list[str] | None = None
    # The suite's packages that are not installed here.
    missing_packages: tuple[str, ...] = ()
    # Default batch sizes, model → test → accelerator; None: the model's own (Suite.default_batch_size).
    batch_sizes: dict[str, dict[str, dict[str, int | None]]] = field(default_factory=dict)


# Imports `module` with `path` first on sys.path; exit 3 and the missing module's name if a
# dependency of it is not installed.
_IMPORT_CHECK = """
import sys
sys.path.insert(0, sys.argv[2])
try:
    __import__(sys.argv[1])
except ModuleNotFoundError as exc:
    print(exc.name)
    raise SystemExit(3)
except ImportError as exc:
    print(exc.name or "")
    print(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    raise SystemExit(4)
"""


def missing_imports_of(module: str, path: str) -> list[str]:
    """The package `module` needs but cannot import here, found in a child (it may import torch).

    A missing module is returned; an installed one that fails to import (an ImportError that is
    not ModuleNotFoundError: a broken or mismatched install) raises CatalogError naming it, since it
    fails every model alike. Any other failure is left to the experiments, whose records say it."""
    try:
        proc = subprocess.run([sys.executable, "-c", _IMPORT_CHECK, module, path], capture_output=True, text=True,
                              timeout=CATALOG_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return []
    lines = proc.stdout.strip().splitlines()
    if proc.returncode == 4 and len(lines) >= 2:
        broken, error = lines[-2].split(".")[0], lines[-1]
        what = f"{broken}, which is installed but fails to import" if broken else "a package that fails to import"
        raise CatalogError(f"{module} ({path}) cannot be imported: it needs {what} ({error}); "
                           + (f"reinstall it: {sys.executable} -m pip install --force-reinstall {broken}" if broken
                              else "see the error above"))
    name = lines[-1:] if proc.returncode == 3 else []
    return [name[0].split(".")[0]] if name else []


def suite_catalog(name: str) -> SuiteCatalog:
    """The catalog of suite `name`; raises UnknownSuite or CatalogError."""
    if is_builtin(name):
        suite = get_suite(name)
        absent = missing(suite.requires)
        check = suite.import_check()
        if not absent and check is not None:
            absent = missing_imports_of(*check)
        return SuiteCatalog(name, suite.model_names(), suite.skip_rules(), suite.source, suite.default_precision,
                            suite.description, suite.eval_precisions(), suite.listing(), tuple(absent),
                            suite.batch_size_table())
    if name not in available_suites():
        get_suite(name)  # raises UnknownSuite with the list of known suites
        raise UnknownSuite(name)
    try:
        proc = subprocess.run([sys.executable, "-m", "experiment_runner.child.catalog", name],
                              capture_output=True, text=True, timeout=CATALOG_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise CatalogError(f"reading the catalog of plugin suite {name!r} timed out "
                           f"after {CATALOG_TIMEOUT_S}s") from None
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise CatalogError(f"cannot load plugin suite {name!r}: {tail}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    return SuiteCatalog(name, data["models"], [SkipRule(**r) for r in data["skip_rules"]], data["source"],
                        data["default_precision"], eval_precisions=data["eval_precisions"], listing=data["listing"],
                        batch_sizes=data["batch_sizes"])
