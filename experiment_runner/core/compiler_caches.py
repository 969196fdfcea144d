"""Which compiler caches an experiment keeps to itself, and the one it shares with the machine.

Every experiment compiles cold: the parent points TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR
and TMPDIR into the experiment's scratch folder. One inductor cache ignores
TORCHINDUCTOR_CACHE_DIR: its precompiled C++ headers (`.gch`, 120-160 MB, about 4.5 s to
build on a 2-core host) live in `$TMPDIR/torchinductor_<user>/precompiled_headers`. They
depend only on torch, the compiler and its flags, never on a model, so torch builds them
once per machine and every later process reuses them; that is what PyTorch/XLA's runner,
PyTorch's dynamo harness and the dashboards measure as a cold compile. Under the
experiment's own TMPDIR they would be rebuilt inside every experiment's first iteration,
so the parent links the experiment's folder to the machine's (the parent's TMPDIR), and
the child records how many headers appeared while it compiled.
"""

from __future__ import annotations

import getpass
import re
from pathlib import Path

PRECOMPILED_HEADERS = "precompiled_headers"


def inductor_tmp_folder(tmp_dir: str | Path) -> Path:
    """Inductor's per-user folder under a temporary directory (its `default_cache_dir()`)."""
    user = re.sub(r'[\\/:*?"<>|]', "_", getpass.getuser())
    return Path(tmp_dir) / f"torchinductor_{user}"


def share_precompiled_headers(experiment_tmp: Path, machine_tmp: str | Path) -> bool:
    """Link the experiment's precompiled-header folder to the machine's; False (the
    experiment builds its own, and its record says so) where that folder cannot be made."""
    shared = inductor_tmp_folder(machine_tmp) / PRECOMPILED_HEADERS
    link = inductor_tmp_folder(experiment_tmp) / PRECOMPILED_HEADERS
    try:
        shared.mkdir(parents=True, exist_ok=True)
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(shared, target_is_directory=True)
    except OSError:
        return False
    return True


def precompiled_headers(tmp_dir: str | Path) -> set[str]:
    """The precompiled headers inductor would use under `tmp_dir` (followed through the link)."""
    folder = inductor_tmp_folder(tmp_dir) / PRECOMPILED_HEADERS
    try:
        return {path.name for path in folder.glob("*.gch")}
    except OSError:
        return set()
