"""The run loop: every planned experiment, one record each, progress as it goes.

Where experiments execute is the executor's business (parent/executors: this host, or a
Ray cluster); records arrive here as they finish and are written only by the main thread
of this process, one whole line each.

SIGINT, SIGTERM and SIGHUP all stop a run the same way (`timeout`, Slurm, Kubernetes and
systemd stop jobs with SIGTERM; a closed terminal sends SIGHUP): the running experiments
are killed, each gets an `interrupted` record, and the run returns which signal stopped it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from experiment_runner.core.matrix import Plan, Planned, rounds
from experiment_runner.core.protocol import read_phase
from experiment_runner.core.record import RecordContext
from experiment_runner.core.results import ResultsFileError
from experiment_runner.parent.executors import Executor, Job
from experiment_runner.parent.store import append_record
from experiment_runner.parent.summary import printable

# The signals that stop a run as Ctrl-C does.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass
class RunOutcome:
    records: list[dict[str, Any]] = field(default_factory=list)
    stopped_by: int | None = None  # the signal that stopped the run, if one did

    @property
    def interrupted(self) -> bool:
        return self.stopped_by is not None


# How often the progress bar's note on the running experiments is refreshed.
BAR_REFRESH_S = 1.0


# A failure's message on its progress line: at most this many characters of its first line.
MESSAGE_CHARS = 400


def brief(message: str, width: int = MESSAGE_CHARS) -> str:
    """A message's first line in at most `width` characters, its end kept whole: messages end with
    what to do (`install it: pip install -r <checkout>/.../requirements.txt`, or a command and the URL of a
    download), so the middle goes."""
    line = next((part for part in str(message).strip().splitlines() if part.strip()), "")
    if len(line) <= width:
        return line
    tail = width * 2 // 3
    return f"{line[:width - tail - 3]}...{line[-tail:]}"


def describe(record: dict[str, Any], output_dir: Path | None = None) -> str:
    """One progress line: status and median time per iteration; for a failure, why and its log."""
    stats = (record.get("stats") or {}).get("per_iter_time")
    timing = f" {stats['median'] * 1e3:.3f} ms/iter" if stats else ""
    if stats and stats.get("unstable"):
        timing += " (unstable)"
    error = record.get("error") or {}
    why = ""
    if record["status"] not in ("ok", "skipped"):
        why = f" - {error.get('type')}: {brief(error.get('message', ''))}"
        log = (record.get("artifacts") or {}).get("log")
        if log and output_dir is not None:
            why += f" (log: {output_dir / log})"
    return f"{record['status']}{timing}{why}"


class Runner:
    """Runs a plan with one executor; the parent is the only writer of the results file."""

    def __init__(self, ctx: RecordContext, results_path: Path, executor: Executor,
                 timeout_s: float | None = None, progress_bar: bool = False,
                 echo: Callable[[str], None] | None = None, heartbeat_s: float = 30.0) -> None:
        self.ctx = ctx
        self.results_path = results_path
        self.executor = executor
        self.timeout_s = timeout_s
        self.progress_bar = progress_bar
        self.heartbeat_s = heartbeat_s
        self.echo = echo or (lambda line: print(line, file=sys.stderr, flush=True))

    def run(self, plan: Plan, done: set[tuple[str, int]] = frozenset(), source: str | None = None,
            failed: set[str] = frozenset()) -> RunOutcome:
        """Run what is not done yet: `ctx.processes` fresh processes per experiment, round by
        round (round i runs process i of every experiment, in plan order).

        `done` holds the (experiment_id, process index) pairs already recorded. Once a
        process of an experiment fails (in an earlier round, or in `failed` from the run
        being resumed) its later processes are not started: they would fail alike, a
        timeout each time. SIGINT, SIGTERM or SIGHUP end the running experiments, records them as
        interrupted and returns; a failed write of a record raises ResultsFileError."""
        from tqdm import tqdm

        todo = rounds(plan.planned, self.ctx.processes, done, failed)
        failed = set(failed)
        outcome = RunOutcome()
        job = Job(self.ctx, self.timeout_s, source)
        stopped_by: list[int] = []

        def stop(signum: int, _frame: Any) -> None:
            stopped_by.append(signum)
            self.executor.interrupt()

        on_main_thread = threading.current_thread() is threading.main_thread()
        previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS} if on_main_thread else {}
        bar = tqdm(total=len(todo), disable=not self.progress_bar, unit="exp", dynamic_ncols=True,
                   file=sys.stderr)
        echo = tqdm.write if self.progress_bar else self.echo
        total = len(todo)
        recorded: set[tuple[str, int]] = set()
        heartbeat = threading.Event()
        watcher = threading.Thread(target=self._heartbeat, args=(todo, recorded, job, bar, heartbeat),
                                   name="heartbeat", daemon=True)
        watcher.start()
        try:
            for index in sorted({p.process_index for p in todo}):
                if self.executor.interrupt_requested:
                    break
                batch = [p for p in todo if p.process_index == index and p.experiment.experiment_id not in failed]
                total -= sum(p.process_index == index for p in todo) - len(batch)
                bar.total = total
                for planned, record in self.executor.schedule(batch, job):
                    self._write(planned, record)
                    recorded.add((planned.experiment.experiment_id, planned.process_index))
                    outcome.records.append(record)
                    if record["status"] not in ("ok", "skipped"):
                        failed.add(planned.experiment.experiment_id)
                    bar.update(1)
                    echo(printable(f"[{len(outcome.records)}/{total}] {self._label(planned, record)}: "
                                   f"{describe(record, self.ctx.output_dir)}"))
            if self.executor.interrupt_requested:
                outcome.stopped_by = stopped_by[0] if stopped_by else signal.SIGINT
        finally:
            heartbeat.set()
            watcher.join()
            bar.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return outcome

    def _heartbeat(self, todo: list[Planned], recorded: set[tuple[str, int]], job: Job, bar: Any,
                   stop: threading.Event) -> None:
        """What is running and in which phase: on the progress bar, or a line every heartbeat_s.

        Running experiments are those without a record whose folder holds a phase file the
        worker wrote during this run (read_phase); on Ray, folders fill only as records arrive.
        One listing of the run's folder per beat: only experiments that were launched (their
        folder exists) and are not recorded yet are read, so a long plan costs no I/O while an
        experiment is timed."""
        started, total = time.time(), len(todo)
        interval = BAR_REFRESH_S if self.progress_bar else self.heartbeat_s
        run_dir = self.ctx.output_dir / "runs" / self.ctx.run_id
        while not stop.wait(interval):
            now, running = time.time(), []
            try:
                launched = {entry.name for entry in os.scandir(run_dir)}
            except OSError:
                launched = set()
            for planned in todo:
                if ((planned.experiment.experiment_id, planned.process_index) in recorded or planned.skip_reason
                        or planned.experiment.dirname not in launched):
                    continue
                phase = read_phase(job.artifacts_dir(planned))
                if phase is not None and phase[1] >= started:
                    running.append(f"{self._name(planned)}: {phase[0]} for {now - phase[1]:.0f} s")
            doing = "; ".join(running) or "starting the next experiment"
            if self.progress_bar:
                bar.set_postfix_str(printable(doing)[:80], refresh=True)
            else:
                self.echo(printable(f"[{len(recorded)}/{total} recorded, {now - started:.0f} s] running: {doing}"))

    def _write(self, planned: Planned, record: dict[str, Any]) -> None:
        exp = planned.experiment
        try:
            append_record(self.results_path, record, stopping=lambda: self.executor.interrupt_requested,
                          warn=lambda line: self.echo(f"experiment_runner: warning: {printable(line)}"))
        except ResultsFileError as exc:
            raise ResultsFileError(f"{exc}; the record of {exp.model_name} {exp.config.label()} "
                                   "was not written, earlier records are intact "
                                   "(rerun the command: it resumes)") from exc

    def _name(self, planned: Planned) -> str:
        exp = planned.experiment
        process = f" (process {planned.process_index + 1}/{self.ctx.processes})" if self.ctx.processes > 1 else ""
        return f"{exp.model_name} {exp.config.label()}{process}"

    def _label(self, planned: Planned, record: dict[str, Any]) -> str:
        where = f" on {record['placement']['host']}" if record["placement"]["executor"] != "local" else ""
        return f"{self._name(planned)}{where}"
