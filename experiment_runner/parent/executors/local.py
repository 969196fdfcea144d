"""The local executor: experiments on this host, each in its launcher's child process.

Experiments may run side by side (--max-parallel): one per GPU, each child pinned with
CUDA_VISIBLE_DEVICES. CPU experiments run alone unless asked otherwise, because two CPU
benchmarks on one host slow each other down. A failure to write an experiment's folder,
task or log file raises ResultsFileError naming the path and the OS error (exit 3).
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from experiment_runner.core.matrix import Planned
from experiment_runner.core.protocol import Task
from experiment_runner.core.results import ResultsFileError
from experiment_runner.parent.executors.interface import Job
from experiment_runner.parent.launch.subprocess_launcher import SubprocessLauncher


@dataclass(frozen=True)
class Parallelism:
    """How many experiments may run at once, and on which GPUs.

    cuda experiments take one id of `gpu_ids` each (CUDA_VISIBLE_DEVICES=id in the child);
    other experiments run alone unless `parallel_cpu`.
    """

    max_parallel: int = 1
    gpu_ids: tuple[str, ...] = ()
    parallel_cpu: bool = False


class LocalExecutor:
    """Runs experiments on this host through one launcher, in plan order as slots free up."""

    name = "local"

    def __init__(self, launcher: SubprocessLauncher, parallelism: Parallelism = Parallelism()) -> None:
        self.launcher = launcher
        self.parallelism = parallelism

    @property
    def interrupt_requested(self) -> bool:
        return self.launcher.interrupt_requested

    def prepare(self, todo: Sequence[Planned]) -> None:
        """Nothing to check: the session already matched the plan to this host's capabilities."""

    def interrupt(self) -> None:
        self.launcher.interrupt()

    def close(self) -> None:
        self.launcher.close()

    def run_one(self, planned: Planned, job: Job, extra_env: dict[str, str] | None = None) -> dict[str, Any]:
        if planned.skip_reason is not None:
            return job.skipped(planned)
        exp = planned.experiment
        try:
            artifacts_dir = job.new_attempt_dir(planned)
            task = Task(exp, job.ctx.options, str(artifacts_dir.resolve()))
            outcome = self.launcher.launch(task, artifacts_dir / "child.log", extra_env)
        except OSError as exc:  # the output side: the experiment's folder, task or log file
            if exc.filename is None:
                raise
            raise ResultsFileError(f"cannot write {exc.filename}: {exc.strerror or exc} "
                                   f"(the folder of {exp.model_name} {exp.config.label()})") from exc
        return job.record(planned, outcome)

    def schedule(self, todo: Sequence[Planned], job: Job) -> Iterator[tuple[Planned, dict[str, Any]]]:
        """Yield (planned, record) as experiments finish. Stops starting new ones once interrupted."""
        par = self.parallelism
        pending = deque(todo)
        free_gpus = list(par.gpu_ids)
        running: dict[Future, tuple[Planned, str | None, bool]] = {}
        pool = ThreadPoolExecutor(max_workers=max(1, par.max_parallel), thread_name_prefix="experiment")
        try:
            while pending or running:
                while pending and not self.launcher.interrupt_requested:
                    planned = pending[0]
                    needs_gpu = planned.experiment.config.accelerator == "cuda" and bool(par.gpu_ids) \
                        and planned.skip_reason is None
                    exclusive = not needs_gpu and not par.parallel_cpu and planned.skip_reason is None
                    busy = len(running) >= par.max_parallel or any(ex for _, _, ex in running.values())
                    if busy or (exclusive and running) or (needs_gpu and not free_gpus):
                        break
                    pending.popleft()
                    gpu = free_gpus.pop(0) if needs_gpu else None
                    env = {"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else None
                    running[pool.submit(self.run_one, planned, job, env)] = (planned, gpu, exclusive)
                if not running:
                    break
                finished, _ = wait(list(running), timeout=0.5, return_when=FIRST_COMPLETED)
                for future in finished:
                    planned, gpu, _ = running.pop(future)
                    if gpu is not None:
                        free_gpus.append(gpu)
                    yield planned, future.result()
        finally:
            if running:
                self.launcher.interrupt()
            pool.shutdown(wait=True)
