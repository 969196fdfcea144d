"""`experiment_runner check-expected`: the CI gate PyTorch's harness has, on our results.

PyTorch's CI keeps an expected-results CSV per configuration (`name,accuracy,graph_breaks`,
benchmarks/dynamo/ci_expected_accuracy/) and fails a job whose accuracy status or graph-break
count differs from it, improvements included, so the file is updated on purpose
(check_accuracy.py, check_graph_breaks.py). This reads a run through `harness_rows`'s mapping (the
harness's accuracy statuses and graph-break counts) and does the same: one line per model whose
status or count changed, exit 1; exit 0 when nothing did; `--update` rewrites the file.
`--pytorch` takes PyTorch's own files for the run's dashboard configurations (`--dashboard`),
shipped in data/ci_expected_accuracy/ with the commit each came from: a job's inference records
against its `<TEST_CONFIG>_inference.csv`, its training records against `<TEST_CONFIG>_training.csv`.
Models a file expects and the run lacks are listed, not counted as changes. A job's run moved to
another device (a CUDA job's training on the CPU) is compared all the same, its differences marked
as possibly the device's: they still fail the gate.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import sys
from pathlib import Path
from typing import Sequence

from experiment_runner.analysis.files import check_output, read_small
from experiment_runner.analysis.harness_rows import MAPPING, Exported, exported
from experiment_runner.analysis.loader import results_files
from experiment_runner.core import dashboards
from experiment_runner.errors import (
    EXIT_INCOMPLETE,
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_RESULTS_IO,
    ReportError,
    ReportParser,
    analysis_command,
)

COLUMNS = ("name", "accuracy", "graph_breaks")
PASSING = ("pass", "pass_due_to_skip")
# How many absent models a line names before it says how many more there are: a one-model run
# against PyTorch's file lacks some 75, one line of names nobody reads.
ABSENT_SHOWN = 5
# Every accuracy status the harness writes (benchmarks/dynamo/common.py: check_accuracy, the
# eager runs' failures, write_csv_when_exception) and export's mapping to them: an expected
# file saying anything else is misread by any check, so it is refused, never taken as a pass.
HARNESS_STATUSES = frozenset({
    *PASSING, "fail_accuracy", "fail_to_run", "eager_fail_to_run", "eager_two_runs_differ", "eager_variation",
    "eager_1st_run_fail", "eager_2nd_run_fail", "eager_1st_run_OOM", "eager_2nd_run_OOM", "model_fail_to_load",
    "timeout", "OOM", "infra_error",
    *MAPPING["verification"].values(), *MAPPING["status"].values(), MAPPING["unchecked"], MAPPING["status_default"],
    MAPPING["baseline_failed"]})


# An expected-results file lists a few hundred models; one far larger is not one (and is not read whole).
MAX_EXPECTED_BYTES = 16 * 2**20


def _expected_text(path: Path) -> str:
    """The file's text: UTF-8, with or without the BOM spreadsheets write."""
    data = read_small(path, "an expected-results file (a CSV)", MAX_EXPECTED_BYTES)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ReportError(f"{path}:{line}: not UTF-8 text (byte {data[exc.start]:#04x}); "
                          "save it as UTF-8 CSV") from None


def read_expected(path: Path) -> dict[str, dict[str, str]]:
    """The expected file's rows by model name; anything PyTorch's checks would misread (a
    duplicate model, a graph-break count that is not a whole number, a row without a name or a
    status) is one line and exit 2, naming the line."""
    reader = csv.DictReader(io.StringIO(_expected_text(path), newline=""))
    try:
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ReportError(f"{path} is not an expected-results file: no {', '.join(missing)} column "
                              f"(expected {','.join(COLUMNS)})")
        rows: dict[str, dict[str, str]] = {}
        for row in reader:
            where = f"{path}:{reader.line_num}"
            if None in row:
                raise ReportError(f"{where}: {len(row) - 1 + len(row[None])} fields, the header has "
                                  f"{len(reader.fieldnames or [])}; a field holding a comma needs quotes")
            name, accuracy, breaks = (str(row.get(c) or "").strip() for c in COLUMNS)
            if not name or not accuracy:
                raise ReportError(f"{where}: a row needs a name and an accuracy status, got {row[COLUMNS[0]]!r}, "
                                  f"{row[COLUMNS[1]]!r}")
            if not name.isprintable():
                raise ReportError(f"{where}: the model name {name!r} holds a line break or another control "
                                  "character; no model is named so")
            if accuracy not in HARNESS_STATUSES:
                raise ReportError(f"{where}: {name}'s accuracy {accuracy!r} is not a status PyTorch's harness "
                                  f"writes ({', '.join(sorted(HARNESS_STATUSES))})")
            if not breaks.isdigit() or not breaks.isascii():
                raise ReportError(f"{where}: {name}'s graph_breaks must be a whole number >= 0, got {breaks!r}")
            if name in rows:
                raise ReportError(f"{where}: {name} is listed twice; keep one row per model")
            rows[name] = {"name": name, "accuracy": accuracy, "graph_breaks": str(int(breaks))}
    except csv.Error as exc:
        raise ReportError(f"{path}:{reader.line_num}: not CSV: {exc}") from None
    return rows


def updated(text: str | None, actual: dict[str, dict[str, str]]) -> str:
    """The expected file's text with this run's statuses and counts, written as PyTorch writes
    its files: its header (and the columns it has beyond ours, e.g. recompiles, kept per model),
    the blank lines it puts before each row, its rows in its order, then the models new to it,
    sorted. `text` None: a new file."""
    header, gap, rows = list(COLUMNS), 0, {}
    if text is not None:
        lines = text.splitlines()
        header = next(csv.reader(lines[:1]), list(COLUMNS))
        gap = next((i for i, line in enumerate(lines[1:]) if line.strip()), 0)
        for fields in csv.reader(line for line in lines[1:] if line.strip()):
            rows[fields[header.index("name")].strip()] = fields
    for name, row in sorted(actual.items()):
        fields = rows.setdefault(name, [""] * len(header))
        for column in COLUMNS:
            fields[header.index(column)] = row[column]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for fields in rows.values():
        out.write("\n" * gap)
        writer.writerow(fields)
    return out.getvalue()


def absent(actual: dict[str, dict[str, str]], expected: dict[str, dict[str, str]]) -> list[str]:
    """The models the expected file lists that the run does not hold: a model that vanished from
    the run is no pass (PyTorch's checks read only the run's models, and would say nothing)."""
    return sorted(set(expected) - set(actual))


def changes(actual: dict[str, dict[str, str]], expected: dict[str, dict[str, str]],
            notes: dict[str, str] | None = None, break_notes: dict[str, str] | None = None) -> list[str]:
    """One line per model whose accuracy status or graph-break count differs, said as the
    harness's checks say it (a pass that was expected to fail is an improvement); `notes` by model:
    why a difference of that model may not be the compiler's, said on each of its lines;
    `break_notes` the same for its graph-break line alone."""
    lines = []
    for name, row in sorted(actual.items()):
        note = f"; {notes[name]}" if notes and name in notes else ""
        break_note = f"; {break_notes[name]}" if break_notes and name in break_notes else ""
        want = expected.get(name)
        if want is None:
            lines.append(f"{name}: not in the expected file (accuracy {row['accuracy']}, graph_breaks "
                         f"{row['graph_breaks']}): add it with --update")
            continue
        if row["accuracy"] != want["accuracy"]:
            better = row["accuracy"] in PASSING and want["accuracy"] not in PASSING
            lines.append(f"{name}: accuracy {want['accuracy']} -> {row['accuracy']} "
                         f"({'improvement' if better else 'regression'}){note}")
        if str(row["graph_breaks"]) != str(want["graph_breaks"]):
            fewer = int(row["graph_breaks"]) < int(want["graph_breaks"] or 0)
            lines.append(f"{name}: graph_breaks {want['graph_breaks']} -> {row['graph_breaks']} "
                         f"({'improvement' if fewer else 'regression'}){break_note}{note}")
    return lines


SHIPPED = Path(__file__).parent / "data" / "ci_expected_accuracy"
# PyTorch's expected files are named <TEST_CONFIG>_<inference|training>.csv, TEST_CONFIG <configuration>_<suite>.
PYTORCH_FILE = re.compile(r"(?P<test_config>.+_(?P<suite>torchbench|huggingface|timm))_(?P<mode>inference|training)\.csv")
# How a line names a device.
DEVICE_WORDS = {"cuda": "CUDA", "cpu": "the CPU"}


def shipped_source(name: str) -> str | None:
    """Where a shipped expected file was taken from, as a line names it: its commit, and the fork
    whose copy it is where pytorch/pytorch's stored file was older (SOURCES.json's `copies`)."""
    sources = json.loads((SHIPPED / "SOURCES.json").read_text())
    commit = sources["files"].get(name)
    if commit is None:
        return None
    fork = sources.get("copies", {}).get(name)
    return commit[:12] + (f" ({fork}'s copy)" if fork else "")


def build_parser() -> argparse.ArgumentParser:
    p = ReportParser(prog="experiment_runner check-expected", description=__doc__.split("\n\n", 1)[0],
                     epilog="Exit status: 0 as expected (or --update); 1 a status or graph-break count changed, or "
                            "a model was not checked (no accuracy verdict: the run had no --verify); "
                            "2 bad flags; 3 a file cannot be read or written.")
    p.add_argument("files", nargs="+", type=Path, help="results files, or folders searched for *.jsonl")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--expected", type=Path,
                        help="the expected CSV (name,accuracy,graph_breaks); one named as PyTorch names its files "
                             "(cpu_inductor_amp_freezing_timm_inference.csv, inductor_timm_training.csv) is compared "
                             "with that configuration's experiments of the run, of that test")
    source.add_argument("--pytorch", action="store_true",
                        help="compare every PyTorch dashboard configuration of the run (--dashboard) with PyTorch's "
                             "own expected file for it, shipped with this tool: inference records with its "
                             "<TEST_CONFIG>_inference.csv, training records with its <TEST_CONFIG>_training.csv (each "
                             "line names the file and its commit, and the fork for a fork's copy)")
    p.add_argument("--group", metavar="NAME",
                   help="which compiler, suite, dtype, mode and device, as export names its CSVs "
                        "(inductor_torchbench_float32_inference_cpu); needed when the run has several")
    p.add_argument("--run-id", help="which run (default: the latest)")
    p.add_argument("--update", action="store_true", help="rewrite the expected file with this run's values")
    p.add_argument("--list-absent", action="store_true",
                   help=f"name every model the expected file lists and the run lacks (by default the first "
                        f"{ABSENT_SHOWN} and how many more)")
    return p


def accuracy_rows(items: Sequence[Exported]) -> dict[str, dict[str, str]]:
    """The run's checked rows as the harness's accuracy CSV has them, by model (`not_checked`
    holds the others: a model never judged has no status to compare)."""
    actual = {}
    for item in items:
        if not item.checked:
            continue
        accuracy = item.accuracy()
        actual[str(accuracy["name"])] = {"name": str(accuracy["name"]), "accuracy": accuracy["accuracy"],
                                         "graph_breaks": str(accuracy["graph_breaks"])}
    return actual


def not_checked(items: Sequence[Exported]) -> dict[str, str]:
    """The run's models whose record has no accuracy verdict, by name, with why: the gate cannot
    pass them (PyTorch's job checks every model's accuracy), nor fail them as a change."""
    found = {}
    for item in items:
        if item.checked:
            continue
        code = item.row.verification_code
        found[str(item.row.model)] = (
            "accuracy was not checked (VERIFIER_SKIPPED: the run had no --verify); rerun it with --verify"
            if code == "VERIFIER_SKIPPED" else
            f"its verification code {code!r} is no verdict this tool knows; rerun it with --verify")
    return found


def absent_line(label: str, lacking: Sequence[str], name: str, list_all: bool) -> str:
    """The line naming the expected models the run lacks: the first few, or all with --list-absent."""
    shown = lacking if list_all or len(lacking) <= ABSENT_SHOWN else lacking[:ABSENT_SHOWN]
    left = len(lacking) - len(shown)
    more = f", ... and {left} more (--list-absent names them all)" if left else ""
    return f"{label}: {len(lacking)} model(s) of {name} not in this run: {', '.join(shown)}{more}"


def check(label: str, actual: dict[str, dict[str, str]], path: Path, source: str, updatable: bool = True,
          unchecked: dict[str, str] | None = None, list_absent: bool = False,
          notes: dict[str, str] | None = None, break_notes: dict[str, str] | None = None,
          named: bool = False) -> int:
    """Print the changes of one group against one expected file, the models not checked, then its
    summary line; how many models changed or were not checked (either fails the gate). `notes`:
    see `changes`. `named`: each model's line starts with the group's label, as where several
    groups are checked a line printed after one group's summary is the next group's."""
    unchecked = unchecked or {}
    expected = read_expected(path)
    found = changes(actual, expected, notes, break_notes)
    prefix = f"{label}: " if named else ""
    for line in found:
        print(prefix + line)
    for name, why in sorted(unchecked.items()):
        print(f"{prefix}{name}: not checked: {why}")
    lacking = absent({**actual, **dict.fromkeys(unchecked, {})}, expected)
    if lacking:
        print(absent_line(label, lacking, path.name, list_absent))
    failing = [f"{len(found)} change(s)"] if found else []
    failing += [f"{len(unchecked)} model(s) not checked"] if unchecked else []
    accept = "; --update accepts the changes" if found and updatable else ""
    print(f"{label}: {len(actual)} model(s) checked against {source}: "
          + (f"{', '.join(failing)} (exit 1{accept})" if failing else "as expected")
          + (f"; {len(lacking)} expected model(s) not in this run" if lacking else ""))
    return len(found) + len(unchecked)


def check_pytorch(items: Sequence[Exported], list_absent: bool = False) -> int:
    """--pytorch: each dashboard configuration, suite and test of the run against PyTorch's file for
    it, each group named by that file's stem (inductor_timm_training)."""
    groups: dict[str, list[Exported]] = {}
    for item in items:
        if item.expected_file is not None:
            groups.setdefault(item.expected_file, []).append(item)
    if not groups:
        raise ReportError("--pytorch: the run has no experiment of a PyTorch dashboard configuration of the "
                          "torchbench, huggingface or timm suite (plan them with --dashboard; the performance "
                          "dashboard's modes have no expected file)")
    changed = 0
    for name, members in sorted(groups.items()):
        label = name.removesuffix(".csv")
        source = shipped_source(name)
        if source is None:
            print(f"{label}: no expected file shipped for it ({name}); give one with --expected")
            continue
        notes = other_device(label, name, members)
        changed += check(label, accuracy_rows(members), SHIPPED / name, f"PyTorch's {name} @ {source}",
                         updatable=False, unchecked=not_checked(members), list_absent=list_absent, notes=notes,
                         break_notes=own_counts(members), named=len(groups) > 1)
        other_batch(label, members)
    return changed


def other_device(label: str, name: str, members: Sequence[Exported]) -> dict[str, str]:
    """Say, in one line, that the group's file was written on its CI job's device and (some of) the
    group ran on another: PyTorch trains on CUDA only, so a CUDA job's training run on the CPU has no
    file of its own. Returns the note each such model's differences carry; they still fail the gate."""
    moved = {str(m.row.model): str(m.moved_to) for m in members if m.moved_to is not None}
    if not moved:
        return {}
    job = dashboards.dashboards().get(str(members[0].dashboard))
    written = DEVICE_WORDS.get(job.accelerator, job.accelerator) if job is not None else "its CI job's device"
    ran = " and ".join(DEVICE_WORDS.get(d, d) for d in sorted(set(moved.values())))
    some = "" if len(moved) == len(members) else f" ({len(moved)} of its {len(members)} model(s))"
    print(f"{label}: PyTorch's {name} was written on {written}; this run was on {ran}{some}: a difference "
          "below may be the device's, not the compiler's, and still fails the gate")
    return {model: f"possibly the device's (ran on {DEVICE_WORDS.get(d, d)}, the file on {written})"
            for model, d in moved.items()}


def own_counts(members: Sequence[Exported]) -> dict[str, str]:
    """The training models whose graph-break figure is this runner's count of every frame it
    compiled, not the harness's (replayed only with --verify and the harness's step): a difference
    in it is no change of the compiler's until the counts are the same count."""
    return {str(m.row.model): "this runner's count of every frame compiled, not the harness's (replayed "
                              "only with --verify)" for m in members if not m.harness_counted}


def other_suite(name: str, suite: str, group: str, members: Sequence[Exported]) -> None:
    """Warn, in one line, where a file named as PyTorch names one suite's expected file is checked
    against another suite's group: the models would match by name only where suites share one, and
    every other row reads as absent or new, never as the wrong file."""
    suites = sorted({m.harness_suite for m in members} - {suite})
    if suites:
        print(f"experiment_runner check-expected: warning: {name} is named as PyTorch names {suite}'s expected "
              f"file; {group} holds {' and '.join(suites)} models: check it against its own suite's file",
              file=sys.stderr)


def other_batch(job: str, members: Sequence[Exported]) -> None:
    """Say which models ran at another batch size than PyTorch's accuracy run of their suite:
    a verdict or graph-break count can differ for that alone (batch norm, a batch of 1's squeezes,
    dynamic batch), so such a difference is not yet the compiler's."""
    want = dashboards.accuracy_batch_size(str(members[0].row.suite))
    others = sorted(str(m.row.model) for m in members if want is not None and m.row.batch_size != want)
    if others:
        print(f"{job}: {len(others)} model(s) ran at another batch size than PyTorch's accuracy runs "
              f"(batch {want}): {', '.join(others)}; rerun them with --batch-size={want} before reading "
              "a difference as the compiler's")


@analysis_command("check-expected")
def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    if args.pytorch and args.update:
        raise ReportError("--update rewrites the file given with --expected, never PyTorch's shipped ones")
    if args.update and SHIPPED.resolve() in Path(os.path.realpath(args.expected)).parents:
        raise ReportError(f"--update would rewrite {args.expected}, PyTorch's expected file shipped with this tool "
                          f"({os.path.realpath(args.expected)}); copy it and update the copy")
    inputs = results_files(args.files)
    if args.update:
        check_output(args.expected, inputs, "--expected")
    items = exported(inputs, args.run_id)
    if args.pytorch:
        return EXIT_REGRESSION if check_pytorch(items, args.list_absent) else EXIT_OK
    named = PYTORCH_FILE.fullmatch(args.expected.name)
    pytorchs = args.group is None and any(i.expected_file == args.expected.name for i in items)
    if pytorchs:
        group = args.expected.name.removesuffix(".csv")
        members = [item for item in items if item.expected_file == args.expected.name]
    else:
        groups = sorted({item.output for item in items})
        group = args.group or (groups[0] if len(groups) == 1 else None)
        has = ', '.join(groups) or 'no compiled experiment'
        if args.group is not None and group not in groups:
            raise ReportError(f"--group {args.group}: the run has no such group; it has {has}")
        if group not in groups:
            raise ReportError(f"choose --group: the run has {has}")
        members = [item for item in items if item.output == group]
        if named is not None and any(dashboards.MODES.get(str(m.row.test)) != named["mode"] for m in members):
            raise ReportError(f"{args.expected.name} is named as PyTorch names the expected file of a {named['mode']} "
                              f"run; {group} is no {named['mode']} group: choose one with --group")
        if named is not None:
            other_suite(args.expected.name, named["suite"], group, members)
    actual, unchecked = accuracy_rows(members), not_checked(members)
    if args.update:
        text = None
        if args.expected.exists():
            read_expected(args.expected)  # refuses a bad file before anything is written
            text = _expected_text(args.expected)
        try:
            args.expected.write_text(updated(text, actual))
        except OSError as exc:
            raise ReportError(f"cannot write {args.expected}: {exc.strerror or exc}", EXIT_RESULTS_IO) from None
        print(f"updated {args.expected}: {len(actual)} model(s) of {group}", file=sys.stderr)
        if unchecked:
            print(f"experiment_runner check-expected: {len(unchecked)} model(s) not checked, their rows left as they "
                  f"were: {', '.join(sorted(unchecked))}; rerun them with --verify", file=sys.stderr)
            return EXIT_INCOMPLETE
        return EXIT_OK
    notes = other_device(group, args.expected.name, members) if pytorchs else {}
    failing = check(group, actual, args.expected, str(args.expected), unchecked=unchecked,
                    list_absent=args.list_absent, notes=notes)
    return EXIT_REGRESSION if failing else EXIT_OK
