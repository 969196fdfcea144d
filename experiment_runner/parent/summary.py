"""The end-of-run table: what ran, how it went, and where the records are."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable


def printable(text: str) -> str:
    """Text for the terminal with control characters escaped: a model name or an error message
    holding an escape sequence must not reach the terminal raw."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def summary_rows(records: Iterable[dict[str, Any]]) -> list[list[Any]]:
    rows = []
    for r in records:
        e = r["experiment"]
        stats = (r.get("stats") or {}).get("per_iter_time") or {}
        median = f"{stats['median'] * 1e3:.3f}" if stats else "-"
        if stats.get("unstable"):
            median += " ~"
        config = f"{e['accelerator']} xla={e['xla']} dynamo={e['dynamo']} {e['test']} {e['precision']}"
        process = r.get("process") or {}
        if process.get("count", 1) > 1:
            config += f" (process {process['index'] + 1}/{process['count']})"
        rows.append([printable(r["model"]["model_name"]), config, e.get("batch_size") or "-", r["status"], median,
                     r["verification_code"]])
    return rows


def _figure(record: dict[str, Any], name: str) -> Any:
    """One of our figures: in `measurements` (current records) or `metrics` (older ones)."""
    for block in ("measurements", "metrics"):
        value = (record.get(block) or {}).get(name)
        if value is not None:
            return value
    return None


def noisy_line(records: list[dict[str, Any]]) -> str | None:
    """How many timed experiments shared the host with busy neighbours, if any did."""
    noisy = [r for r in records if _figure(r, "noisy_host") is True]
    if not noisy:
        return None
    share = (_figure(noisy[0], "host_load") or {}).get("noisy_host_share")
    limit = f" more than {share:.0%} of" if isinstance(share, (int, float)) else ""
    return (f"{len(noisy)} of {len(records)} experiment(s) ran on a noisy host: other processes used{limit} "
            "the CPUs during their timed runs (noisy_host, host_load in their records); re-run them on a "
            "quiet host before trusting their timings.")


def render_summary(records: list[dict[str, Any]], results_path: Path, run_id: str,
                   interrupted: bool = False) -> str:
    from tabulate import tabulate

    table = tabulate(summary_rows(records),
                     headers=["model", "configuration", "batch", "status", "median ms/iter", "verification"],
                     tablefmt="simple")
    counts: dict[str, int] = {}
    for r in records:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    tally = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "nothing ran"
    lines = [table, "", f"{len(records)} record(s) appended to {results_path} (run {run_id}): {tally}."]
    noisy = noisy_line(records)
    if noisy:
        lines.append(noisy)
    if any("~" in str(row[4]) for row in summary_rows(records)):
        lines.append("~ marks an unstable median (interquartile range above 10% of the median).")
    if interrupted:
        lines.append("Interrupted: resume with the same command plus --resume.")
    failed = sum(n for status, n in counts.items() if status not in ("ok", "skipped"))
    if failed and not interrupted:
        lines.append(f"{failed} experiment(s) failed: their lines above name each log; once fixed, rerun only "
                     "them with the same command plus --retry-failed.")
    lines.append(f"Next: experiment_runner report {results_path}")
    return "\n".join(lines)
