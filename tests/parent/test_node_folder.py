"""A Ray task's folder on its node (parent/launch/node_folder.py): a task killed outright leaves its
folder, and the node's next task removes it, never a live task's folder nor one it cannot tell
the owner of. Real processes, killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from experiment_runner.parent.launch.node_folder import LOCK_SUFFIX, PREFIX, node_folder, remove_orphans

# A task that takes its folder, fills it as an experiment would, says where, and waits to be killed.
HOLDER = """
import sys
from pathlib import Path
from experiment_runner.parent.launch.node_folder import node_folder
with node_folder(Path(sys.argv[1])) as folder:
    (folder / "scratch").mkdir()
    (folder / "scratch" / "model.pt2").write_bytes(b"0" * 4096)
    print(folder, flush=True)
    sys.stdin.read()
"""


def start_holder(root: Path) -> tuple[subprocess.Popen, Path]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(root)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    assert line, "the holder exited before taking its folder"
    return proc, Path(line)


def entries(root: Path) -> set[str]:
    return {p.name for p in root.iterdir()}


def test_a_task_removes_its_folder_and_lock_when_it_ends(tmp_path: Path) -> None:
    with node_folder(tmp_path) as folder:
        assert folder.is_dir() and folder.name.startswith(PREFIX)
        assert entries(tmp_path) == {folder.name, folder.name + LOCK_SUFFIX}
        (folder / "child.log").write_text("x")
    assert entries(tmp_path) == set()


@pytest.mark.e2e
def test_a_killed_tasks_folder_is_removed_by_the_next_and_a_live_ones_is_not(tmp_path: Path) -> None:
    live, live_folder = start_holder(tmp_path)
    killed, killed_folder = start_holder(tmp_path)
    legacy = tmp_path / f"{PREFIX}older"  # an older runner's folder, no lock: owner unknown
    legacy.mkdir()
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        assert killed_folder.is_dir()  # nothing ran on the way out
        with node_folder(tmp_path) as mine:
            assert not killed_folder.exists() and not Path(f"{killed_folder}{LOCK_SUFFIX}").exists()
            assert (live_folder / "scratch" / "model.pt2").is_file() and legacy.is_dir()
            assert remove_orphans(tmp_path) == []  # this task's own folder is held too
            assert mine.is_dir()
    finally:
        live.communicate(input="")
    assert live.returncode == 0
    assert entries(tmp_path) == {legacy.name}


def test_a_sweep_between_a_lock_files_creation_and_its_locking_costs_nothing(tmp_path: Path,
                                                                            monkeypatch) -> None:
    """The first lock file made is taken and unlinked by another task's sweep before this task
    locks it (as an interleaving can do): the task makes a new one, and its folder has a held lock."""
    import experiment_runner.parent.launch.node_folder as module

    made = []
    real_mkstemp = module.tempfile.mkstemp

    def mkstemp(**kwargs):
        fd, name = real_mkstemp(**kwargs)
        made.append(name)
        if len(made) == 1:
            assert remove_orphans(tmp_path) == []  # the sweep: takes the unlocked file, finds no folder
            assert not os.path.exists(name)
        return fd, name

    monkeypatch.setattr(module.tempfile, "mkstemp", mkstemp)
    with node_folder(tmp_path) as folder:
        assert len(made) == 2 and Path(made[1]).name == folder.name + LOCK_SUFFIX
        assert remove_orphans(tmp_path) == [] and folder.is_dir()
