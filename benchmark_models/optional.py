"""Optional dependencies, guarded in one place.

Suites call `require("transformers")` instead of importing directly, so a missing
package is one clear message that names it and the extra that installs it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

_EXTRAS = {"transformers": "huggingface", "timm": "timm", "torch_xla": None, "torchbenchmark": None}


class MissingDependency(ImportError):
    pass


def require(package: str) -> ModuleType:
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        extra = _EXTRAS.get(package)
        hint = f"pip install 'experiment_runner[{extra}]'" if extra else f"install {package}"
        raise MissingDependency(f"{package} is needed for this suite but cannot be imported ({exc}); {hint}") from exc
