"""PyTorch's inductor dashboard over our suites on the CPU, beside PyTorch's own expected files:
the compiled columns of docs/benchmarks/dashboard.md.

    python benchmarks/dashboard_sweep.py --output /tmp/dash --suite timm --dashboard cpu_inductor
    python benchmarks/dashboard_sweep.py --output /tmp/dash --suite huggingface --dashboard cpu -k 'Bert|GPT2'
    python benchmarks/dashboard_sweep.py --output /tmp/train --suite timm --dashboard inductor --training
    python benchmarks/dashboard_sweep.py --output /tmp/dash --markdown      # the tables of what ran

`--training` runs the CUDA jobs' training runs on the CPU (`--accelerator=cpu --test=train`:
PyTorch's CI trains on CUDA only), compared with the jobs' training files.

Each suite is one `experiment_runner` run per invocation into `<output>/<suite>` (so an
interrupted piece resumes, and the sweep is taken in pieces of an hour or two) with
`--dashboard=... --verify --speedup=harness` at the batch size of PyTorch's accuracy runs, which
wrote the expected files (`accuracy_batch_size` in experiment_runner/core/dashboards.json).
`--markdown` reads the records: one row per model and configuration (our verdict and graph breaks,
PyTorch's, where the counts differ PyTorch's other files of the suite that count as we do, the
paired speedup, compile time, the compiled run's peak memory (on CPU the harness's
memory ratio is CUDA's allocator alone, and a paired run has no eager peak of its own), seconds, the
cause of a failure), then
per configuration and suite how many of the models both have agree, the acceptance figures of
issue 37. The agreement is check-expected's own reading (export's mapping, the shipped files).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import kept_rows  # noqa: E402
from experiment_runner.analysis.expected import PYTORCH_FILE, SHIPPED, read_expected  # noqa: E402
from experiment_runner.analysis.harness_rows import Exported, exported  # noqa: E402
from experiment_runner.analysis.loader import read_rows, runs_of  # noqa: E402
from experiment_runner.core import dashboards  # noqa: E402

SUITES = ("torchbench", "huggingface", "timm")
# The kept records the page's head is written from, and why each differing row differs.
KEPT = Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "data"
EXCEPTIONS = KEPT / "dashboard_exceptions.json"


def run_piece(suite: str, output: Path, names: list[str], pattern: str | None, timeout_s: int,
              half_width: float | None, training: bool) -> tuple[float, int]:
    """One run of a suite in the given configurations: the seconds it took and its exit status."""
    command = [sys.executable, "-m", "experiment_runner", f"--suite-name={suite}",
               *(f"--dashboard={name}" for name in names),
               *(["--accelerator=cpu", "--test=train"] if training else []),
               f"--batch-size={dashboards.accuracy_batch_size(suite)}", "--verify", "--speedup=harness",
               "--no-progress-bar", f"--subprocess-timeout={timeout_s}", f"--output-dirname={output / suite}",
               *(["-k", pattern] if pattern else []),
               # at most the harness's 30 pairs, fewer once the speedup's interval is that tight
               *(["--adaptive-pairs", f"--pairs-half-width={half_width}", "--max-pairs=30"] if half_width else [])]
    started = time.monotonic()
    code = subprocess.run(command, check=False).returncode
    return time.monotonic() - started, code


def latest(output: Path) -> list[Exported]:
    """Every compiled experiment of the output's runs, the last attempt of each."""
    paths = [p for p in (output / suite / "results.jsonl" for suite in SUITES) if p.is_file()]
    found: dict[str, Exported] = {}
    for run in runs_of(read_rows(paths)):
        for item in exported(paths, run.run_id):
            found[item.row.experiment_id] = item
    return sorted(found.values(), key=lambda i: (str(i.row.suite), str(i.dashboard), str(i.row.model)))


def cause(record: dict[str, Any]) -> str:
    """A failure in one phrase, from its record."""
    error = record.get("error") or {}
    first = ((error.get("message") or "").strip().splitlines() or [""])[0]
    return f"{record.get('status')}: {error.get('type') or ''}: {first}"[:160].replace("|", "/")


def _number(value: Any, digits: int) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) and value else ""


@functools.cache
def shipped(name: str) -> dict[str, dict[str, str]]:
    """A shipped expected file's rows by model, read once however many rows ask."""
    return read_expected(SHIPPED / name)


def same_breaks_in(expected_file: str, model: str, breaks: str) -> str:
    """PyTorch's other files of the same suite and mode (inference or training) that count the
    model's graph breaks as ours: a count that differs from its own job's file but equals the
    file of a job that runs the same step points at the file, not at the run."""
    named = PYTORCH_FILE.fullmatch(expected_file)
    if named is None:
        return ""
    suffix = f"_{named['test_config'].rsplit('_', 1)[1]}_{named['mode']}.csv"
    same = [path.name.removesuffix(suffix) for path in sorted(SHIPPED.glob(f"*{suffix}"))
            if path.name != expected_file and shipped(path.name).get(model, {}).get("graph_breaks") == breaks]
    return ", ".join(same)


def tables(output: Path) -> list[str]:
    """The per-model table, then the agreement per configuration and suite."""
    items = [i for i in latest(output) if i.expected_file is not None]
    expected_files = {name: shipped(name) for name in {str(i.expected_file) for i in items} if (SHIPPED / name).is_file()}
    lines = ["| suite | model | configuration | batch | ours: accuracy / graph breaks | PyTorch's file | agrees "
             "| the same breaks in | speedup | compile (s) | peak memory (GB) | seconds | cause |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    agreement: dict[str, list[tuple[bool, bool]]] = {}
    for item in items:
        ours = item.accuracy()
        theirs = expected_files.get(str(item.expected_file), {}).get(str(item.row.model))
        if theirs is None:
            agrees = "not in file"
        else:
            same = (ours["accuracy"] == theirs["accuracy"], str(ours["graph_breaks"]) == theirs["graph_breaks"])
            agreement.setdefault(str(item.expected_file).removesuffix(".csv"), []).append(same)
            agrees = "yes" if all(same) else ("breaks differ" if same[0] else "accuracy differs")
        elsewhere = "" if theirs and str(ours["graph_breaks"]) == theirs["graph_breaks"] else same_breaks_in(
            str(item.expected_file), str(item.row.model), str(ours["graph_breaks"]))
        pytorchs = f"{theirs['accuracy']} / {theirs['graph_breaks']}" if theirs else ""
        perf = item.performance() or {}
        record = item.record
        wall = (record.get("timings") or {}).get("wall_s")
        lines.append(
            f"| {item.row.suite} | {item.row.model} | {item.dashboard} | {item.row.batch_size} "
            f"| {ours['accuracy']} / {ours['graph_breaks']} "
            f"| {pytorchs} | {agrees} | {elsewhere} "
            f"| {_number(perf.get('speedup'), 2)} | {_number(item.row.compile_time_s, 0)} "
            f"| {_number(perf.get('dynamo_peak_mem'), 2)} | {_number(wall, 0)} "
            f"| {'' if record.get('status') == 'ok' else cause(record)} |")
    lines += ["", "| configuration and suite | models both have | accuracy equal | graph breaks equal |",
              "|---|---|---|---|"]
    for job, same in sorted(agreement.items()):
        accuracy, breaks = sum(a for a, _ in same), sum(b for _, b in same)
        lines.append(f"| {job} | {len(same)} | {accuracy} ({100 * accuracy / len(same):.0f}%) "
                     f"| {breaks} ({100 * breaks / len(same):.0f}%) |")
    return lines


def standing(outputs: list[Path] | None = None, exceptions: Path = EXCEPTIONS) -> list[str]:
    """The page's present tense: per configuration and suite of the kept records, how many models
    both we and PyTorch's file have, how many verdicts and graph-break counts are equal, and every
    difference with why and where the page shows it. A difference without an entry in
    `exceptions` is refused, and so is an entry no difference uses: the head never shows one
    unexplained, and the file never explains one that is gone."""
    outputs = outputs or [KEPT / "dashboard_sweep", KEPT / "dashboard_training"]
    why = json.loads(exceptions.read_text())
    cells: dict[str, list[tuple[bool, bool]]] = {}
    listed: dict[str, list[str]] = {}
    used: set[str] = set()
    for output in outputs:
        for item in latest(output):
            name = str(item.expected_file or "")
            theirs = shipped(name).get(str(item.row.model)) if name and (SHIPPED / name).is_file() else None
            if theirs is None:
                continue
            ours = item.accuracy()
            same = (ours["accuracy"] == theirs["accuracy"], str(ours["graph_breaks"]) == theirs["graph_breaks"])
            job = name.removesuffix(".csv")
            cells.setdefault(job, []).append(same)
            if all(same):
                continue
            key = f"{job}/{item.row.model}"
            if key not in why:
                raise SystemExit(f"dashboard_sweep: {key} differs from PyTorch's file ({ours['accuracy']} / "
                                 f"{ours['graph_breaks']} against {theirs['accuracy']} / {theirs['graph_breaks']}) "
                                 f"and {exceptions.name} does not say why")
            used.add(key)
            listed.setdefault(job, []).append(
                f"[{item.row.model}]({why[key]['section']}) ({ours['accuracy']} / {ours['graph_breaks']} against "
                f"{theirs['accuracy']} / {theirs['graph_breaks']}: {why[key]['why']})")
    stale = sorted(set(why) - used - {"_comment"})
    if stale:
        raise SystemExit(f"dashboard_sweep: {exceptions.name} explains {', '.join(stale)}, which no longer "
                         "differ from PyTorch's files: remove the entries")
    lines = ["| configuration and suite | models both have | verdicts equal | graph breaks equal | where they differ |",
             "|---|---|---|---|---|"]
    for job, same in sorted(cells.items()):
        verdicts, breaks = sum(a for a, _ in same), sum(b for _, b in same)
        lines.append(f"| {job} | {len(same)} | {verdicts} | {breaks} | {'; '.join(listed.get(job, [])) or '-'} |")
    total = [pair for same in cells.values() for pair in same]
    lines += ["", f"In all: {len(total)} rows, {sum(a for a, _ in total)} verdicts and {sum(b for _, b in total)} "
                  "graph-break counts equal to PyTorch's files; every difference is explained in the section "
                  "it links to."]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True, help="folder of the runs (one per suite)")
    parser.add_argument("--suite", action="append", choices=SUITES, help="default: all three")
    parser.add_argument("--dashboard", action="append", choices=dashboards.choices(),
                        help="configuration(s) to run (default: cpu_inductor)")
    parser.add_argument("-k", dest="pattern", help="only the models this regex finds (a piece of a suite)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per experiment")
    parser.add_argument("--adaptive-pairs", type=float, metavar="HALF_WIDTH",
                        help="stop timing pairs once the speedup's 95%% interval is within this share of it "
                             "(at most the harness's 30 pairs): big models at 2 cores take minutes per pair")
    parser.add_argument("--training", action="store_true",
                        help="the jobs' training runs, on the CPU (--accelerator=cpu --test=train)")
    parser.add_argument("--markdown", action="store_true", help="print the tables of what the runs hold; run nothing")
    kept_rows.add_standing(parser, standing, "print the head of docs/benchmarks/dashboard.md from the records "
                                             "kept under docs/benchmarks/data (inference and training); run nothing")
    args = parser.parse_args()
    if args.markdown:
        print("\n".join(tables(args.output)))
        return 0
    for suite in args.suite or SUITES:
        seconds, code = run_piece(suite, args.output, args.dashboard or ["cpu_inductor"], args.pattern,
                                  args.timeout, args.adaptive_pairs, args.training)
        print(f"dashboard_sweep: {suite}: {seconds:.0f} s, load average {os.getloadavg()[0]:.2f} at the end",
              file=sys.stderr)
        if code != 0:
            # an interrupted run (or refused flags): the next suite would not run as asked either
            print(f"dashboard_sweep: {suite}: the run exited {code}; stopping", file=sys.stderr)
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
