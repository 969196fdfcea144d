"""Facts about the machine that both sides need, read without importing torch.

The record's `environment` block comes from package metadata, so describing the machine
never imports (and initializes) torch_xla or transformers.
"""

from __future__ import annotations

import importlib.metadata
import platform
import socket
from pathlib import Path

# Modules imported first in every child and probe ("mod1,mod2"): the place to register
# custom dynamo backends or suites so the parent's checks and the children agree.
PLUGINS_ENV = "EXPERIMENT_RUNNER_PLUGINS"

PJRT_DEVICE = {"cpu": "CPU", "cuda": "CUDA", "tpu": "TPU"}


def dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def describe_environment() -> dict[str, str | None]:
    """The record's `environment` block. Versions come from package metadata so that
    describing the machine never imports (and initializes) torch_xla or transformers."""
    driver = None
    try:
        driver = Path("/proc/driver/nvidia/version").read_text().splitlines()[0].strip()
    except OSError:
        pass
    return {
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": dist_version("torch"),
        "torch_xla": dist_version("torch_xla"),
        "transformers": dist_version("transformers"),
        "timm": dist_version("timm"),
        "torchbenchmark": dist_version("torchbenchmark"),
        "device driver": driver,
    }
