"""A Ray task's folder in its node's temp dir, and the folders of tasks that were killed.

A task's folder holds the experiment's scratch (compiler caches; TMPDIR, where AOT Inductor
unpacks its package) and its artifacts until they travel back. A task whose worker is killed (its
driver died, a node's worker was ended after a forced cancellation) cannot remove it, and nothing
else on the node would: each such kill left a folder, an AOT package in it as large as the
model's weights. So each folder has a lock file beside it, held by its task for the folder's life;
the kernel releases the lock when the holder dies, however it dies. Every task first removes the
folders whose lock it can take.

The lock file is created and locked before its folder exists and unlinked after the folder is
gone, so a folder is never without a held lock while its task lives: a sweep that takes a lock
between its creation and its locking finds no folder to remove.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

PREFIX = "experiment_runner-"
LOCK_SUFFIX = ".lock"


@contextlib.contextmanager
def node_folder(root: Path | None = None) -> Iterator[Path]:
    """A new folder in `root` (the node's temp dir), held for the block and removed after it;
    the folders of dead holders in `root` are removed first."""
    root = Path(tempfile.gettempdir()) if root is None else root
    remove_orphans(root)
    fd, lock = _held_lock(root)
    try:
        folder = _folder_of(lock)
        folder.mkdir()
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        lock.unlink(missing_ok=True)
        os.close(fd)


def _folder_of(lock: Path) -> Path:
    return lock.with_name(lock.name.removesuffix(LOCK_SUFFIX))


def _held_lock(root: Path) -> tuple[int, Path]:
    """A new lock file in `root`, locked by this process. Another task's sweep may take and
    unlink a lock file between its creation and its locking (it finds no folder): then the lock
    held is on a file no longer there, and a new one is made."""
    while True:
        fd, name = tempfile.mkstemp(prefix=PREFIX, suffix=LOCK_SUFFIX, dir=root)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.stat(name).st_ino == os.fstat(fd).st_ino:
                return fd, Path(name)
        except FileNotFoundError:
            pass
        os.close(fd)


def remove_orphans(root: Path) -> list[Path]:
    """Remove every folder in `root` whose lock no live process holds, and its lock; the folders
    removed. A folder without a lock file (an older runner's) is left alone: its owner is unknown."""
    removed = []
    for lock in sorted(root.glob(f"{PREFIX}*{LOCK_SUFFIX}")):
        try:
            fd = os.open(lock, os.O_RDWR)
        except OSError:  # removed meanwhile by another task's sweep or its owner
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its task is alive
            os.close(fd)
            continue
        try:
            folder = _folder_of(lock)
            if folder.exists():
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
            lock.unlink(missing_ok=True)
        finally:
            os.close(fd)
    return removed
