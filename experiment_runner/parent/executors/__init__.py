"""Executors: where the experiments of a run execute, behind one small interface.

`local` runs them on this host through a launcher (today's subprocess or fork server);
`ray` runs each one as a Ray task on a cluster node, which starts it through the same
launcher there. Either way every experiment's child process, timeout and crash
classification are the launcher's, records are built by `core.record.build_record`, and
the runner (parent/runner.py) stays the only writer of the results file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from experiment_runner.parent.executors.interface import Executor, Job

__all__ = ["Executor", "ExecutorOptions", "Job", "create"]


@dataclass(frozen=True)
class ExecutorOptions:
    """The flags that choose and configure an executor."""

    name: str = "local"
    timeout_s: float | None = None
    launcher: str = "forkserver"  # on Ray, each node's worker starts experiments with it
    preload_dynamo: bool = True  # fork servers import torch._dynamo (launch.forkserver_launcher.children_import_dynamo)
    # local
    print_subprocess: bool = False
    server_log: Path | None = None
    max_parallel: int = 1
    gpu_ids: tuple[str, ...] = ()
    parallel_cpu: bool = False
    # ray
    ray_address: str | None = None
    allow_mixed_versions: bool = False


def create(options: ExecutorOptions) -> Executor:
    """The executor named by `options.name`; Ray is imported only when it is the one asked for."""
    if options.name == "ray":
        from experiment_runner.parent.executors.ray import RayConfig, RayExecutor

        return RayExecutor(RayConfig(options.ray_address, options.allow_mixed_versions, options.timeout_s,
                                     options.launcher, options.preload_dynamo))
    from experiment_runner.parent.executors.local import LocalExecutor, Parallelism
    from experiment_runner.parent.launch.forkserver_launcher import ForkServerLauncher
    from experiment_runner.parent.launch.subprocess_launcher import SubprocessLauncher

    if options.launcher == "forkserver":
        assert options.server_log is not None
        options.server_log.parent.mkdir(parents=True, exist_ok=True)
        launcher: SubprocessLauncher = ForkServerLauncher(
            timeout_s=options.timeout_s, print_subprocess=options.print_subprocess, server_log=options.server_log,
            preload_dynamo=options.preload_dynamo)
    else:
        launcher = SubprocessLauncher(timeout_s=options.timeout_s, print_subprocess=options.print_subprocess)
    return LocalExecutor(launcher, Parallelism(options.max_parallel, options.gpu_ids, options.parallel_cpu))
