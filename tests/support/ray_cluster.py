"""A real Ray cluster of N nodes on this machine, for tests and benchmarks.

Each node is a `ray start --block` process in its own session, started here and stopped
here by that process's group and the descendants it had (never `ray stop`, which would
kill every Ray process of the user). Small footprint: few CPUs, a 100 MB object store,
no dashboard; node failures are detected within seconds rather than Ray's default 30 s.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil

# Fast failure detection, so a killed node is declared dead in a few seconds; and no memory
# monitor: it kills a worker when the whole host is near full, which on a test host is memory other
# tests (the other pytest worker) hold, not the cluster's.
CLUSTER_ENV = {
    "RAY_memory_monitor_refresh_ms": "0",
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
    "RAY_USAGE_STATS_ENABLED": "0",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Node:
    """One `ray start --block` process and the processes it started. Descendants are kept as
    psutil handles, which check the process's start time before signalling: a remembered pid
    that was reused by an unrelated process is never signalled."""

    proc: subprocess.Popen
    log: Path
    descendants: dict[int, psutil.Process] = field(default_factory=dict)
    killed: bool = False

    def remember_descendants(self) -> None:
        import psutil

        try:
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                self.descendants.setdefault(child.pid, child)
        except psutil.NoSuchProcess:
            pass

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the node's process group and every process it started (Ray's workers run
        in groups of their own)."""
        import psutil

        self.remember_descendants()
        self.killed = True
        if self.proc.returncode is None:  # not reaped: the group id cannot belong to anyone else
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for process in self.descendants.values():
            try:
                process.send_signal(sig)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass

    def alive(self) -> bool:
        import psutil

        def running(process: psutil.Process) -> bool:
            try:
                return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return False

        processes = list(self.descendants.values())
        if self.proc.returncode is None:  # alive or a zombie: never reaped here, so killpg stays safe
            try:
                processes.append(psutil.Process(self.proc.pid))
            except psutil.NoSuchProcess:
                pass
        return any(running(p) for p in processes)


@dataclass
class LocalRayCluster:
    """`with LocalRayCluster(nodes=2, slots=1, env=...) as cluster:` -> cluster.address"""

    nodes: int = 2
    slots: int = 1
    num_cpus: int = 1
    env: dict[str, str] = field(default_factory=dict)
    started: list[Node] = field(default_factory=list)
    address: str = ""

    def __enter__(self) -> "LocalRayCluster":
        self.temp = tempfile.mkdtemp(prefix="er-ray-", dir="/tmp")  # short: Ray's socket paths have a limit
        # The nodes' temp dir (their tasks' folders), the cluster's own: gone with it, and a test can
        # see what a run left there.
        self.node_tmp = Path(self.temp) / "t"
        self.node_tmp.mkdir()
        port = _free_port()
        self.address = f"127.0.0.1:{port}"
        try:
            self._start(["--head", f"--port={port}", f"--temp-dir={self.temp}", "--include-dashboard=false"])
            self.wait_for(1)
            for _ in range(self.nodes - 1):
                self._start([f"--address={self.address}"])
            self.wait_for(self.nodes)
        except BaseException:
            self.__exit__()
            raise
        return self

    def add_node(self, env: dict[str, str] | None = None) -> Node:
        """Start one more worker node and wait until the cluster sees it."""
        alive = sum(1 for node in self.started if node.proc.poll() is None)
        node = self._start([f"--address={self.address}"], env)
        self.wait_for(alive + 1)
        return node

    def _start(self, args: list[str], extra_env: dict[str, str] | None = None) -> Node:
        log = Path(self.temp) / f"node{len(self.started)}.log"
        command = [sys.executable, "-m", "ray.scripts.scripts", "start", *args, "--block",
                   "--node-ip-address=127.0.0.1", f"--num-cpus={self.num_cpus}", "--num-gpus=0",
                   "--object-store-memory=100000000", "--disable-usage-stats",
                   f"--resources={json.dumps({'experiment_slot': self.slots})}"]
        env = {**os.environ, **CLUSTER_ENV, "TMPDIR": str(self.node_tmp), **self.env, **(extra_env or {})}
        with open(log, "wb") as handle:
            proc = subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        node = Node(proc, log)
        self.started.append(node)
        return node

    def alive_nodes(self) -> int:
        """Alive nodes as the head's GCS sees them, asked from a fresh process (no driver here)."""
        code = ("import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False, logging_level='ERROR');"
                "print(sum(1 for n in ray.nodes() if n['Alive']))")
        proc = subprocess.run([sys.executable, "-c", code, self.address], capture_output=True, text=True,
                              env={**os.environ, **CLUSTER_ENV}, timeout=120)
        return int(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 and proc.stdout.strip() else 0

    def wait_for(self, count: int, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for node in self.started:
                if node.proc.poll() is not None and not node.killed:
                    raise RuntimeError(f"a Ray node exited ({node.proc.returncode}): {node.log.read_text()[-2000:]}")
            if self.alive_nodes() >= count:
                for node in self.started:
                    node.remember_descendants()
                return
            time.sleep(0.5)
        raise TimeoutError(f"Ray cluster did not reach {count} nodes in {timeout_s}s")

    def __exit__(self, *_: object) -> None:
        """Stop the nodes, workers first (SIGTERM, then SIGKILL after a grace period)."""
        for node in reversed(self.started):
            node.kill(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(node.alive() for node in self.started):
            time.sleep(0.2)
        for node in self.started:
            node.kill(signal.SIGKILL)
            node.proc.wait()
        import shutil

        shutil.rmtree(self.temp, ignore_errors=True)
