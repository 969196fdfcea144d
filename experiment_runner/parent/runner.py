"""The run loop: every planned experiment, one record each, progress as it goes.

Experiments may run side by side (--max-parallel): one per GPU, each child pinned with
CUDA_VISIBLE_DEVICES. CPU experiments run alone unless asked otherwise, because two CPU
benchmarks on one host slow each other down. Records are built as children finish but
written only by the main thread of this process, one whole line each.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from experiment_runner.core.matrix import Plan, Planned
from experiment_runner.core.protocol import Task
from experiment_runner.core.record import RecordContext, build_record
from experiment_runner.core.results import ResultsFileError
from experiment_runner.parent.launch.env import scratch_cleanup
from experiment_runner.parent.launch.subprocess import SubprocessLauncher
from experiment_runner.parent.store import append_record


@dataclass
class RunOutcome:
    records: list[dict[str, Any]] = field(default_factory=list)
    interrupted: bool = False


@dataclass(frozen=True)
class Parallelism:
    """How many experiments may run at once, and on which GPUs.

    cuda experiments take one id of `gpu_ids` each (CUDA_VISIBLE_DEVICES=id in the child);
    other experiments run alone unless `parallel_cpu`.
    """

    max_parallel: int = 1
    gpu_ids: tuple[str, ...] = ()
    parallel_cpu: bool = False


def describe(record: dict[str, Any]) -> str:
    """One progress line: status and median time per iteration."""
    stats = (record.get("stats") or {}).get("per_iter_time")
    timing = f" {stats['median'] * 1e3:.3f} ms/iter" if stats else ""
    if stats and stats.get("unstable"):
        timing += " (unstable)"
    error = record.get("error") or {}
    why = f" - {error.get('type')}: {str(error.get('message', ''))[:120]}" if record["status"] != "ok" else ""
    return f"{record['status']}{timing}{why}"


class Runner:
    """Runs a plan with one launcher; the parent is the only writer of the results file."""

    def __init__(self, ctx: RecordContext, results_path: Path, launcher: SubprocessLauncher,
                 timeout_s: float | None = None, progress_bar: bool = False,
                 echo: Callable[[str], None] | None = None, parallelism: Parallelism = Parallelism()) -> None:
        self.ctx = ctx
        self.results_path = results_path
        self.launcher = launcher
        self.timeout_s = timeout_s
        self.progress_bar = progress_bar
        self.echo = echo or (lambda line: print(line, file=sys.stderr, flush=True))
        self.parallelism = parallelism

    def artifacts_dir(self, planned: Planned) -> Path:
        return self.ctx.output_dir / "runs" / self.ctx.run_id / planned.experiment.dirname

    def run_one(self, planned: Planned, source: str | None = None,
                extra_env: dict[str, str] | None = None) -> dict[str, Any]:
        exp = planned.experiment
        if planned.skip_reason is not None:
            return build_record(self.ctx, exp, skip_reason=planned.skip_reason, source=source)
        artifacts_dir = self.artifacts_dir(planned)
        artifacts_dir.mkdir(parents=True, exist_ok=True)
        task = Task(exp, self.ctx.options, str(artifacts_dir.resolve()))
        outcome = self.launcher.launch(task, artifacts_dir / "child.log", extra_env)
        try:
            return build_record(self.ctx, exp, outcome, artifacts_dir=artifacts_dir,
                                timeout_s=self.timeout_s, source=source)
        finally:
            scratch_cleanup(artifacts_dir)

    def run(self, plan: Plan, done: set[str] = frozenset(), source: str | None = None) -> RunOutcome:
        """Run what is not done yet. Ctrl-C kills the running children, records them as
        interrupted and returns; a failed write of a record raises ResultsFileError."""
        from tqdm import tqdm

        todo = [p for p in plan.planned if p.experiment.experiment_id not in done]
        outcome = RunOutcome()
        on_main_thread = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, lambda *_: self.launcher.interrupt()) if on_main_thread else None
        bar = tqdm(total=len(todo), disable=not self.progress_bar, unit="exp", dynamic_ncols=True,
                   file=sys.stderr)
        echo = tqdm.write if self.progress_bar else self.echo
        try:
            for planned, record in self._schedule(todo, source, bar):
                exp = planned.experiment
                try:
                    append_record(self.results_path, record)
                except ResultsFileError as exc:
                    raise ResultsFileError(f"{exc}; the record of {exp.model_name} {exp.config.label()} "
                                           "was not written, earlier records are intact "
                                           "(rerun with --resume)") from exc
                outcome.records.append(record)
                bar.update(1)
                echo(f"[{len(outcome.records)}/{len(todo)}] {exp.model_name} {exp.config.label()}: "
                     f"{describe(record)}")
            outcome.interrupted = self.launcher.interrupt_requested
        finally:
            bar.close()
            if on_main_thread:
                signal.signal(signal.SIGINT, previous)
        return outcome

    def _schedule(self, todo: Sequence[Planned], source: str | None, bar: Any):
        """Yield (planned, record) as experiments finish, starting them in plan order as
        slots free up. Stops starting new ones once interrupted."""
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
                    bar.set_description_str(f"{planned.experiment.model_name} "
                                            f"{planned.experiment.config.label()}"[:60])
                    env = {"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else None
                    running[pool.submit(self.run_one, planned, source, env)] = (planned, gpu, exclusive)
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
