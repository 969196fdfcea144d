"""The parent's run: plan the matrix, resume, launch one child per experiment, summarise.

Reached from `cli.main` with validated flags. Never imports torch or model code: the
host is probed in a child, suites are resolved by name (plugin suites through a child).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from experiment_runner.core import dashboards, matrix
from experiment_runner.core.environment import describe_environment
from experiment_runner.core.record import RecordContext
from experiment_runner.core.requirements import install_command
from experiment_runner.core.results import ResultsFileError
from experiment_runner.core.run_config import MatrixConfig, RunConfig
from experiment_runner.core.shards import (balanced_shards, experiment_durations, machine_time, read_durations,
                                          read_records)
from experiment_runner.errors import EXIT_OK, ResultsIOError, RunnerError, UsageError, did_you_mean
from experiment_runner.parent.executors import ExecutorOptions, create
from experiment_runner.parent.gpu_locks import lock_gpus, release_gpus
from experiment_runner.parent.host import ProbeError, probe_capabilities, torch_xla_importable
from experiment_runner.parent.launch.forkserver_launcher import children_import_dynamo, prestart
from experiment_runner.parent.launch.reaper import start_reaper, stop_reaper
from experiment_runner.parent.minify import minify_records
from experiment_runner.parent.runner import Runner
from experiment_runner.parent.store import (
    RunEntry,
    lock_results,
    new_run_id,
    register_run,
    registered_runs,
    resume_state,
)
from experiment_runner.parent.suites import CatalogError, SuiteCatalog, suite_catalog
from experiment_runner.parent.summary import printable, render_summary
from benchmark_models.registry import UnknownSuite

logger = logging.getLogger("experiment_runner")


def check_requested(config: MatrixConfig, caps: matrix.HostCapabilities) -> None:
    """Explicit requests that cannot run here are errors; defaults are silently narrowed."""
    accelerators, xla = config.accelerator or (), config.xla or ()
    if "cuda" in accelerators and not caps.cuda:
        raise UsageError("--accelerator=cuda, but CUDA is not available on this host "
                         "(torch.cuda.is_available() is False)")
    if "PJRT" in xla and not caps.torch_xla:
        raise UsageError("--xla=PJRT, but torch_xla cannot be imported here")
    xla_accelerators = accelerators if "PJRT" in xla else ("tpu",)
    for acc in set(accelerators) & set(xla_accelerators):
        if caps.torch_xla and acc not in caps.xla_accelerators:
            raise UsageError(f"--accelerator={acc} with xla, but torch_xla found no {acc} PJRT device")
    for backend in config.dynamo or ():
        if backend not in (None, "openxla") and backend not in caps.dynamo_backends:
            # torch lists openxla itself where torch_xla is installed; its *_TESTING_ONLY backends are its own.
            known = ["None", *sorted({b for b in caps.dynamo_backends if not b.endswith("_TESTING_ONLY")}
                                     | {"openxla"})]
            raise UsageError(f"unknown dynamo backend {backend!r}{did_you_mean(backend, known)} "
                             f"(known: {', '.join(known)})")


def print_dry_run(plan: matrix.Plan, done: set[tuple[str, int]], processes: int = 1) -> None:
    planned = plan.planned
    per = f", {processes} fresh processes each, interleaved in rounds" if processes > 1 else ""
    print(f"{len(planned)} experiment(s){per}:")
    for i, p in enumerate(planned, start=1):
        exp = p.experiment
        finished = sum((exp.experiment_id, index) in done for index in range(processes))
        mark = ""
        if p.skip_reason is not None:
            mark = f"  [skipped: {p.skip_reason}]"
        elif finished == processes:
            mark = "  [already done in the run being resumed]"
        elif finished:
            mark = f"  [{finished} of {processes} processes done in the run being resumed]"
        print(printable(f"{i:4d}. {exp.model_name}: {exp.config.label()}{mark}"))
    print_dashboard_batches([(p.experiment.suite_name, p.experiment.config) for p in planned]
                            + [(d.suite_name, d.config) for d in plan.dropped])
    if plan.dropped:
        # A combination is one model in one configuration: say so, or 20 dropped reads as 10 listed.
        models = {d.model_name for d in plan.dropped}
        configs = {d.config.label() for d in plan.dropped}
        print(f"\n{len(plan.dropped)} combination(s) of a model and a configuration dropped "
              f"({len(configs)} configuration(s), {len(models)} model(s)):")
        by_reason: dict[str, tuple[list[str], set[str], list[matrix.Dropped]]] = {}
        for d in plan.dropped:
            labels, names, members = by_reason.setdefault(d.reason, ([], set(), []))
            if d.config.label() not in labels:
                labels.append(d.config.label())
            names.add(d.model_name)
            members.append(d)
        for reason, (labels, names, members) in by_reason.items():
            head = f"  - {reason}: {len(members)} ({len(labels)} configuration(s) x {len(names)} model(s))"
            if not planned:  # nothing runs here: show all that would have (--dashboard=cuda on a CPU host)
                print(f"{head}:")
                for label in labels:
                    print(printable(f"      {label}"))
                continue
            examples = "; ".join(labels[:3]) + (f"; and {len(labels) - 3} more" if len(labels) > 3 else "")
            print(printable(f"{head}: {examples}"))


def print_dashboard_batches(configs: list[tuple[str, matrix.ExperimentConfig]]) -> None:
    """--dry-run of a dashboard plan: per configuration (of a suite), planned or dropped here, the
    batch its verdict and its speedup are taken at here and in PyTorch's job (accuracy run,
    performance run), so a figure at another batch than the dashboard's is known before the
    machine time is spent."""
    def batch(size: int | None) -> str:
        return "the model's own" if size is None else f"bs={size}"

    lines: dict[str, str] = {}
    for suite, config in configs:
        if config.dashboard is None or config.label() in lines:
            continue
        if (found := dashboards.batches(suite, config.batch_size)) is None:
            continue
        differing = found.differing()
        note = f"; {' and '.join(differing)} at another batch than PyTorch's" if differing else "; as PyTorch's"
        lines[config.label()] = (f"  {config.label()}: verdict {batch(found.verdict)} "
                                     f"(PyTorch's {batch(found.job_verdict)}), speedup {batch(found.speedup)} "
                                     f"(PyTorch's {batch(found.job_speedup)}){note}")
    if lines:
        print("\nbatches of the dashboard figures, here (PyTorch's job: verdict from its --accuracy run, "
              "speedup from its --performance run):")
        for line in lines.values():
            print(printable(line))


def print_machine_time(plan: matrix.Plan, processes: int, estimate_from: str | None, lanes: int) -> None:
    """--dry-run: the plan's machine time from an earlier results file (--estimate-from), GPU-hours for
    its cuda experiments and their wall time over `lanes` GPUs at once; where no file is given, a
    line saying there is no estimate (for a plan with cuda experiments, whose GPUs are booked)."""
    runs = [p.experiment for p in plan.planned if p.skip_reason is None]
    by_kind = {kind: [e.experiment_id for e in runs if (e.config.accelerator == "cuda") == (kind == "cuda")] * processes
               for kind in ("cuda", "cpu")}
    if estimate_from is None:
        if by_kind["cuda"]:
            print("\nmachine time: no estimate; --estimate-from=PATH (an earlier results file of this plan) gives "
                  "its GPU-hours")
        return
    durations = experiment_durations(read_records(Path(estimate_from), "--estimate-from"))
    print(f"\nmachine time, from {estimate_from}:")
    for kind, ids in by_kind.items():
        if not ids:
            continue
        time_ = machine_time(ids, durations)
        rest = (f"; {time_.unknown} not in it, counted at the median, {time_.median_s:.0f} s" if time_.unknown
                else "")
        if kind == "cuda":
            print(f"  cuda: {time_.seconds / 3600:.2f} GPU-hours, about {_span(time_.seconds / lanes)} of wall "
                  f"time on {lanes} GPU(s) at once ({time_.known} of {len(ids)} experiments timed there{rest})")
        else:
            print(f"  cpu: {_span(time_.seconds)}, one at a time ({time_.known} of {len(ids)} experiments "
                  f"timed there{rest})")


def _span(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min" if seconds >= 60 \
        else f"{seconds:.0f} s"


def print_models(plan: matrix.Plan, suite: SuiteCatalog, models: list[str], batch_size: int | None) -> None:
    """--list-models: per model and accelerator, the batch size of each test (what the run would
    use), the source, and the skip reasons of its experiments."""
    rows: dict[tuple[str, str], dict[str, set[str]]] = {}
    tests: list[str] = []
    for p in plan.planned:
        config = p.experiment.config
        tests += [config.test] if config.test not in tests else []
        skips = rows.setdefault((p.experiment.model_name, config.accelerator), {})
        skips.setdefault(config.test, set()).update([p.skip_reason] if p.skip_reason else [])
    tests.sort(key=matrix.TESTS.index)

    def size(model: str, test: str, accelerator: str) -> str:
        found = batch_size or suite.batch_sizes.get(model, {}).get(test, {}).get(accelerator)
        return str(found) if found is not None else "own"

    table = [("model", "accelerator", *(f"{t} batch" for t in tests), "source", "skipped")]
    for model in models:
        accelerators = [acc for (name, acc) in rows if name == model]
        if not accelerators:
            table.append((model, "-", *("-" for _ in tests), suite.source, "no valid configuration here"))
        for acc in accelerators:
            skips = rows[(model, acc)]
            reasons = sorted(set().union(*skips.values()))
            said = "; ".join(
                reason if all(reason in skips.get(t, ()) for t in tests)
                else f"{', '.join(t for t in tests if reason in skips.get(t, ()))}: {reason}" for reason in reasons)
            table.append((model, acc, *(size(model, t, acc) if t in skips else "-" for t in tests), suite.source,
                          said))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]) - 1)]
    print(f"{suite.name}: {len(models)} model(s); {suite.description or suite.source + ' models'}")
    for row in table:
        cells = [cell.ljust(width) if i in (0, 1) or i == len(widths) - 1 else cell.rjust(width)
                 for i, (cell, width) in enumerate(zip(row, widths))]
        print(printable("  ".join([*cells, row[-1]]).rstrip()))
    print("batch: the default without --batch-size; own: the model's own default, known once it is built")


def select_shard(config: MatrixConfig, names: list[str], listing: list[str] | None = None) -> list[str]:
    """This host's models: the reference's contiguous blocks of the suite's listing (default),
    round-robin, or balanced by earlier durations."""
    filters, excludes = config.filter_patterns, config.exclude_patterns
    if config.shard_by is None or config.shard_by == "round-robin":
        return matrix.select_models(names, filters, excludes, config.total_partitions, config.partition_id,
                                    round_robin=config.shard_by == "round-robin", listing=listing)
    models = matrix.select_models(names, filters, excludes)
    durations = read_durations(Path(config.shard_by.partition(":")[2]))
    return balanced_shards(models, durations, config.total_partitions)[config.partition_id]


def build_plan(config: MatrixConfig, suite: SuiteCatalog, models: list[str],
               caps: matrix.HostCapabilities, no_skip: bool = False) -> matrix.Plan:
    """The experiments the validated flags ask for on a host with `caps` (tests simulate hosts)."""
    choices = matrix.MatrixChoices(
        accelerators=config.accelerator, xla=config.xla, dynamo=config.dynamo, tests=config.test,
        precisions=config.precision, xla_flags=config.xla_flags, batch_size=config.batch_size,
        torch_xla2=config.torch_xla2, keep_model_data_on_cuda=config.keep_model_data_on_cuda,
        enable_functionalization=config.enable_functionalization, default_precision=suite.default_precision,
        compile_options=config.compile_options, eval_precisions=suite.eval_precisions, dashboards=config.dashboard,
        dashboard_batch_size=dashboards.accuracy_batch_size(config.suite_name),
        training_recipe=config.training_recipe or matrix.DEFAULT_TRAINING_RECIPE,
    )
    return matrix.expand(config.suite_name, models, choices, caps, suite.skip_rules, no_skip)


@dataclasses.dataclass(frozen=True)
class RunState:
    """The run being started or resumed: its id and timestamp, what it already holds, and what is
    left to do (the planned experiments' processes without a record, in rounds)."""

    run_id: str
    timestamp: float
    done: set[tuple[str, int]]
    failed: set[str]
    todo: list[matrix.Planned]
    failed_final: int = 0  # experiments whose final record is a failure
    options: dict | None = None  # the resumed run's RunOptions, as its registry entry holds them


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """What a run is, built once from the validated flags: the suite and its selected models, the
    expanded matrix, the GPUs it may use and the command's fingerprint. --list-models and
    --dry-run print it; execution consumes it."""

    config: RunConfig
    suite: SuiteCatalog
    models: list[str]
    matrix: matrix.Plan
    gpu_ids: tuple[str, ...]
    fingerprint: str

    @property
    def about(self) -> str:
        return f"{self.config.matrix.suite_name}: {self.suite.description or self.suite.source + ' models'}"

    def needs_gpus(self, todo: list[matrix.Planned]) -> bool:
        return any(p.experiment.config.accelerator == "cuda" and p.skip_reason is None for p in todo)


@contextlib.contextmanager
def write_errors_in_one_line(path: Path | None = None) -> Iterator[None]:
    """An OSError of a file the run writes becomes ResultsIOError's one line (exit 3), naming the
    file (`path` where the error names none); a ResultsFileError, or an unnamed error where no
    path is given, passes as it is."""
    try:
        yield
    except OSError as exc:
        if isinstance(exc, ResultsFileError) or (exc.filename is None and path is None):
            raise
        raise ResultsIOError(f"cannot write {exc.filename or path}: {exc.strerror or exc}") from None


def run(config: RunConfig) -> int:
    """Plan the matrix the validated flags ask for, then run it (or print it with --dry-run).

    Bad input and unwritable files raise RunnerError (the CLI picks the exit code)."""
    m, s = config.matrix, config.session
    logging.basicConfig(level=getattr(logging, s.log_level.upper()), format="experiment_runner: %(message)s",
                        stream=sys.stderr, force=True)
    # A file-size limit must fail a write with EFBIG (exit 3, one line), not kill the runner.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    if s.executor == "local" and s.launcher == "forkserver" and not (s.dry_run or s.list_models):
        # Its imports overlap with ours: probing, planning, resuming. The XLA server starts
        # once the plan is known to hold XLA experiments (below).
        prestart(torch=m.xla is None or None in m.xla, dynamo=children_import_dynamo(m.dynamo, m.test))
    try:
        suite = suite_catalog(m.suite_name)
    except UnknownSuite as exc:
        raise UsageError(exc.args[0]) from None
    except CatalogError as exc:
        raise UsageError(str(exc)) from None
    if suite.missing_packages:
        packages = ", ".join(suite.missing_packages)
        raise UsageError(f"--suite-name={m.suite_name} needs {packages}, not installed here; install with: "
                         f"{install_command(list(suite.missing_packages))}")
    names = suite.model_names
    models = select_shard(m, names, suite.listing)
    if not models:
        shown = ", ".join(sorted(names)[:40]) + (" ..." if len(names) > 40 else "")
        raise UsageError(f"no {m.suite_name} model matches the filters; models: {shown}")
    try:
        caps = probe_capabilities()
    except ProbeError as exc:
        raise UsageError(f"cannot probe this host (is torch installed?): {exc}") from None
    if s.executor == "ray" and "cuda" in (m.accelerator or ()):
        caps = dataclasses.replace(caps, cuda=True)  # the cluster's GPUs, checked once connected
    check_requested(m, caps)

    expanded = build_plan(m, suite, models, caps, config.options.no_skip)
    gpu_ids = tuple(filter(None, (s.gpu_ids or os.environ.get("CUDA_VISIBLE_DEVICES")
                                  or ",".join(map(str, range(caps.cuda_device_count)))).split(",")))
    plan = RunPlan(config, suite, models, expanded, gpu_ids, config.fingerprint())
    if s.list_models:
        print_models(expanded, suite, models, m.batch_size)
        return EXIT_OK
    if s.dry_run:
        print_dry_run(expanded, resume(plan).done, s.processes)
        print_machine_time(expanded, s.processes, s.estimate_from, max(1, min(s.max_parallel, len(gpu_ids))))
        return EXIT_OK
    if not expanded.planned:
        reasons = {d.reason for d in expanded.dropped}
        why = f": {reasons.pop()}" if len(reasons) == 1 else ""
        raise UsageError(f"every combination was dropped as invalid here{why}; --dry-run lists them")
    # One runner per results file, from before the choice of the run to continue until the end.
    with write_errors_in_one_line():
        lock = lock_results(s.results_path, s.wait_for_lock)
    try:
        state = resume(plan)
        if not state.todo:
            failures = (f"; {state.failed_final} of them failed (--retry-failed runs those again)"
                        if state.failed_final else "")
            otherwise = config.options.measured_otherwise(state.options or {})
            differs = (f"; this command measures otherwise ({', '.join(otherwise)}), which does not make "
                       "another run" if otherwise else "")
            print(f"experiment_runner: nothing to run: all {len(expanded.planned)} experiment(s) already have "
                  f"{'a record' if s.processes == 1 else 'their records'} in run {state.run_id} of "
                  f"{s.results_path}{failures}{differs} (--no-resume runs everything again as a new run)")
            return EXIT_OK
        if (s.executor == "local" and s.launcher == "forkserver"
                and any(p.experiment.config.xla is not None and p.skip_reason is None for p in state.todo)
                and torch_xla_importable()):
            prestart(torch=False, xla=True)
        gpus = lock_gpus(gpu_ids or ("0",), Path(s.gpu_lock_dir), s.wait_for_lock, s.results_path) \
            if s.executor == "local" and plan.needs_gpus(state.todo) else []
        try:
            return execute(plan, state)
        finally:
            release_gpus(gpus)
    finally:
        os.close(lock)


def resume(plan: RunPlan) -> RunState:
    """The run to continue (the default; --no-resume starts a new one), what it already holds and
    what is left to do.

    Only this command's runs are continued (RunConfig.fingerprint); when the file holds runs
    of other commands only, a new run starts and one line says so."""
    s = plan.config.session
    run_id, timestamp = new_run_id(), s.timestamp
    if not s.resume:
        return RunState(run_id, time.time() if timestamp is None else timestamp, set(), set(),
                        matrix.rounds(plan.matrix.planned, s.processes, set(), set()))
    registered, damaged = registered_runs(Path(s.output_dirname), s.results_path)
    for path, why in damaged:
        print(f"experiment_runner: warning: ignored the damaged run entry {path} ({why}); the records' "
              "fingerprints say which run is this command's", file=sys.stderr)
    state = resume_state(s.results_path, s.retry_failed, s.timestamp, plan.fingerprint, registered)
    if state.bad_lines:
        where = ", ".join(str(b.lineno) for b in state.bad_lines[:5])
        print(f"experiment_runner: warning: skipped {len(state.bad_lines)} corrupt or torn line(s) "
              f"of {s.results_path} (line {where}); they are kept as they are", file=sys.stderr)
    if state.run_id is None and state.other_runs and not s.dry_run:
        logger.info(f"starting a new run beside {state.other_runs} earlier run(s) of other commands in "
                    f"{s.results_path}, kept as they are (a rerun of this command resumes its own run)")
    planned_ids = {p.experiment.experiment_id for p in plan.matrix.planned}
    timestamp = state.timestamp if timestamp is None else timestamp
    entry = registered.get(state.run_id) if state.run_id is not None else None
    done = {(eid, index) for eid, index in state.done if eid in planned_ids}
    failed = state.failed & planned_ids
    return RunState(state.run_id or run_id, time.time() if timestamp is None else timestamp, done, failed,
                    matrix.rounds(plan.matrix.planned, s.processes, done, failed), state.failed_final,
                    entry.options if entry is not None else None)


def execute(plan: RunPlan, state: RunState) -> int:
    """Register the run, start its reaper, run it (under the results file's lock, which the
    caller holds); the reaper ends with it."""
    config = plan.config
    s = config.session
    results_path, output_dir = s.results_path, Path(s.output_dirname)
    created = not results_path.exists()
    with write_errors_in_one_line(results_path):
        output_dir.mkdir(parents=True, exist_ok=True)
        with open(results_path, "ab"):
            pass
        register_run(output_dir, RunEntry(state.run_id, plan.fingerprint, state.timestamp,
                                          os.path.realpath(results_path), sys.argv, time.time(),
                                          dataclasses.asdict(config.options)))
    start_reaper()
    try:
        return _execute(plan, state)
    except (RunnerError, ResultsFileError):
        if created and results_path.stat().st_size == 0:
            results_path.unlink()  # refused before its first record (e.g. by the executor): leave no empty file
        raise
    finally:
        stop_reaper()


def _execute(plan: RunPlan, state: RunState) -> int:
    m, s = plan.config.matrix, plan.config.session
    output_dir, results_path = Path(s.output_dirname), s.results_path
    with write_errors_in_one_line():
        executor = create(ExecutorOptions(
            name=s.executor, timeout_s=s.subprocess_timeout, launcher=s.launcher,
            preload_dynamo=children_import_dynamo(m.dynamo, m.test),
            print_subprocess=s.print_subprocess, server_log=output_dir / "runs" / state.run_id / "forkserver.log",
            max_parallel=s.max_parallel, gpu_ids=plan.gpu_ids, parallel_cpu=s.parallel_cpu,
            ray_address=s.ray_address, allow_mixed_versions=s.allow_mixed_versions))
    try:
        executor.prepare(state.todo)
    except UsageError:
        executor.close()
        raise

    ctx = RecordContext(run_id=state.run_id, options=plan.config.options, output_dir=output_dir,
                        fingerprint=plan.fingerprint, host_environment=describe_environment(),
                        timestamp=state.timestamp, processes=s.processes,
                        shard={"partition_id": m.partition_id, "total_partitions": m.total_partitions,
                               "by": m.shard_by or "contiguous"})
    progress = sys.stderr.isatty() if s.progress_bar is None else s.progress_bar
    runner = Runner(ctx, results_path, executor, timeout_s=s.subprocess_timeout, progress_bar=progress,
                    heartbeat_s=s.heartbeat)
    what = "experiment(s)" if s.processes == 1 else \
        f"experiment process(es) ({s.processes} fresh processes per experiment, in rounds)"
    # Said once the run really starts, so that bad input before it stays one line.
    logger.info(plan.about)
    logger.info(f"run {state.run_id}: {len(state.todo)} {what} to run, {len(state.done)} already done; "
                f"records go to {results_path}")
    with write_errors_in_one_line():  # ResultsFileError, or an experiment's folder, task or log file
        try:
            outcome = runner.run(plan.matrix, state.done, plan.suite.source, state.failed)
        finally:
            executor.close()
    print(render_summary(outcome.records, results_path, state.run_id, outcome.interrupted))
    if s.minify and not outcome.interrupted:
        minify_records(outcome.records, results_path, output_dir, s.minify_timeout,
                       lambda line: logger.info(printable(line)))
    return 128 + outcome.stopped_by if outcome.stopped_by is not None else EXIT_OK
