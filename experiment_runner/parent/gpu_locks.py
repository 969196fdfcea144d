"""One run per GPU on a host: a lock per GPU id, held for the life of a run that uses it.

The results file's lock keeps two runners off one file; it does not keep two nights off one GPU,
since each night writes a folder of its own. A nightly that overran (a slow compile, a hung
model, a rerun after a crash) would otherwise time its experiments beside the next night's on the
same GPUs, and both nights' figures would be wrong. So a run with CUDA experiments takes, before
its first experiment, an exclusive lock for each GPU it may use (--gpu-ids, else
CUDA_VISIBLE_DEVICES, else every GPU torch sees), in a folder every user of the host shares
(--gpu-lock-dir), and keeps them until it ends; a second run waits for them (--wait-for-lock) or
exits 2 with one line naming the holder.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from experiment_runner.errors import UsageError
from experiment_runner.parent.store import LockHeld, take_lock, write_holder


class GpuLocked(UsageError):
    """Another run holds one of this run's GPUs; the message names it."""


def lock_file(lock_dir: Path, gpu_id: str) -> Path:
    """The lock of one GPU id (an index, or a UUID as CUDA_VISIBLE_DEVICES may name it)."""
    return lock_dir / f"gpu-{re.sub(r'[^A-Za-z0-9_.-]', '_', gpu_id)}.lock"


def lock_gpus(gpu_ids: Sequence[str], lock_dir: Path, wait_s: float, results_path: Path) -> list[int]:
    """Take every GPU's lock, in id order (two runs asking for overlapping sets cannot deadlock),
    waiting up to `wait_s` seconds for each; the fds hold them until closed (release_gpus) or this
    process exits. GpuLocked names the holder of the first one still held."""
    try:
        lock_dir.mkdir(mode=0o1777, parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the GPU lock folder {lock_dir}: {exc.strerror or exc} "
                         "(--gpu-lock-dir)") from None
    held: list[int] = []
    for gpu_id in sorted(set(gpu_ids), key=lambda i: (len(i), i)):
        path = lock_file(lock_dir, gpu_id)
        try:
            fd = take_lock(path, wait_s, 0o666)
            write_holder(fd, f", writing {results_path}")
        except LockHeld as lock:
            release_gpus(held)
            raise GpuLocked(f"GPU {gpu_id} is in use by another run: {lock.holder}{lock.waited} (lock {path}); "
                            "wait for it (--wait-for-lock=SECONDS), or run on other GPUs (--gpu-ids)") from None
        except OSError as exc:
            release_gpus(held)
            raise UsageError(f"cannot lock GPU {gpu_id} ({path}): {exc.strerror or exc} (--gpu-lock-dir)") from None
        held.append(fd)
    return held


def release_gpus(held: list[int]) -> None:
    for fd in held:
        os.close(fd)
    held.clear()
