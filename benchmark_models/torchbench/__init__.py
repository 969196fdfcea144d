"""`torchbench`: the real `torchbenchmark` package when it is there, else a built-in set.

The real package is found as the reference runner finds it, plus $TORCHBENCH_DIR: the
checkout named by $TORCHBENCH_DIR (the folder that holds `torchbenchmark/`), else a folder
named torchbenchmark, torchbench or benchmark in the current directory or up to three
parents (`./torchbench`, `../benchmark`, ...), else an installed `torchbenchmark`. The parent lists its models from the file system,
so the catalog never imports torch or torchbenchmark; the child imports
`torchbenchmark.models.<name>` and goes through torchbench's own API:
`Model(test=, device=, batch_size=)`, `get_module()`, its default batch sizes, and
`NotImplementedError` for a test or device a model does not support (a `skipped` record).

Without it, the built-in models of `benchmark_models.torchbench.models` run, with
torchbench's architectures and default batch sizes, so `--suite-name=torchbench` works on
a fresh machine. `source` ("torchbenchmark" or "builtin") tells which ran.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

from benchmark_models.base import DataFileSuite, LoadRequest, ModelNotFound, ModelSkipped
from benchmark_models.model import BenchmarkModel, map_tensors
from benchmark_models.training import recipe_for

TORCHBENCH_DIR_ENV = "TORCHBENCH_DIR"
# The reference runner's search (util.find_near_file): these names, here and in three parents.
NEAR_NAMES = ("torchbenchmark", "torchbench", "benchmark")
NEAR_DIRS = (".", "..", "../..", "../../..")


def _package_in(folder: Path) -> Path | None:
    """The torchbenchmark package a folder is or holds."""
    for package in (folder / "torchbenchmark", folder):
        if package.name == "torchbenchmark" and (package / "__init__.py").is_file():
            return package.resolve()
    return None


def torchbenchmark_package_dir() -> Path | None:
    """Where the `torchbenchmark` package lives, found without importing it (or torch)."""
    checkout = os.environ.get(TORCHBENCH_DIR_ENV)
    if checkout:
        package = Path(checkout).expanduser().resolve() / "torchbenchmark"
        if (package / "__init__.py").is_file():
            return package
        print(f"experiment_runner: warning: ${TORCHBENCH_DIR_ENV}={checkout} holds no torchbenchmark/ "
              "package; using the built-in torchbench models", file=sys.stderr)
        return None
    for near in NEAR_DIRS:
        for name in NEAR_NAMES:
            package = _package_in(Path(near) / name)
            if package is not None:
                return package
    try:
        spec = importlib.util.find_spec("torchbenchmark")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def describe_source(package: Path | None) -> str:
    """What a run's torchbench models come from, for its first line: the checkout and commit."""
    if package is None:
        return ("the built-in torchbench models (no torchbenchmark found: set TORCHBENCH_DIR, or put a checkout "
                "at ./torchbench or ../benchmark)")
    import subprocess

    try:
        commit = subprocess.run(["git", "-C", str(package.parent), "rev-parse", "--short=12", "HEAD"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return f"torchbenchmark at {commit or 'an unknown commit'} ({package.parent})"


def list_torchbenchmark_models(package: Path) -> list[str]:
    """Model folders (those with an __init__.py) under torchbenchmark/models."""
    models = package / "models"
    if not models.is_dir():
        return []
    return sorted(
        child.name for child in models.iterdir()
        if child.is_dir() and not child.name.startswith(("_", ".")) and (child / "__init__.py").is_file()
    )


class TorchBenchSuite(DataFileSuite):
    """The data file describes the built-in set; the real package describes itself."""

    name = "torchbench"
    data_file = "torchbench.json"

    def __init__(self) -> None:
        super().__init__()
        self._package = torchbenchmark_package_dir()
        self.source = "builtin" if self._package is None else "torchbenchmark"

    @property
    def description(self) -> str:
        return describe_source(self._package)

    def model_names(self) -> list[str]:
        if self._package is not None:
            return list_torchbenchmark_models(self._package)
        return super().model_names()

    def load(self, request: LoadRequest) -> BenchmarkModel:
        if self._package is not None:
            return self._load_torchbenchmark(request)
        return self._load_builtin(request)

    def _load_builtin(self, request: LoadRequest) -> BenchmarkModel:
        from benchmark_models.torchbench.models import BUILDERS

        batch_size = self.batch_size(request)
        built = BUILDERS[request.model_name](batch_size, request.device)
        return BenchmarkModel(module=built.module, args=built.args, batch_size=batch_size,
                              source=self.source, recipe=recipe_for(self.name, request.model_name))

    def _load_torchbenchmark(self, request: LoadRequest) -> BenchmarkModel:
        """Build through torchbench's API. XLA devices: build on the CPU, then move, as
        torchbench models only know cpu and cuda."""
        if request.model_name not in list_torchbenchmark_models(self._package):
            raise ModelNotFound(request.model_name)
        checkout = str(self._package.parent)
        if checkout not in sys.path:
            sys.path.insert(0, checkout)

        module = importlib.import_module(f"torchbenchmark.models.{request.model_name}")
        build_device = request.device if request.device.split(":")[0] in ("cpu", "cuda") else "cpu"
        try:
            instance = module.Model(test=request.test, device=build_device, batch_size=request.batch_size,
                                    extra_args=[])
        except NotImplementedError as exc:
            raise ModelSkipped(f"torchbenchmark: {request.model_name} does not implement "
                               f"{request.test} on {build_device}: {exc}") from exc
        model, inputs = instance.get_module()
        if build_device != request.device:
            model = model.to(request.device)
            inputs = map_tensors(inputs, lambda t: t.to(request.device))
        args, kwargs = ((), dict(inputs)) if isinstance(inputs, dict) else (tuple(inputs), {})
        return BenchmarkModel(module=model, args=args, kwargs=kwargs, batch_size=int(instance.batch_size),
                              source=self.source, recipe=recipe_for(self.name, request.model_name))
