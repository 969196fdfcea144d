"""Optional dependencies, guarded in one place.

Suites call `require("transformers")` instead of importing directly, so a missing
package is one clear message that names it and the extra that installs it.

`require("timm")`, `require("transformers")` and `require("torchvision")` first make sure torchvision's pure-Python
parts can load: a torchvision wheel built for another torch (e.g. a CUDA build beside a
CPU torch) cannot load its compiled ops, and its import then dies registering fake
kernels for `torchvision::nms`/`qnms`, taking `import timm` (and transformers' modeling
code, which imports torchvision's transforms) down with it. Neither needs those ops, so when, and only when, the extension truly fails to load we define the
two op schemas first and the rest of torchvision imports normally.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from experiment_runner.core.requirements import install_command

# Packages whose import pulls in torchvision.
_NEEDS_TORCHVISION = ("timm", "transformers", "torchvision")

# Schemas of the ops torchvision registers fake kernels for at import time.
_TORCHVISION_OP_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)

# A torch.library.Library unregisters its definitions when collected: keep it alive.
_torchvision_stub_library: Any = None


class MissingDependency(ImportError):
    pass


def require(package: str) -> ModuleType:
    try:
        if package in _NEEDS_TORCHVISION:
            patch_broken_torchvision()
        return importlib.import_module(package)
    except ImportError as exc:
        raise MissingDependency(f"{package} is needed for this suite but cannot be imported ({exc}); "
                                f"{install_command([package])}") from exc


def _torchvision_extension(spec: importlib.machinery.ModuleSpec) -> list[Path]:
    return [
        path
        for location in spec.submodule_search_locations or []
        for path in sorted(Path(location).glob("_C.*"))
        if path.suffix in (".so", ".pyd", ".dylib")
    ]


def patch_broken_torchvision() -> bool:
    """Define torchvision's nms/qnms schemas if its compiled extension cannot load.

    Returns True when it patched. A no-op when torchvision is absent or already
    imported, when the ops exist, or when the extension loads (then torchvision is fine
    and the ops it registers are the real ones).
    """
    global _torchvision_stub_library
    if "torchvision" in sys.modules or _torchvision_stub_library is not None:
        return False
    spec = importlib.util.find_spec("torchvision")
    if spec is None:
        return False
    import torch

    if _has_torchvision_op("nms"):
        return False
    for library in _torchvision_extension(spec):
        try:
            torch.ops.load_library(str(library))
        except (OSError, RuntimeError):
            continue
        if _has_torchvision_op("nms"):
            return False
    library = torch.library.Library("torchvision", "DEF")
    for schema in _TORCHVISION_OP_SCHEMAS:
        library.define(schema)
    _torchvision_stub_library = library
    return True


def _has_torchvision_op(name: str) -> bool:
    import torch

    try:
        getattr(torch.ops.torchvision, name)
    except (AttributeError, RuntimeError):
        return False
    return True
