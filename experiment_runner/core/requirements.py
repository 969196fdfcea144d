"""What a suite needs installed, and the command that installs it: found without importing
anything, so the parent can check a suite once, before planning, and never load torch."""

from __future__ import annotations

import importlib.util
import re


def missing(packages: tuple[str, ...]) -> list[str]:
    """The packages that are not installed, found without importing anything (the parent's check)."""
    return [name for name in packages if importlib.util.find_spec(name) is None]


def install_command(packages: list[str]) -> str:
    """The pip command that installs these packages and keeps the torch installed here.

    Pinning torch to its installed version is what makes the command right for any host: on a
    CPU wheel it stops pip from pulling a CUDA build of several GB (timm asks for torchvision,
    which asks for torch), and on a CUDA host it keeps the build the user chose. Version bounds
    come from this package's own extras."""
    from importlib import metadata

    declared: dict[str, str] = {}
    try:
        for requirement in metadata.requires("experiment_runner") or []:
            spec = requirement.split(";")[0].strip()  # 'timm>=1.0; extra == "timm"' -> 'timm>=1.0'
            declared.setdefault(re.match(r"[A-Za-z0-9_.-]+", spec).group(0), spec)
    except metadata.PackageNotFoundError:
        pass
    wanted = [declared.get(name, name) for name in packages]
    try:
        wanted.append(f"torch=={metadata.version('torch').split('+')[0]}")
    except metadata.PackageNotFoundError:
        pass
    return "pip install " + " ".join(f"'{req}'" for req in wanted)
