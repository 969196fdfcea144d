"""The executor interface: what every executor gets (a Job) and must do (Executor)."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Protocol, Sequence

from experiment_runner.core.matrix import Planned
from experiment_runner.core.record import ChildOutcome, RecordContext, build_record
from experiment_runner.parent.launch.env import remove_leftovers


@dataclass(frozen=True)
class Job:
    """What every executor needs to turn an experiment into its one record."""

    ctx: RecordContext
    timeout_s: float | None = None
    source: str | None = None

    def experiment_dir(self, planned: Planned) -> Path:
        """The experiment's folder; with --processes, one folder per process inside it."""
        folder = self.ctx.output_dir / "runs" / self.ctx.run_id / planned.experiment.dirname
        return folder / f"process_{planned.process_index}" if self.ctx.processes > 1 else folder

    def artifacts_dir(self, planned: Planned) -> Path:
        """The folder of the experiment's latest attempt: its own folder for the first,
        `attempt_<n>/` inside it for the n-th (a retry, or a rerun after a kill)."""
        base = self.experiment_dir(planned)
        numbers = [int(p.name[len("attempt_"):]) for p in base.glob("attempt_*") if p.name[len("attempt_"):].isdigit()]
        return base / f"attempt_{max(numbers)}" if numbers else base

    def new_attempt_dir(self, planned: Planned) -> Path:
        """A folder for a new attempt, created: the experiment's own folder the first time, then
        `attempt_2/`, `attempt_3/`, ... so that every record's log and files are its own attempt's.
        The attempt before is over (one runner per results file, the reaper ended a dead one's
        processes): what it left that is not evidence goes."""
        latest = self.artifacts_dir(planned)
        if not (latest / "child.log").exists() and not (latest / "task.json").exists():
            latest.mkdir(parents=True, exist_ok=True)
            return latest
        remove_leftovers(latest)  # an attempt that died with its runner left them; its log stays
        base = self.experiment_dir(planned)
        number = int(latest.name[len("attempt_"):]) + 1 if latest != base else 2
        folder = base / f"attempt_{number}"
        folder.mkdir(parents=True)
        return folder

    def skipped(self, planned: Planned) -> dict[str, Any]:
        return build_record(self.ctx, planned.experiment, skip_reason=planned.skip_reason, source=self.source,
                            process_index=planned.process_index)

    def record(self, planned: Planned, outcome: ChildOutcome, placement: dict[str, Any] | None = None,
               environment: dict[str, Any] | None = None) -> dict[str, Any]:
        """The record of a launched experiment; `environment` describes the node it ran on
        when that is not this host (used when the child left no result of its own)."""
        ctx = self.ctx if environment is None else replace(self.ctx, host_environment=environment)
        artifacts_dir = self.artifacts_dir(planned)
        try:
            return build_record(ctx, planned.experiment, outcome, artifacts_dir=artifacts_dir,
                                timeout_s=self.timeout_s, source=self.source, placement=placement,
                                process_index=planned.process_index)
        finally:
            remove_leftovers(artifacts_dir)


class Executor(Protocol):
    """Runs planned experiments and yields (planned, record) as each one finishes.

    `interrupt` may be called from a signal handler: running experiments end as
    `interrupted`, none is started after it, and `schedule` returns once they are recorded.
    """

    name: str
    interrupt_requested: bool

    def prepare(self, todo: Sequence[Planned]) -> None:
        """Check that these experiments can run here, before anything is written: UsageError if not."""

    def schedule(self, todo: Sequence[Planned], job: Job) -> Iterator[tuple[Planned, dict[str, Any]]]: ...

    def interrupt(self) -> None: ...

    def close(self) -> None: ...


def forwarded_environment() -> dict[str, str]:
    """The runner's own variables (plugins, extra suites) that must reach children started
    elsewhere, since a remote node's processes do not inherit this shell."""
    return {k: v for k, v in os.environ.items() if k.startswith("EXPERIMENT_RUNNER_")}
