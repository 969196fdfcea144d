"""`history --confirm` and `compare --confirm`: run each suspect again now, and alert only for
what the reruns uphold.

A step in the newest run is one point; a regression found tonight may rest on one noisy
night. Alert systems that page people retrigger before they alert. Here each suspect
experiment (a suspected slowdown in the newest run, or a regression first found in the
window) runs again, alone, with `--processes N`, through the command `history` prints for
it (analysis.repro), into `confirm/` beside the results file of its newest record. The
reruns are the second point after the change: a slowdown is upheld when the reruns' median
is as far above the runs before the change as a change must be (`--min-effect` noise units
and `--min-change`), a status or verification change when the reruns end the same way.
The reruns stay on disk, so the next `history` over the folder sees them as a run. `compare`'s
suspects are its regressions and new failures, judged against run A.

A rerun that cannot run (its folder cannot be written, its suite is not importable here, the
runner fails) or that leaves no measurement to judge confirms nothing and clears nothing:
its suspect stays an alert, said as "CANNOT CONFIRM" with the reason.
"""

from __future__ import annotations

import math
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from experiment_runner.analysis.loader import Row, load_rows
from experiment_runner.analysis.repro import repro_command

CONFIRM_FOLDER = "confirm"
DEFAULT_PROCESSES = 5


@dataclass(frozen=True)
class Verdict:
    experiment_id: str
    metric: str
    upheld: bool
    measured: Any  # the reruns' value of the metric (None when they left no usable record)
    reason: str
    output: str  # the folder the reruns wrote to
    # False when the reruns could not judge it (no rerun, no record, no figure): the alert stands
    judged: bool = True

    @property
    def alerts(self) -> bool:
        """Whether the suspect still alerts: upheld, or not judged (unconfirmable is not unconfirmed)."""
        return self.upheld or not self.judged


@dataclass(frozen=True)
class Suspect:
    """What `judge` reads of a change: history's Change has these fields too."""

    experiment_id: str
    metric: str  # "time", "compile_time", "memory", "status" or "verification"
    before: Any  # the value before the change (seconds for time)
    after: Any
    noise: float | None  # the experiment's run-to-run noise (log units), when known


def suspects(changes: Sequence[Any], alerts: Sequence[Any]) -> list[Any]:
    """What to confirm: slowdowns suspected in the newest run and regressions that would alert."""
    return [c for c in changes if (c.kind == "suspected" and (c.size or 0.0) > 0) or c in alerts]


def _rerun(argv: list[str], folder: Path, processes: int) -> list[Row]:
    """Run the experiment of `argv` (a repro line's flags) again into `folder`; its rows."""
    args = [a for a in argv if not a.startswith("--processes=")]
    command = [sys.executable, "-m", "experiment_runner", *args, f"--processes={processes}",
               f"--output-dirname={folder}", "--no-resume", "--no-progress-bar"]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    results = folder / "results.jsonl"
    if proc.returncode != 0 or not results.is_file():  # 1 is the runner's own failure, not a result
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"the rerun exited with status {proc.returncode}: {tail}")
    rows = load_rows([results])
    newest = rows[-1].run_id if rows else None
    return [r for r in rows if r.run_id == newest]


def _value(row: Row, metric: str) -> Any:
    return {"time": row.median_per_iter_time_s, "compile_time": row.compile_time_s,
            "memory": row.peak_allocated_bytes or row.timed_peak_rss_bytes,
            "status": row.status, "verification": row.verification_code}[metric]


def judge(change: Any, row: Row | None, min_effect: float, min_change: float) -> tuple[bool | None, Any, str]:
    """Whether the rerun `row` upholds `change` (None: it cannot tell), what it measured, and why."""
    if row is None:
        return None, None, "the reruns left no record of this experiment"
    measured = _value(row, change.metric)
    if change.metric in ("status", "verification"):
        upheld = measured == change.after
        return upheld, measured, f"the reruns ended {measured} (before the change: {change.before})"
    if row.status != "ok" or not isinstance(measured, (int, float)) or not change.before:
        return None, measured, f"the reruns ended {row.status}, with no {change.metric} to compare"
    step = math.log(measured / change.before)
    needed = max(min_effect * (change.noise or 0.0), math.log1p(min_change))
    upheld = step >= needed
    return upheld, measured, (f"the reruns measured {math.expm1(step):+.1%} against the runs before the change "
                              f"({'at least' if upheld else 'less than'} the {math.expm1(needed):.1%} a change needs)")


def confirm(changes: Sequence[Any], info: dict[str, dict[str, Any]], newest_file: dict[str, Path],
            processes: int, min_effect: float, min_change: float) -> list[Verdict]:
    """Rerun each suspect's experiment once (all its suspect metrics judged on that rerun).
    `info`: per experiment id, the fields repro_command reads; `newest_file`: per experiment id,
    the results file of its newest record (the reruns go beside it, in confirm/)."""
    verdicts = []
    done: dict[str, tuple[Row | None, str, Path]] = {}
    for change in changes:
        eid = change.experiment_id
        if eid not in done:
            folder = newest_file[eid].parent / CONFIRM_FOLDER
            argv = shlex.split(repro_command(eid, info[eid]))[1:]
            try:
                rows = _rerun(argv, folder, processes)
                done[eid] = (next((r for r in rows if r.experiment_id == eid), None), "", folder)
            except (RuntimeError, OSError) as exc:
                done[eid] = (None, str(exc), folder)
        row, failure, folder = done[eid]
        if failure:
            verdicts.append(Verdict(eid, change.metric, False, None, failure, str(folder), judged=False))
            continue
        upheld, measured, reason = judge(change, row, min_effect, min_change)
        verdicts.append(Verdict(eid, change.metric, bool(upheld), measured, reason, str(folder),
                                judged=upheld is not None))
    return verdicts


def render_confirmation(verdicts: Sequence[Verdict] | None, processes: int) -> str:
    """The text block after `history` or `compare`: one line per suspect, upheld or not, and why."""
    if verdicts is None:
        return ""
    if not verdicts:
        return "confirmation: nothing to confirm (no suspected slowdown, no regression to alert on)\n"
    upheld = sum(v.upheld for v in verdicts)
    unjudged = sum(not v.judged for v in verdicts)
    kept = f", {unjudged} could not be confirmed (their alerts stand)" if unjudged else ""
    out = [f"confirmation: {len(verdicts)} suspect(s) rerun with --processes {processes}; {upheld} upheld{kept} "
           f"({'exit 1' if upheld or unjudged else 'exit 0'})"]
    out += [f"  {_label(v)}  {v.metric:<12} {v.experiment_id}: {v.reason} (reruns in {v.output})" for v in verdicts]
    return "\n".join(out) + "\n"


def _label(verdict: Verdict) -> str:
    if not verdict.judged:
        return "CANNOT CONFIRM"
    return "CONFIRMED" if verdict.upheld else "NOT CONFIRMED"
