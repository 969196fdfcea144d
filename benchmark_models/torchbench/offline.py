"""torchbench models that download pretrained weights, on a host that cannot reach them.

Thirteen of the models on PyTorch's CPU list (the twelve torchvision models and Super_SloMo,
whose loss uses VGG16) ask torchvision for ImageNet weights when they are built, and a host
without internet fails there with a bare `<urlopen error ...>`. A benchmark measures speed and
compares compiled against eager on the same weights, so random weights answer the same
questions, as the built-in models are built: when a build fails because a download could not
be reached and torchvision's weights were what it was fetching, the model is built again with
torchvision's weights left out (`WeightsEnum.verify` answering None, which is torchvision's own
"no weights"), and the record says so. A download that is not torchvision's is one line naming
what could not be reached and what to do.

Four others (Super_SloMo, speech_transformer, vision_maskrcnn, yolov3) read input data that their
`install.py` downloads from TorchBench's S3 (`s3_utils.checkout_s3_data("INPUT_TARBALLS", ...)`).
Without it their builds fail in ways of their own (an assertion, a manifold error, a missing
file); such a failure, while that data is not unpacked, becomes one line naming the tarball, its
URL and the command that installs it. Only a failure counts: LearningToPaint's install.py names
Super_SloMo's tarball, yet the model builds without it. Super_SloMo's data feeds nothing but its
example batch, so there its dataset class is replaced by random frames of the same shapes (as the
weights are, the record says so); the others read their data as they are imported (yolov3,
vision_maskrcnn) or need its vocabulary (speech_transformer).
"""

from __future__ import annotations

import ast
import contextlib
import socket
import urllib.error
from pathlib import Path
from typing import Any, Iterator
from unittest import mock

from benchmark_models.base import ModelSkipped

NETWORK_ERRORS = (urllib.error.URLError, ConnectionError, TimeoutError, socket.gaierror)
# utils/s3_utils.py: S3_URL_BASE, then data/<tarball> for INPUT_TARBALLS (pytorch/benchmark @ 0e83c440).
S3_INPUTS_URL = "https://ossci-datasets.s3.amazonaws.com/torchbench/data/"
TARBALL_SUFFIX = ".tar.gz"


class DownloadUnreachable(RuntimeError):
    """A model needs a download this host cannot reach (while it is built, or its install.py's
    input data), and no fallback exists."""


def unreachable(exc: BaseException) -> BaseException | None:
    """The network error behind `exc` (itself, its cause or its context), or None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, NETWORK_ERRORS):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


@contextlib.contextmanager
def torchvision_downloads() -> Iterator[list[str]]:
    """The URLs torchvision's weights are fetched from while the block runs."""
    from torchvision.models._api import WeightsEnum

    urls: list[str] = []
    fetch = WeightsEnum.get_state_dict

    def recording(self: Any, *args: Any, **kwargs: Any) -> Any:
        urls.append(self.url)
        return fetch(self, *args, **kwargs)

    with mock.patch.object(WeightsEnum, "get_state_dict", recording):
        yield urls


@contextlib.contextmanager
def without_torchvision_weights() -> Iterator[None]:
    """torchvision builders build with random weights inside the block, whatever they are asked."""
    from torchvision.models._api import WeightsEnum

    with mock.patch.object(WeightsEnum, "verify", classmethod(lambda cls, obj: None)):
        yield


def install_script(model_dir: Path) -> ast.Module | None:
    """A model's install.py, parsed, not run (it downloads and installs); None without one."""
    install = model_dir / "install.py"
    return ast.parse(install.read_text(encoding="utf-8"), str(install)) if install.is_file() else None


def install_calls(script: ast.Module) -> list[tuple[str, list[Any]]]:
    """Every call in an install script: the called function's name and its constant arguments
    (None for any other)."""
    calls = []
    for node in ast.walk(script):
        if isinstance(node, ast.Call):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            calls.append((called, [arg.value if isinstance(arg, ast.Constant) else None for arg in node.args]))
    return calls


def install_steps(model_dir: Path) -> list[str]:
    """The functions a model's install.py defines and calls: setup of its own beyond
    `pip_install_requirements` and `checkout_s3_data` (fastNLP_Bert's install.py patches fastNLP)."""
    script = install_script(model_dir)
    if script is None:
        return []
    defined = {node.name for node in script.body if isinstance(node, ast.FunctionDef)}
    return sorted(defined & {called for called, _ in install_calls(script)})


def input_tarballs(model_dir: Path) -> list[str]:
    """The tarballs a model's install.py fetches with `checkout_s3_data("INPUT_TARBALLS", NAME)`."""
    script = install_script(model_dir)
    return [] if script is None else [
        args[1] for called, args in install_calls(script)
        if called == "checkout_s3_data" and args[:1] == ["INPUT_TARBALLS"] and len(args) > 1
        and isinstance(args[1], str)]


def missing_input_tarballs(package: Path, model_name: str) -> list[str]:
    """Those of the model's input tarballs not unpacked where torchbenchmark reads them
    (`DATA_PATH`, torchbenchmark/data/.data/<tarball without .tar.gz>)."""
    unpacked = package / "data" / ".data"
    return [name for name in input_tarballs(package / "models" / model_name)
            if not (unpacked / name.removesuffix(TARBALL_SUFFIX)).is_dir()]


def missing_inputs_line(package: Path, model_name: str, tarballs: list[str], exc: BaseException) -> str:
    """One line: which input data is missing and why the build failed, then what to do (the end
    is what a progress line keeps)."""
    error = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
    files = "that file" if len(tarballs) == 1 else "those files"
    return (f"torchbenchmark model {model_name} needs its input data, not unpacked in {package / 'data' / '.data'} "
            f"({error}); `python install.py {model_name}` in the checkout downloads "
            f"{' '.join(S3_INPUTS_URL + name for name in tarballs)}; offline, put {files} in torchbenchmark/data/ "
            "first (install.py then only unpacks it)")


@contextlib.contextmanager
def input_data_named(package: Path, model_name: str) -> Iterator[None]:
    """A model's import or build that fails while its S3 input data is missing fails with
    `missing_inputs_line`; other failures, a missing package and a skip pass unchanged."""
    try:
        yield
    except (ImportError, ModelSkipped, DownloadUnreachable):
        raise
    except Exception as exc:  # noqa: BLE001 - each model fails on absent data in its own way
        missing = missing_input_tarballs(package, model_name)
        if not missing:
            raise
        raise DownloadUnreachable(missing_inputs_line(package, model_name, missing, exc)) from exc


def random_slomo_clips() -> type:
    """Super_SloMo's training set from random pixels: each sample is [I0, IFrame, I1], three
    3x352x352 frames in [0, 1) (its crop size), and IFrame's index between them (0-6), the
    shapes and types its `dataloader.SuperSloMo` gives from the 9-frame clips of its tarball."""
    import torch

    class RandomClips(torch.utils.data.Dataset):
        def __init__(self, root: str, transform: Any = None, dim: tuple[int, int] = (640, 360),
                     randomCropSize: tuple[int, int] = (352, 352), train: bool = True) -> None:  # noqa: N803
            self.width, self.height = randomCropSize

        def __len__(self) -> int:
            return 1 << 20  # as many as any batch asks for: only the first batch is read

        def __getitem__(self, index: int) -> tuple[list[Any], int]:
            generator = torch.Generator().manual_seed(index)
            return [torch.rand(3, self.height, self.width, generator=generator) for _ in range(3)], index % 7

    return RandomClips


# model -> (its dataset class's name in the model's module, what builds the stand-in)
RANDOM_DATASETS = {"Super_SloMo": ("SuperSloMo", random_slomo_clips)}


@contextlib.contextmanager
def random_inputs(package: Path, model_name: str, module: Any) -> Iterator[str | None]:
    """While the model's input data is not unpacked and a random stand-in is known, its dataset
    class is the stand-in and the block gets the URL the data comes from; else nothing changes (None)."""
    stand_in = RANDOM_DATASETS.get(model_name)
    missing = missing_input_tarballs(package, model_name) if stand_in else []
    if stand_in is None or not missing:
        yield None
        return
    attribute, build = stand_in
    with mock.patch.object(module, attribute, build()):
        yield S3_INPUTS_URL + missing[0]
