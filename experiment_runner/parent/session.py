"""The parent's run: plan the matrix, resume, launch one child per experiment, summarise.

Reached from `cli.main` with validated flags. Never imports torch or model code: the
host is probed in a child, suites are resolved by name (plugin suites through a child).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
import time
from pathlib import Path

from model_suites.registry import UnknownSuite
from experiment_runner.core import matrix
from experiment_runner.core.environment import describe_environment
from experiment_runner.core.options import RunOptions
from experiment_runner.core.record import RecordContext
from experiment_runner.core.results import ResultsFileError
from experiment_runner.core.shards import balanced_shards, read_durations
from experiment_runner.errors import (
    EXIT_OK,
    EXIT_RESULTS_IO,
    EXIT_USAGE,
    UsageError,
    fail,
)
from experiment_runner.parent.executors import ExecutorOptions, create
from experiment_runner.parent.host import ProbeError, probe_capabilities, torch_xla_importable
from experiment_runner.parent.launch.forkserver_launcher import children_import_dynamo, prestart
from experiment_runner.parent.launch.reaper import start_reaper, stop_reaper
from experiment_runner.parent.runner import Runner
from experiment_runner.parent.store import RunLocked, lock_run, new_run_id, resume_state
from experiment_runner.parent.suites import CatalogError, SuiteCatalog, suite_catalog
from experiment_runner.parent.summary import render_summary

logger = logging.getLogger("experiment_runner")


def check_requested(args: argparse.Namespace, caps: matrix.HostCapabilities) -> None:
    """Explicit requests that cannot run here are errors; defaults are silently narrowed."""
    if "cuda" in (args.accelerator or []) and not caps.cuda:
        raise UsageError("--accelerator=cuda, but CUDA is not available on this host "
                         "(torch.cuda.is_available() is False)")
    if "PJRT" in (args.xla or []) and not caps.torch_xla:
        raise UsageError("--xla=PJRT, but torch_xla cannot be imported here")
    xla_accelerators = (args.accelerator or []) if "PJRT" in (args.xla or []) else ["tpu"]
    for acc in set(args.accelerator or []) & set(xla_accelerators):
        if caps.torch_xla and acc not in caps.xla_accelerators:
            raise UsageError(f"--accelerator={acc} with xla, but torch_xla found no {acc} PJRT device")
    for backend in args.dynamo or []:
        if backend not in (None, "openxla") and backend not in caps.dynamo_backends:
            known = ", ".join(sorted(caps.dynamo_backends))
            raise UsageError(f"unknown dynamo backend {backend!r}; known: None, openxla, {known}")


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
        print(f"{i:4d}. {exp.model_name}: {exp.config.label()}{mark}")
    if plan.dropped:
        print(f"\n{len(plan.dropped)} combination(s) dropped:")
        by_reason: dict[str, list[str]] = {}
        for d in plan.dropped:
            labels = by_reason.setdefault(d.reason, [])
            if d.config.label() not in labels:
                labels.append(d.config.label())
        for reason, labels in by_reason.items():
            examples = "; ".join(labels[:3]) + (f"; and {len(labels) - 3} more" if len(labels) > 3 else "")
            print(f"  - {reason}: {examples}")


def select_shard(args: argparse.Namespace, names: list[str], listing: list[str] | None = None) -> list[str]:
    """This host's models: the reference's contiguous blocks of the suite's listing (default),
    round-robin, or balanced by earlier durations."""
    if args.shard_by is None or args.shard_by == "round-robin":
        return matrix.select_models(names, args.filter_patterns, args.exclude_patterns, args.total_partitions,
                                    args.partition_id, round_robin=args.shard_by == "round-robin", listing=listing)
    models = matrix.select_models(names, args.filter_patterns, args.exclude_patterns)
    try:
        durations = read_durations(Path(args.shard_by.partition(":")[2]))
    except ResultsFileError as exc:
        fail(str(exc), EXIT_RESULTS_IO)
    return balanced_shards(models, durations, args.total_partitions)[args.partition_id]


def build_plan(args: argparse.Namespace, suite: SuiteCatalog, models: list[str],
               caps: matrix.HostCapabilities) -> matrix.Plan:
    """The experiments the validated flags ask for on a host with `caps` (tests simulate hosts)."""
    choices = matrix.MatrixChoices(
        accelerators=args.accelerator, xla=args.xla, dynamo=args.dynamo, tests=args.test,
        precisions=args.precision, xla_flags=args.xla_flags, batch_size=args.batch_size,
        torch_xla2=args.torch_xla2, keep_model_data_on_cuda=args.keep_model_data_on_cuda,
        enable_functionalization=args.enable_functionalization, default_precision=suite.default_precision,
        compile_options=args.compile_options, eval_precisions=suite.eval_precisions,
    )
    return matrix.expand(args.suite_name, models, choices, caps, suite.skip_rules, args.no_skip)


def run(args: argparse.Namespace, options: RunOptions) -> int:
    """Plan the matrix the validated flags ask for, then run it (or print it with --dry-run)."""
    logging.basicConfig(level=getattr(logging, args.log_level.upper()), format="experiment_runner: %(message)s",
                        stream=sys.stderr, force=True)
    # A file-size limit must fail a write with EFBIG (exit 3, one line), not kill the runner.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        if args.executor == "local" and args.launcher == "forkserver" and not args.dry_run:
            # Its imports overlap with ours: probing, planning, resuming. The XLA server starts
            # once the plan is known to hold XLA experiments (below).
            prestart(torch=args.xla is None or None in args.xla, dynamo=children_import_dynamo(args.dynamo, args.test))
        try:
            suite = suite_catalog(args.suite_name)
        except UnknownSuite as exc:
            raise UsageError(exc.args[0]) from None
        except CatalogError as exc:
            raise UsageError(str(exc)) from None
        names = suite.model_names
        models = select_shard(args, names, suite.listing)
        if not models:
            shown = ", ".join(sorted(names)[:40]) + (" ..." if len(names) > 40 else "")
            raise UsageError(f"no {args.suite_name} model matches the filters; models: {shown}")
        try:
            caps = probe_capabilities()
        except ProbeError as exc:
            raise UsageError(f"cannot probe this host (is torch installed?): {exc}") from None
        if args.executor == "ray" and "cuda" in (args.accelerator or []):
            caps = dataclasses.replace(caps, cuda=True)  # the cluster's GPUs, checked once connected
        check_requested(args, caps)
    except UsageError as exc:
        fail(str(exc), EXIT_USAGE)

    plan = build_plan(args, suite, models, caps)
    results_path = Path(args.output_dirname) / args.output_basename

    done: set[tuple[str, int]] = set()  # (experiment_id, process index)
    failed: set[str] = set()
    run_id, timestamp = new_run_id(), args.timestamp
    try:
        if args.resume:
            state = resume_state(results_path, args.retry_failed, args.timestamp)
            planned_ids = {p.experiment.experiment_id for p in plan.planned}
            run_id = state.run_id or run_id
            done = {(eid, index) for eid, index in state.done if eid in planned_ids}
            failed = state.failed & planned_ids
            timestamp = state.timestamp if timestamp is None else timestamp
            if state.bad_lines:
                where = ", ".join(str(b.lineno) for b in state.bad_lines[:5])
                print(f"experiment_runner: warning: skipped {len(state.bad_lines)} corrupt or torn line(s) "
                      f"of {results_path} (line {where}); they are kept as they are", file=sys.stderr)
    except ResultsFileError as exc:
        fail(str(exc), EXIT_RESULTS_IO)
    args.gpu_id_list = tuple(filter(None, (args.gpu_ids or os.environ.get("CUDA_VISIBLE_DEVICES")
                                           or ",".join(map(str, range(caps.cuda_device_count)))).split(",")))

    if args.dry_run:
        print_dry_run(plan, done, args.processes)
        return EXIT_OK
    if not plan.planned:
        fail("every combination was dropped as invalid here; --dry-run shows why", EXIT_USAGE)
    todo = matrix.rounds(plan.planned, args.processes, done, failed)
    if not todo:
        print(f"experiment_runner: nothing to run: all {len(plan.planned)} experiment(s) already have "
              f"{'a record' if args.processes == 1 else 'their records'} in run {run_id} of {results_path} "
              "(--no-resume runs them again as a new run)")
        return EXIT_OK
    if (args.executor == "local" and args.launcher == "forkserver"
            and any(p.experiment.config.xla is not None and p.skip_reason is None for p in todo)
            and torch_xla_importable()):
        prestart(torch=False, xla=True)
    # Said once the run really starts, so that bad input before it stays one line.
    about = f"{args.suite_name}: {suite.description or suite.source + ' models'}"
    return execute(args, options, plan, results_path, run_id, done, suite.source,
                   time.time() if timestamp is None else timestamp, failed, about)


def execute(args: argparse.Namespace, options: RunOptions, plan: matrix.Plan, results_path: Path, run_id: str,
            done: set[tuple[str, int]], source: str, timestamp: float, failed: set[str] = frozenset(),
            about: str = "") -> int:
    """Take the run's lock, start its reaper, run it; the lock and the reaper end with it."""
    output_dir = Path(args.output_dirname)
    created = not results_path.exists()
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        with open(results_path, "ab"):
            pass
        run_lock = lock_run(output_dir / "runs" / run_id)
    except RunLocked as exc:
        fail(str(exc), EXIT_USAGE)
    except OSError as exc:
        fail(f"cannot write {exc.filename or results_path}: {exc.strerror or exc}", EXIT_RESULTS_IO)
    if args.resume:  # a runner that held the lock before us may have finished some more
        try:
            state = resume_state(results_path, args.retry_failed, args.timestamp)
        except ResultsFileError as exc:
            fail(str(exc), EXIT_RESULTS_IO)
        if state.run_id == run_id:
            planned_ids = {p.experiment.experiment_id for p in plan.planned}
            done = {(eid, index) for eid, index in state.done if eid in planned_ids}
            failed = state.failed & planned_ids
    start_reaper()
    try:
        return _execute(args, options, plan, results_path, run_id, done, source, timestamp, failed, about)
    except SystemExit:
        if created and results_path.stat().st_size == 0:
            results_path.unlink()  # refused before its first record (e.g. by the executor): leave no empty file
        raise
    finally:
        stop_reaper()
        os.close(run_lock)


def _execute(args: argparse.Namespace, options: RunOptions, plan: matrix.Plan, results_path: Path, run_id: str,
             done: set[tuple[str, int]], source: str, timestamp: float, failed: set[str], about: str) -> int:
    output_dir = Path(args.output_dirname)
    try:
        executor = create(ExecutorOptions(
            name=args.executor, timeout_s=args.subprocess_timeout, launcher=args.launcher,
            preload_dynamo=children_import_dynamo(args.dynamo, args.test),
            print_subprocess=args.print_subprocess, server_log=output_dir / "runs" / run_id / "forkserver.log",
            max_parallel=args.max_parallel, gpu_ids=args.gpu_id_list, parallel_cpu=args.parallel_cpu,
            ray_address=args.ray_address, allow_mixed_versions=args.allow_mixed_versions))
    except UsageError as exc:
        fail(str(exc), EXIT_USAGE)
    except OSError as exc:
        if exc.filename is None:
            raise
        fail(f"cannot write {exc.filename}: {exc.strerror or exc}", EXIT_RESULTS_IO)
    try:
        todo = matrix.rounds(plan.planned, args.processes, done, failed)
        executor.prepare(todo)
    except UsageError as exc:
        executor.close()
        fail(str(exc), EXIT_USAGE)

    ctx = RecordContext(run_id=run_id, options=options, output_dir=output_dir,
                        host_environment=describe_environment(),
                        timestamp=timestamp, processes=args.processes,
                        shard={"partition_id": args.partition_id, "total_partitions": args.total_partitions,
                               "by": args.shard_by or "contiguous"})
    progress = sys.stderr.isatty() if args.progress_bar is None else args.progress_bar
    runner = Runner(ctx, results_path, executor, timeout_s=args.subprocess_timeout, progress_bar=progress)
    what = "experiment(s)" if args.processes == 1 else \
        f"experiment process(es) ({args.processes} fresh processes per experiment, in rounds)"
    if about:
        logger.info(about)
    logger.info(f"run {run_id}: {len(todo)} {what} to run, {len(done)} already done; records go to {results_path}")
    try:
        try:
            outcome = runner.run(plan, done, source, failed)
        finally:
            executor.close()
    except OSError as exc:  # ResultsFileError, or an experiment's folder, task or log file
        if not isinstance(exc, ResultsFileError) and exc.filename is None:
            raise
        fail(str(exc) if isinstance(exc, ResultsFileError) else f"cannot write {exc.filename}: {exc.strerror or exc}",
             EXIT_RESULTS_IO)
    print(render_summary(outcome.records, results_path, run_id, outcome.interrupted))
    return 128 + outcome.stopped_by if outcome.stopped_by is not None else EXIT_OK
