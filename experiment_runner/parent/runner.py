"""The run loop: every planned experiment, one record each, progress as it goes.

Where experiments execute is the executor's business (parent/executors: this host, or a
Ray cluster); records arrive here as they finish and are written only by the main thread
of this process, one whole line each.
"""

from __future__ import annotations

import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from experiment_runner.core.matrix import Plan
from experiment_runner.core.record import RecordContext
from experiment_runner.core.results import ResultsFileError
from experiment_runner.parent.executors import Executor, Job
from experiment_runner.parent.store import append_record


@dataclass
class RunOutcome:
    records: list[dict[str, Any]] = field(default_factory=list)
    interrupted: bool = False


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
    """Runs a plan with one executor; the parent is the only writer of the results file."""

    def __init__(self, ctx: RecordContext, results_path: Path, executor: Executor,
                 timeout_s: float | None = None, progress_bar: bool = False,
                 echo: Callable[[str], None] | None = None) -> None:
        self.ctx = ctx
        self.results_path = results_path
        self.executor = executor
        self.timeout_s = timeout_s
        self.progress_bar = progress_bar
        self.echo = echo or (lambda line: print(line, file=sys.stderr, flush=True))

    def run(self, plan: Plan, done: set[str] = frozenset(), source: str | None = None) -> RunOutcome:
        """Run what is not done yet. Ctrl-C or SIGTERM ends the running experiments, records
        them as interrupted and returns; a failed write of a record raises ResultsFileError."""
        from tqdm import tqdm

        todo = [p for p in plan.planned if p.experiment.experiment_id not in done]
        outcome = RunOutcome()
        job = Job(self.ctx, self.timeout_s, source)
        on_main_thread = threading.current_thread() is threading.main_thread()
        previous = {}
        if on_main_thread:
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, lambda *_: self.executor.interrupt())
        bar = tqdm(total=len(todo), disable=not self.progress_bar, unit="exp", dynamic_ncols=True,
                   file=sys.stderr)
        echo = tqdm.write if self.progress_bar else self.echo
        try:
            for planned, record in self.executor.schedule(todo, job):
                exp = planned.experiment
                try:
                    append_record(self.results_path, record)
                except ResultsFileError as exc:
                    raise ResultsFileError(f"{exc}; the record of {exp.model_name} {exp.config.label()} "
                                           "was not written, earlier records are intact "
                                           "(rerun the command: it resumes)") from exc
                outcome.records.append(record)
                bar.update(1)
                where = f" on {record['placement']['host']}" if record["placement"]["executor"] != "local" else ""
                echo(f"[{len(outcome.records)}/{len(todo)}] {exp.model_name} {exp.config.label()}{where}: "
                     f"{describe(record)}")
            outcome.interrupted = self.executor.interrupt_requested
        finally:
            bar.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return outcome
