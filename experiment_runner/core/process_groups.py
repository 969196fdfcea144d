"""Signalling process groups and finding an experiment's processes, shared by the
launchers, the reaper and the fork server.

A process group is not enough to find what an experiment started: a descendant may call
setsid(), and once its parent dies it is re-parented away from the experiment. So every
experiment's environment carries two tokens, one per run and one per attempt, which every
descendant inherits through exec; the scan below finds them in /proc/PID/environ (the
environment a process was exec'd with). Forked descendants that never exec'd carry the
environment of the fork server (which carries the run token) and are found by walking the
process tree from the experiment's leader while it lives.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Iterable

from experiment_runner.core.cgroups import memory_cgroups

RUN_TOKEN_ENV = "EXPERIMENT_RUNNER_RUN_TOKEN"
ATTEMPT_TOKEN_ENV = "EXPERIMENT_RUNNER_ATTEMPT"


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_alive(pgid: int) -> bool:
    """Whether any member of the group still runs (zombies awaiting their reaper do not count)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _stat(pid: str) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def descendants(root: int) -> set[int]:
    """Live descendants of `root` (not itself), through the parent links in /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(entry)) is not None and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def carrying(name: str, value: str) -> set[int]:
    """Live processes (not this one) exec'd with `name=value` in their environment."""
    needle = f"{name}={value}".encode()
    found: set[int] = set()
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and (fields := _stat(entry)) is not None and fields[0] != "Z":
            found.add(int(entry))
    return found


def kill_all(pids: Iterable[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_experiment(pgid: int, attempt_id: str | None, grace_s: float = 0.0) -> None:
    """End an experiment and everything it started: its process group, its descendants
    (found now, while the tree is intact) and any process carrying its attempt token
    (descendants that called setsid() and lost their parent). SIGTERM first when grace_s > 0."""
    def members() -> set[int]:
        found = descendants(pgid)
        if attempt_id:
            found |= carrying(ATTEMPT_TOKEN_ENV, attempt_id)
        return found

    if grace_s > 0:
        targets = members()
        signal_group(pgid, signal.SIGTERM)
        kill_all(targets, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and (group_alive(pgid) or any(_alive(p) for p in targets)):
            time.sleep(0.05)
    for _ in range(20):  # a forking descendant may add processes while we kill
        targets = members()
        signal_group(pgid, signal.SIGKILL)
        kill_all(targets)
        if not targets and not group_alive(pgid):
            return
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    fields = _stat(str(pid))
    return fields is not None and fields[0] != "Z"


def _own_cgroup_files() -> list[tuple[Path, str]]:
    """Where this process's cgroups count OOM kills (v2 memory.events, v1 memory.oom_control;
    innermost first, core.cgroups), then the whole host's count."""
    return [(cgroup.events_file, "oom_kill") for cgroup in memory_cgroups()] + [(Path("/proc/vmstat"), "oom_kill")]


def oom_kill_count() -> tuple[int, str] | tuple[None, None]:
    """The kernel's count of OOM kills in this process's cgroup (else on this host) and the
    file it comes from. Its increase while a child ran is the evidence for an `oom` record."""
    for path, key in _own_cgroup_files():
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value), str(path)
    return None, None
