"""`torchbench`: the real `torchbenchmark` package when it is there, else a built-in set.

The real package is found as the reference runner finds it, plus $TORCHBENCH_DIR: the
checkout named by $TORCHBENCH_DIR (the folder that holds `torchbenchmark/`), else a folder
named torchbenchmark, torchbench or benchmark in the current directory or up to three
parents (`./torchbench`, `../benchmark`, ...), else an installed `torchbenchmark`. The parent lists its models from the file system,
so the catalog never imports torch or torchbenchmark; the child imports
`torchbenchmark.models.<name>` and goes through torchbench's own API:
`Model(test=, device=, batch_size=)`, `get_module()`, its default batch sizes, and
`NotImplementedError` for a test or device a model does not support (a `skipped` record).

With the real package, the references' rules apply (data/torchbench_rules.json): PyTorch's
torchbench.yaml skip lists and PyTorch/XLA's deny list (skipped records, with the reason),
its per-model inference precision on GPUs and TPUs, and its batch-size overrides. A model
whose own requirements are missing fails with the `pip install -r` line that installs them; one
whose torchvision weights cannot be downloaded here is built with random weights, its record
saying so (benchmark_models.torchbench.offline).

Without it, the built-in models of `benchmark_models.torchbench.models` run, with
torchbench's architectures and default batch sizes, so `--suite-name=torchbench` works on
a fresh machine: torchbench's torchvision models as torchbench builds them (random
weights), and re-implementations of a few others. `source` ("torchbenchmark" or "builtin") tells which ran.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from benchmark_models.base import DataFileSuite, LoadRequest, ModelNotFound, ModelSkipped
from benchmark_models.data_files import read_data
from benchmark_models.model import BenchmarkModel, map_tensors
from benchmark_models.torchbench import offline
from benchmark_models.training import recipe_for
from experiment_runner.core.matrix import SkipRule

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


def checkout_commit(package: Path) -> str | None:
    """The git commit of the checkout holding `package`, or None (not a git checkout)."""
    import subprocess

    try:
        commit = subprocess.run(["git", "-C", str(package.parent), "rev-parse", "--short=12", "HEAD"],
                                check=False, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit or None


def describe_source(package: Path | None) -> str:
    """What a run's torchbench models come from, for its first line: the checkout and commit."""
    if package is None:
        return ("the built-in torchbench models (no torchbenchmark found: set TORCHBENCH_DIR, or put a checkout "
                "at ./torchbench or ../benchmark)")
    return f"torchbenchmark at {checkout_commit(package) or 'an unknown commit'} ({package.parent})"


def reference_rules() -> list[SkipRule]:
    """PyTorch's torchbench.yaml skips and PyTorch/XLA's deny list, as skip rules."""
    data = read_data("torchbench_rules.json")
    skip = data["skip"]
    rules = [SkipRule(model=m, reason=skip["all"]["reason"]) for m in skip["all"]["models"]]
    for accelerator, entry in skip["accelerator"].items():
        rules += [SkipRule(model=m, reason=entry["reason"], accelerator=accelerator) for m in entry["models"]]
    for test, entry in skip["test"].items():
        rules += [SkipRule(model=m, reason=entry["reason"], test=test) for m in entry["models"]]
    rules += [SkipRule(model=m, reason=skip["multiprocess"]["reason"]) for m in skip["multiprocess"]["models"]]
    return rules + [SkipRule(**entry) for entry in data["deny"]]


# Modules a model's requirements import but no requirements.txt names: what to install for each.
UNLISTED_MODULES = {"pkg_resources": "pip install 'setuptools<82' (setuptools 82 removed pkg_resources)"}


def missing_requirement_hint(package: Path, model_name: str, exc: ImportError) -> str:
    """The line that installs what a torchbench model needs, as its own install.py would: its
    requirements.txt, unless install.py also runs steps of its own."""
    model_dir = package / "models" / model_name
    requirements = model_dir / "requirements.txt"
    steps = offline.install_steps(model_dir)
    how = UNLISTED_MODULES.get(exc.name or "")
    if how is None and requirements.is_file() and not steps:
        how = f"pip install -r {requirements}"
    elif how is None:
        besides = f"; besides its requirements it runs {', '.join(steps)}" if steps else ""
        how = f"python install.py {model_name} (in {package.parent}{besides})"
    return f"torchbenchmark model {model_name} needs a package that is not installed ({exc}); install it: {how}"


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
        self.meta_buildable = self._package is None  # a checkout's models may read data files at load

    @property
    def description(self) -> str:
        return describe_source(self._package)

    def model_names(self) -> list[str]:
        if self._package is not None:
            return list_torchbenchmark_models(self._package)
        return super().model_names()

    def listing(self) -> list[str]:
        """Every folder under torchbenchmark/models, as `torchbenchmark._list_model_paths` lists
        them for the reference's shards (a `__pycache__` included); only the models run."""
        if self._package is None:
            return super().listing()
        return sorted(child.name for child in (self._package / "models").iterdir() if child.is_dir())

    def skip_rules(self) -> list[SkipRule]:
        if self._package is not None:
            return reference_rules()
        return super().skip_rules()

    def import_check(self) -> tuple[str, str] | None:
        """torchbenchmark itself imports packages (psutil, ...) that every model then needs."""
        return None if self._package is None else ("torchbenchmark", str(self._package.parent))

    def default_batch_size(self, model_name: str, test: str, accelerator: str) -> int | None:
        """A checkout's models: torchbench.yaml's size, else the model's own (None)."""
        if self._package is None:
            return super().default_batch_size(model_name, test, accelerator)
        rules = read_data("torchbench_rules.json")
        if model_name in rules["dont_change_batch_size"]:
            return None
        return rules["batch_size"].get(test, {}).get(model_name)

    def eval_precisions(self) -> dict[str, str]:
        if self._package is None:
            return {}
        lists = read_data("torchbench_rules.json")["eval_precision"]
        return {model: precision for precision in ("fp16", "amp") for model in lists[precision]}

    def provenance(self) -> dict[str, str | None]:
        if self._package is None:
            return {}
        return {"torchbenchmark_path": str(self._package.parent), "torchbenchmark_commit": checkout_commit(self._package)}

    def load(self, request: LoadRequest) -> BenchmarkModel:
        if self._package is not None:
            return self._load_torchbenchmark(request)
        return self._load_builtin(request)

    def _load_builtin(self, request: LoadRequest) -> BenchmarkModel:
        from benchmark_models.torchbench.models import BUILDERS, build_torchvision

        batch_size = self.batch_size(request)
        constructor = self.entry(request.model_name).get("torchvision")
        if constructor is not None:
            built = build_torchvision(constructor, batch_size, request.device)
        else:
            built = BUILDERS[request.model_name](batch_size, request.device)
        return BenchmarkModel(module=built.module, args=built.args, batch_size=batch_size,
                              source=self.source, recipe=recipe_for(self.name, request.model_name))

    def _load_torchbenchmark(self, request: LoadRequest) -> BenchmarkModel:
        """Build through torchbench's API. XLA devices: build on the CPU, then move, as
        torchbench models only know cpu and cuda."""
        if request.model_name not in list_torchbenchmark_models(self._package):
            raise ModelNotFound(request.model_name)
        from benchmark_models.optional import require

        checkout = str(self._package.parent)
        if checkout not in sys.path:
            sys.path.insert(0, checkout)
        os.environ.setdefault("KALDI_ROOT", "/tmp")  # as the reference: silences a model's warnings
        require("torchvision")  # many models import it; a torchvision built for another torch must still load
        try:
            with offline.input_data_named(self._package, request.model_name):
                module = importlib.import_module(f"torchbenchmark.models.{request.model_name}")
        except ImportError as exc:
            raise ImportError(missing_requirement_hint(self._package, request.model_name, exc)) from exc
        build_device = request.device if request.device.split(":")[0] in ("cpu", "cuda") else "cpu"
        provenance = self.provenance()

        def build() -> Any:
            try:
                return module.Model(test=request.test, device=build_device,
                                    batch_size=self._torchbenchmark_batch_size(module.Model, request), extra_args=[])
            except NotImplementedError as exc:
                raise ModelSkipped(f"torchbenchmark: {request.model_name} does not implement "
                                   f"{request.test} on {build_device}: {exc}") from exc

        with (offline.input_data_named(self._package, request.model_name),
              offline.random_inputs(self._package, request.model_name, module) as data_url,
              offline.torchvision_downloads() as urls):
            if data_url is not None:
                provenance.update(input_data="random", input_data_unreachable=data_url)
            try:
                instance = build()
            except ModelSkipped:
                raise
            except Exception as exc:  # noqa: BLE001 - only a download this host cannot reach is handled
                network = offline.unreachable(exc)
                if network is None:
                    raise
                if not urls:
                    raise offline.DownloadUnreachable(
                        f"torchbenchmark model {request.model_name} downloads a file while it is built and this host "
                        f"cannot reach it ({network}); run it once where the download works (it is cached), or "
                        "skip it with --exclude") from exc
                with offline.without_torchvision_weights():
                    instance = build()
                provenance.update(pretrained_weights="random", weights_unreachable=urls[0],
                                  weights_error=str(network)[:300])
            model, inputs = instance.get_module()
        if build_device != request.device:
            model = model.to(request.device)
            inputs = map_tensors(inputs, lambda t: t.to(request.device))
        args, kwargs = ((), dict(inputs)) if isinstance(inputs, dict) else (tuple(inputs), {})
        return BenchmarkModel(module=model, args=args, kwargs=kwargs, batch_size=int(instance.batch_size),
                              source=self.source, recipe=recipe_for(self.name, request.model_name),
                              provenance=provenance)

    @staticmethod
    def _torchbenchmark_batch_size(model_class: type, request: LoadRequest) -> int | None:
        """As the references: no change for models that forbid it, else --batch-size, else
        torchbench.yaml's size for the test, else the model's own default (None)."""
        rules = read_data("torchbench_rules.json")
        if (not getattr(model_class, "ALLOW_CUSTOMIZE_BSIZE", True)
                or request.model_name in rules["dont_change_batch_size"]):
            return None
        if request.batch_size is not None:
            return request.batch_size
        return rules["batch_size"].get(request.test, {}).get(request.model_name)
