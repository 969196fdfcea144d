"""`experiment_runner merge A.jsonl B.jsonl ... -o all.jsonl`: the shard files of one run, as one.

Lives in analysis/ beside report and compare because, like them, it only reads finished
results files; it writes a new file once (temporary file, then rename), never a running
run's file, so it needs none of the writer's locking in parent/store.py.

Each input contributes its latest run's final record per experiment (a retry supersedes
its failure, as in report). An experiment found in several inputs is a conflict: a final
status beats `interrupted`, then the later record wins, and each conflict is reported.
Merged records share one run_id (`--run-id`, default: the first input's), so report and
compare see one run; each keeps where it came from in `merged_from`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from experiment_runner.core.results import (
    FINAL_STATUSES,
    BadLine,
    ResultsFileError,
    encode,
    iter_records,
    process_index,
)
from experiment_runner.analysis.files import check_output
from experiment_runner.errors import EXIT_OK, EXIT_RESULTS_IO, ReportError, ReportParser, analysis_command


@dataclass
class Source:
    path: Path
    run_id: str | None
    records: dict[tuple[str, int], dict]  # (experiment_id, process index) -> final record of the latest run
    older: int = 0  # records of earlier runs in the same file, left out


def read_source(path: Path) -> Source:
    """An input's latest run, final record per experiment's process (--processes); ResultsFileError
    if unreadable."""
    bad: list[BadLine] = []
    records = list(iter_records(path, bad_lines=bad))
    if not records:
        why = f"line {bad[0].lineno}: {bad[0].reason}" if bad else "it holds no record"
        raise ResultsFileError(f"{path} is not a results file ({why})")
    if bad:
        print(f"experiment_runner merge: warning: skipped {len(bad)} corrupt or torn line(s) of {path} "
              f"(line {', '.join(str(b.lineno) for b in bad[:5])})", file=sys.stderr)
    run_id = records[-1].get("run_id")
    latest = {}
    for record in records:
        if record.get("run_id") == run_id:
            latest[(str(record.get("experiment_id")), process_index(record))] = record
    return Source(path, run_id, latest, older=sum(1 for r in records if r.get("run_id") != run_id))


def _rank(record: dict) -> tuple[bool, float]:
    """A final status first, then the later attempt: `timings.finished_at` (the run's `timestamp`
    is the same in every record of a run, so it cannot tell two attempts apart)."""
    finished = (record.get("timings") or {}).get("finished_at")
    if not isinstance(finished, (int, float)):
        finished = record.get("timestamp")
    return record.get("status") in FINAL_STATUSES, finished if isinstance(finished, (int, float)) else 0.0


def merge(sources: Sequence[Source], run_id: str | None) -> tuple[list[dict], list[str]]:
    """One record per experiment's process across the sources, and a line per conflict."""
    chosen: dict[tuple[str, int], tuple[dict, Source]] = {}
    conflicts: list[str] = []
    for source in sources:
        for key, record in source.records.items():
            experiment_id = key[0]
            if key not in chosen:
                chosen[key] = (record, source)
                continue
            kept, kept_from = chosen[key]
            winner = (record, source) if _rank(record) > _rank(kept) else (kept, kept_from)
            chosen[key] = winner
            model = (record.get("model") or {}).get("model_name")
            conflicts.append(f"{model} [{experiment_id}] is in {kept_from.path} ({kept.get('status')}) and "
                             f"{source.path} ({record.get('status')}): kept {winner[1].path}'s")
    target = run_id or next((s.run_id for s in sources if s.run_id), None)
    merged = [{**record, "run_id": target, "merged_from": {"path": str(src.path), "run_id": record.get("run_id")}}
              for record, src in chosen.values()]
    return merged, conflicts


def write_atomically(path: Path, records: Sequence[dict]) -> None:
    """Replace `path` with the records, all or nothing. A symlink is written through (its target
    is replaced, the link stays); `main` has refused anything but a regular file (files.check_output)."""
    path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            for record in records:
                handle.write(encode(record))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def build_parser() -> argparse.ArgumentParser:
    parser = ReportParser(prog="experiment_runner merge",
                     description="Merge the results files of one run's shards into one file: one final record "
                                 "per experiment, one run_id; conflicts are reported on stderr.")
    parser.add_argument("inputs", nargs="+", type=Path, metavar="FILE", help="shard results files")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the merged results file (replaced)")
    parser.add_argument("--run-id", help="run_id of the merged records (default: the first input's)")
    return parser


@analysis_command("merge")
def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    check_output(args.output, args.inputs, "-o")
    sources = [read_source(path) for path in args.inputs]  # an unreadable input: analysis_command's exit 3
    records, conflicts = merge(sources, args.run_id)
    try:
        write_atomically(args.output, records)
    except OSError as exc:
        raise ReportError(f"cannot write {args.output}: {exc.strerror or exc}", EXIT_RESULTS_IO) from None
    for line in conflicts:
        print(f"experiment_runner merge: conflict: {line}", file=sys.stderr)
    older = sum(s.older for s in sources)
    unfinished = sum(1 for r in records if r.get("status") not in FINAL_STATUSES)
    experiments = len({r.get("experiment_id") for r in records})
    per = f" ({len(records)} process records)" if len(records) != experiments else ""
    print(f"merged {experiments} experiment(s){per} from {len(sources)} file(s) into {args.output} "
          f"(run {records[0]['run_id'] if records else None}): {len(conflicts)} conflict(s)"
          + (f", {unfinished} without a final record (rerun them)" if unfinished else "")
          + (f"; {older} record(s) of earlier runs in the inputs left out" if older else ""))
    return EXIT_OK
