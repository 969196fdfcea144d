"""The run loop: every planned experiment in order, one record each, progress as it goes."""

from __future__ import annotations

import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from experiment_runner.launcher import RecordContext, SubprocessLauncher, build_record, scratch_cleanup
from experiment_runner.matrix import Plan, Planned
from experiment_runner.protocol import Task
from experiment_runner.results import append_record


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
    """Runs a plan with one launcher; the parent is the only writer of the results file."""

    def __init__(self, ctx: RecordContext, results_path: Path, launcher: SubprocessLauncher,
                 timeout_s: float | None = None, progress_bar: bool = False,
                 echo: Callable[[str], None] | None = None) -> None:
        self.ctx = ctx
        self.results_path = results_path
        self.launcher = launcher
        self.timeout_s = timeout_s
        self.progress_bar = progress_bar
        self.echo = echo or (lambda line: print(line, file=sys.stderr, flush=True))

    def artifacts_dir(self, planned: Planned) -> Path:
        return self.ctx.output_dir / "runs" / self.ctx.run_id / planned.experiment.dirname

    def run_one(self, planned: Planned, source: str | None = None) -> dict[str, Any]:
        exp = planned.experiment
        if planned.skip_reason is not None:
            return build_record(self.ctx, exp, skip_reason=planned.skip_reason, source=source)
        artifacts_dir = self.artifacts_dir(planned)
        artifacts_dir.mkdir(parents=True, exist_ok=True)
        task = Task(exp, self.ctx.options, str(artifacts_dir.resolve()))
        outcome = self.launcher.launch(task, artifacts_dir / "child.log")
        try:
            return build_record(self.ctx, exp, outcome, artifacts_dir=artifacts_dir,
                                timeout_s=self.timeout_s, source=source)
        finally:
            scratch_cleanup(artifacts_dir)

    def run(self, plan: Plan, done: set[str] = frozenset(), source: str | None = None) -> RunOutcome:
        from tqdm import tqdm

        todo = [p for p in plan.planned if p.experiment.experiment_id not in done]
        outcome = RunOutcome()
        previous = signal.signal(signal.SIGINT, lambda *_: self.launcher.interrupt())
        bar = tqdm(total=len(todo), disable=not self.progress_bar, unit="exp", dynamic_ncols=True,
                   file=sys.stderr)
        echo = tqdm.write if self.progress_bar else self.echo
        try:
            for index, planned in enumerate(todo, start=1):
                exp = planned.experiment
                label = f"{exp.model_name} {exp.config.label()}"
                bar.set_description_str(label[:60])
                record = self.run_one(planned, source)
                append_record(self.results_path, record)
                outcome.records.append(record)
                bar.update(1)
                echo(f"[{index}/{len(todo)}] {label}: {describe(record)}")
                if self.launcher.interrupt_requested:
                    outcome.interrupted = True
                    break
        finally:
            bar.close()
            signal.signal(signal.SIGINT, previous)
        return outcome
