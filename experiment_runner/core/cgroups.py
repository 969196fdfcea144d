"""This process's memory cgroups, v1 and v2, nested: where the kernel counts its OOM kills
(the parent's attribution of a SIGKILL) and how much memory each limit still leaves (the
verifier's plan).

A process is limited by its own cgroup and by every ancestor's (limits nest), and which files
say so depends on the version: v2 (`0::/path` in /proc/self/cgroup) keeps `memory.max`,
`memory.current` and `memory.events` under /sys/fs/cgroup; v1 (a `memory` hierarchy line) keeps
`memory.limit_in_bytes`, `memory.usage_in_bytes` and `memory.oom_control` under
/sys/fs/cgroup/memory. Inside a container without a cgroup namespace the path names a folder
that is not mounted there: the mount's root is then the container's own cgroup. Every reader
takes a root folder (`/` on a real host) so tests can point it at a fake /proc and /sys tree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

ROOT = Path("/")
# Where each version's memory controller is mounted; a hybrid host mounts v2 at `unified`.
_MOUNTS = {2: ("sys/fs/cgroup", "sys/fs/cgroup/unified"), 1: ("sys/fs/cgroup/memory",)}
# Per version: the limit, the usage, and memory.stat's reclaimable page cache within the usage.
_FILES = {2: ("memory.max", "memory.current", "inactive_file"),
          1: ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")}
_EVENTS = {2: "memory.events", 1: "memory.oom_control"}


@dataclass(frozen=True)
class MemoryCgroup:
    """One memory cgroup folder this process is limited by, and its cgroup version."""

    folder: Path
    version: int

    @property
    def limit_file(self) -> Path:
        return self.folder / _FILES[self.version][0]

    @property
    def events_file(self) -> Path:
        """Where the kernel counts this cgroup's OOM kills (the `oom_kill` line)."""
        return self.folder / _EVENTS[self.version]

    def limit(self) -> int | None:
        """The limit in bytes; None without one ("max") or where it cannot be read."""
        text = _read(self.limit_file)
        return int(text) if text is not None and text.isdigit() else None

    def headroom(self) -> int | None:
        """What the limit still leaves: limit minus usage, the reclaimable page cache counted
        as free (as the kernel reclaims it before an OOM kill); None without a limit ("max")
        or where the files cannot be read."""
        limit, usage = self.limit(), _read(self.folder / _FILES[self.version][1])
        if limit is None or usage is None or not usage.isdigit():
            return None
        cache = 0
        for line in (_read(self.folder / "memory.stat") or "").splitlines():
            key, _, value = line.partition(" ")
            if key == _FILES[self.version][2] and value.strip().isdigit():
                cache = int(value)
        return limit - max(0, int(usage) - cache)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def memory_cgroups(root: Path = ROOT) -> list[MemoryCgroup]:
    """This process's memory cgroup folders, innermost first, then each ancestor up to the
    mount's root (those that exist here), for v2 and v1 alike."""
    found: list[MemoryCgroup] = []
    for line in (_read(root / "proc/self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            version = 2
        elif "memory" in controllers.split(","):
            version = 1
        else:
            continue
        relative = PurePosixPath(path.lstrip("/"))
        for mount in _MOUNTS[version]:
            for folder in (relative, *relative.parents):
                cgroup = MemoryCgroup(root / mount / folder, version)
                if cgroup.folder.is_dir() and cgroup not in found:
                    found.append(cgroup)
    return found


def memory_limit(root: Path = ROOT) -> tuple[int, Path] | None:
    """The smallest memory limit of this process's cgroups and the file that sets it; None
    where no cgroup limits it."""
    limits = [(limit, cgroup.limit_file) for cgroup in memory_cgroups(root) if (limit := cgroup.limit()) is not None]
    return min(limits, default=None)
