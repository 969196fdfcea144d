"""The Ray executor: each experiment is one Ray task on a cluster node.

The task starts the experiment in its own child process on the node through the same
launcher as a local run (`--launcher`: the fork server by default, one per Ray worker
process, kept for the worker's later tasks and gone with it; or a plain subprocess), so
isolation, the timeout, crash classification and the record are what they are locally. It streams two items back: where it started (node,
host, GPU, the node's environment), then the child's outcome with its log and small
artifacts. The driver rebuilds the artifact folder here and builds the record with
`core.record.build_record`; the runner stays the only writer of the results file.

Resources: a cuda experiment asks for one GPU (Ray pins CUDA_VISIBLE_DEVICES); a CPU
experiment takes one `experiment_slot`, a custom resource each node declares, so CPU
timings never share a node unless its owner declares more slots. A node lost mid-experiment
gives that experiment a `crashed` record with error.reason "node lost" (no automatic retry:
`--resume --retry-failed` runs it again, as a new record). Ray is imported here only, lazily.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from experiment_runner.core.environment import describe_environment
from experiment_runner.core.logs import read_log_tail
from experiment_runner.core.matrix import Planned
from experiment_runner.core.protocol import PROTOCOL_VERSION, Task
from experiment_runner.core.record import ChildOutcome
from experiment_runner.core.requirements import install_command
from experiment_runner.errors import UsageError
from experiment_runner.parent.executors.interface import Job, forwarded_environment
from experiment_runner.parent.launch.env import remove_leftovers
from experiment_runner.parent.launch.forkserver_launcher import ForkServerLauncher
from experiment_runner.parent.launch.node_folder import node_folder
from experiment_runner.parent.launch.subprocess_launcher import SubprocessLauncher

SLOT = "experiment_slot"
# Artifacts travel back through Ray's object store; bigger files are dropped and listed.
MAX_FILE_BYTES = 8 << 20
MAX_TOTAL_BYTES = 64 << 20
LEFT_ON_NODE = "left_on_node.txt"
# After Ctrl-C/SIGTERM a task gets this long to honour its cancellation (a KeyboardInterrupt,
# which a wedged worker never sees), then as long again after a forced cancel (which a worker
# that cannot run at all does not see either); then the driver records it `interrupted` and
# leaves it to Ray, which kills a finished job's workers, so the driver always exits.
CANCEL_GRACE_S = 45.0
NEXT_ITEM_TIMEOUT_S = 0.5


@dataclass(frozen=True)
class RayConfig:
    address: str | None
    allow_mixed_versions: bool = False
    timeout_s: float | None = None
    launcher: str = "forkserver"
    preload_dynamo: bool = True


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError(f"--executor=ray needs Ray, which is not installed here: {install_command(['ray'])}") from None
    return ray


def reachable(address: str, timeout_s: float = 10.0) -> None:
    """Fail fast on a HOST:PORT nobody listens on: ray.init would retry for minutes."""
    host, _, port = address.rpartition(":")
    if "://" in address or not host or not port.isdigit():
        return  # "auto", ray://...: Ray resolves these itself
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise UsageError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}") from None


def resources_for(planned: Planned) -> dict[str, Any]:
    """The Ray task options that give an experiment its device, and only that."""
    accelerator = planned.experiment.config.accelerator
    if accelerator == "cuda":
        return {"num_cpus": 0, "num_gpus": 1}
    if accelerator == "tpu":
        return {"num_cpus": 0, "resources": {"TPU": 1}}
    return {"num_cpus": 0, "resources": {SLOT: 1}}


def node_description() -> dict[str, Any]:
    """Where this task runs: host, Ray node id, pinned GPU, and the node's environment block."""
    import ray

    context = ray.get_runtime_context()
    gpus = context.get_accelerator_ids().get("GPU") or []
    return {"host": socket.gethostname(), "node_id": context.get_node_id(),
            "cuda_visible_devices": ",".join(map(str, gpus)) or None, "environment": describe_environment()}


def collect_files(folder: Path) -> tuple[dict[str, bytes], list[str]]:
    """The small files of an experiment's folder (relative path -> bytes) and those left out."""
    files: dict[str, bytes] = {}
    left: list[str] = []
    total = 0
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = str(path.relative_to(folder))
        size = path.stat().st_size
        if size > MAX_FILE_BYTES or total + size > MAX_TOTAL_BYTES:
            left.append(f"{relative} ({size} bytes)")
            continue
        files[relative] = path.read_bytes()
        total += size
    return files, left


# The launcher of this Ray worker process, by name: a fork server started by the worker's first
# experiment serves its later ones (imports paid once per worker, not once per experiment).
_node_launchers: dict[str, SubprocessLauncher] = {}


def node_launcher(name: str, timeout_s: float | None, run_env: dict[str, str],
                  preload_dynamo: bool = True) -> SubprocessLauncher:
    """This worker's launcher. The run's own variables go into the worker's environment first, so
    a fork server it starts carries them from its start, as a local run's server does (a forked
    child's /proc environ is its server's: that is how the run's processes are found)."""
    os.environ.update(run_env)  # this worker serves this run's job only
    launcher = _node_launchers.get(name)
    if launcher is None:
        launcher = (ForkServerLauncher(timeout_s=timeout_s, preload_dynamo=preload_dynamo) if name == "forkserver"
                    else SubprocessLauncher(timeout_s))
        _node_launchers[name] = launcher
    launcher.timeout_s = timeout_s
    return launcher


def run_on_node(task: dict[str, Any], extra_env: dict[str, str], timeout_s: float | None,
                launcher: str = "forkserver", preload_dynamo: bool = True) -> Iterator[Any]:
    """The Ray task body: say where it runs, then run the experiment in a child process there.

    Cancelling the task raises KeyboardInterrupt here (between bytecodes: the launchers wait in
    short slices so that it lands at once), and the launcher kills the experiment and what it
    started on the way out; a worker that dies takes the child with it (the launcher asks Linux
    for a parent-death signal), and the next task on the node removes the folder it left
    (launch/node_folder.py).
    """
    where = node_description()
    yield where
    with node_folder() as folder:
        local = Task.from_dict({**task, "artifacts_dir": str(folder)})
        env = dict(extra_env)
        if where["cuda_visible_devices"] is not None:
            env["CUDA_VISIBLE_DEVICES"] = where["cuda_visible_devices"]
        log = folder / "child.log"
        outcome = node_launcher(launcher, timeout_s, extra_env, preload_dynamo).launch(local, log, env)
        remove_leftovers(folder)
        files, left = collect_files(folder)
        yield {"outcome": dataclasses.asdict(outcome), "files": files, "left_on_node": left}


def node_facts() -> dict[str, Any]:
    """What a node runs (its environment block) and which task protocol its checkout speaks."""
    return {**describe_environment(), "protocol": PROTOCOL_VERSION}


def other_protocols(facts: Sequence[dict[str, Any]]) -> str:
    """The nodes whose checkout speaks another protocol version than this driver's, by version;
    empty where every node speaks this one."""
    other: dict[Any, set[str]] = {}
    for node in facts:
        if node.get("protocol") != PROTOCOL_VERSION:
            other.setdefault(node.get("protocol"), set()).add(str(node.get("hostname")))
    return "; ".join(f"version {v}: {', '.join(sorted(hosts))}" for v, hosts in other.items())


def _first_line(exc: BaseException) -> str:
    return next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)


@dataclass
class _InFlight:
    planned: Planned
    where: dict[str, Any] | None = None


class RayExecutor:
    """Submits every experiment as a Ray task and records each as its result streams back."""

    name = "ray"

    def __init__(self, config: RayConfig) -> None:
        self.config = config
        self.interrupt_requested = False
        self.ray = import_ray()
        self._connected = False
        self._forced = False  # the cancelled tasks' workers were killed (see CANCEL_GRACE_S)

    def prepare(self, todo: Sequence[Planned]) -> None:
        """Join the cluster and check that it can run this plan: UsageError otherwise."""
        ray = self.ray
        address = self.config.address
        if not address:
            raise UsageError("--executor=ray needs the cluster's address: --ray-address=HOST:PORT or RAY_ADDRESS "
                             "(see docs/many-hosts.md)")
        reachable(address)
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR,
                     configure_logging=True)
        except Exception as exc:  # noqa: BLE001 - Ray raises many types for an unreachable cluster
            raise UsageError(f"cannot connect to the Ray cluster at {address}: {str(exc).splitlines()[0]}") from None
        self._connected = True
        self.check_resources(todo)
        self.check_versions()

    def check_resources(self, todo: Sequence[Planned]) -> None:
        available = self.ray.cluster_resources()
        for planned in todo:
            if planned.skip_reason is not None:
                continue
            wanted = resources_for(planned)
            needs = {**wanted.get("resources", {}), **({"GPU": 1} if wanted.get("num_gpus") else {})}
            missing = [name for name in needs if available.get(name, 0) < needs[name]]
            if missing:
                accelerator = planned.experiment.config.accelerator
                hint = (f"start each node with ray start ... --resources='{{\"{SLOT}\": 1}}'" if SLOT in missing
                        else "no node of the cluster offers it")
                raise UsageError(f"the Ray cluster at {self.config.address} has no {missing[0]} resource for "
                                 f"{accelerator} experiments: {hint}")

    def check_versions(self) -> None:
        """Refuse a cluster whose nodes run different torch versions (their timings do not compare)."""
        ray = self.ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        probe = ray.remote(num_cpus=0, max_retries=0)(node_facts)
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        try:
            envs = ray.get([probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                            .remote() for n in nodes])
        except ray.exceptions.RayError as exc:  # e.g. a node without experiment_runner installed
            raise UsageError(f"a node of the Ray cluster at {self.config.address} cannot run the runner's code "
                             f"(is experiment_runner installed there?): {_first_line(exc)}") from None
        mismatch = other_protocols(envs)
        if mismatch:
            raise UsageError(f"the Ray cluster at {self.config.address} has nodes that speak another version of "
                             f"the runner's task protocol than this driver's {PROTOCOL_VERSION} ({mismatch}): "
                             "install the same checkout on every node")
        by_version: dict[str | None, list[str]] = {}
        for env in envs:
            by_version.setdefault(env.get("torch"), []).append(str(env.get("hostname")))
        if len(by_version) > 1 and not self.config.allow_mixed_versions:
            listed = "; ".join(f"torch {v}: {', '.join(sorted(set(h)))}" for v, h in by_version.items())
            raise UsageError(f"the Ray cluster's nodes run different torch versions ({listed}); "
                             "pass --allow-mixed-versions to run anyway")

    def interrupt(self) -> None:
        """Safe in a signal handler: only a flag; the scheduling loop cancels the tasks."""
        self.interrupt_requested = True

    def close(self) -> None:
        if self._connected:
            self.ray.shutdown()
            self._connected = False

    def schedule(self, todo: Sequence[Planned], job: Job) -> Iterator[tuple[Planned, dict[str, Any]]]:
        ray = self.ray
        body = ray.remote(max_retries=0)(run_on_node)
        extra_env = forwarded_environment()
        in_flight: dict[Any, _InFlight] = {}
        for planned in todo:
            if planned.skip_reason is not None:
                yield planned, job.skipped(planned)
                continue
            task = Task(planned.experiment, job.ctx.options, "").to_dict()
            generator = body.options(**resources_for(planned)).remote(task, extra_env, self.config.timeout_s,
                                                                      self.config.launcher, self.config.preload_dynamo)
            in_flight[generator] = _InFlight(planned)
        cancelled_at: float | None = None
        try:
            while in_flight:
                if self.interrupt_requested and cancelled_at is None:
                    for generator in in_flight:
                        ray.cancel(generator)
                    cancelled_at = time.monotonic()
                waited = 0.0 if cancelled_at is None else time.monotonic() - cancelled_at
                if waited > CANCEL_GRACE_S and not self._forced:
                    for generator in in_flight:
                        ray.cancel(generator, force=True)
                    self._forced = True
                if waited > 2 * CANCEL_GRACE_S:
                    for state in in_flight.values():
                        if state.where is not None:
                            yield state.planned, self._interrupted(state, job, abandoned=True)
                    return
                ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=0.2)
                for generator in ready:
                    state = in_flight[generator]
                    finished, record = self._advance(generator, state, job)
                    if finished:
                        del in_flight[generator]
                    if record is not None:
                        yield state.planned, record
        finally:
            for generator in in_flight:
                ray.cancel(generator, force=True)

    def _advance(self, generator: Any, state: _InFlight, job: Job) -> tuple[bool, dict[str, Any] | None]:
        """Take the next item of an experiment's stream: (is it over, its record if it has one).

        An experiment cancelled before it started leaves no record (it never ran, as
        locally); one cancelled while running is `interrupted`, also when its worker had to
        be killed because it did not honour the cancellation in time; one whose node or worker
        died is `crashed` with error.reason "node lost"; a task that failed by itself is
        `crashed` with error.reason "task failed on its node"."""
        ray = self.ray
        try:
            # Not next(generator): at the end of a stream it waits for the task to finish, forever
            # if its worker is wedged. Ray's own bounded form of it returns a nil ref on timeout.
            ref = generator._next_sync(timeout_s=NEXT_ITEM_TIMEOUT_S)
            if ref.is_nil():
                return False, None
            item = ray.get(ref)
        except StopIteration:
            return True, None
        except ray.exceptions.RayError as exc:
            # Cancelled, or (after Ctrl-C/SIGTERM) its worker killed after the grace period.
            if isinstance(exc, ray.exceptions.TaskCancelledError) or self.interrupt_requested:
                return True, None if state.where is None else self._interrupted(state, job)
            lost = isinstance(exc, (ray.exceptions.NodeDiedError, ray.exceptions.WorkerCrashedError,
                                    ray.exceptions.ObjectLostError))
            # Anything else is the task itself failing on its node (say, a node that cannot import the
            # runner): the experiment still gets its one record, and the run goes on.
            outcome = ChildOutcome(None, None, lost_reason="node lost" if lost else "task failed on its node",
                                   lost_detail=f"{type(exc).__name__}: {_first_line(exc)}",
                                   log_tail=str(exc)[-4000:] if not lost else "", launcher=self.config.launcher)
            where = state.where or {}
            return True, job.record(state.planned, outcome, self._placement(where), where.get("environment"))
        if state.where is None:
            state.where = item
            return False, None
        return True, self._finish(state, item, job)

    def _interrupted(self, state: _InFlight, job: Job, abandoned: bool = False) -> dict[str, Any]:
        """Its record after Ctrl-C/SIGTERM, saying how the cancellation ended when it was not honoured."""
        note = None
        if abandoned:
            note = (f"its Ray task was still running {2 * CANCEL_GRACE_S:.0f} s after the cancellation and "
                    "was left to Ray")
        elif self._forced:
            note = f"its Ray worker did not honour the cancellation within {CANCEL_GRACE_S:.0f} s and was killed"
        outcome = ChildOutcome(None, None, interrupted=True, launcher=self.config.launcher, launcher_note=note)
        job.new_attempt_dir(state.planned)  # this attempt's own (empty) folder: its files stayed on the node
        return job.record(state.planned, outcome, self._placement(state.where), state.where["environment"])

    def _finish(self, state: _InFlight, item: dict[str, Any], job: Job) -> dict[str, Any]:
        folder = job.new_attempt_dir(state.planned)
        for relative, data in item["files"].items():
            target = folder / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        if item["left_on_node"]:
            (folder / LEFT_ON_NODE).write_text(
                f"too large to bring back from {state.where['host']} (over {MAX_FILE_BYTES} bytes each or "
                f"{MAX_TOTAL_BYTES} in all), so not kept:\n"
                + "\n".join(item["left_on_node"]) + "\n")
        outcome = ChildOutcome.from_dict(item["outcome"])
        outcome.log_tail = outcome.log_tail or read_log_tail(folder / "child.log")
        return job.record(state.planned, outcome, self._placement(state.where), state.where["environment"])

    @staticmethod
    def _placement(where: dict[str, Any]) -> dict[str, Any]:
        return {"executor": "ray", "host": where.get("host"), "node_id": where.get("node_id")}
