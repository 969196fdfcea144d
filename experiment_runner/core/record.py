"""One experiment's record: built from its child's result, or from how the child died.

Pure Python (no torch), shared by every side: the local launchers and remote executors
build records with it, and tests pin its shape.

The child reports every figure in one dict; `split_metrics` sorts it, here and only here,
into the record's `metrics` (exactly the keys PyTorch/XLA's experiment_runner.py writes
there, each a list with one entry per timed repeat, so its result_analyzer.py and
aggregate.py read our files) and `measurements` (every figure of ours: warm-up times,
compile time, peak memory, dynamo accounting, summed op profiles, ...). A failed or
skipped experiment also gets `metrics.error`, which is how the reference's tools tell a
failure from a success.

The record's shape is core/record.schema.json's (see record_schema.py); tests validate what
this builds against it, for every status.
"""

from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterator

from experiment_runner.core import dashboards
from experiment_runner.core.logs import last_words
from experiment_runner.core.matrix import AOT_INDUCTOR_OPTIONS, Experiment, autocast_dtype, uses_cuda_graphs
from experiment_runner.core.options import RunOptions
from experiment_runner.core.protocol import ChildResult, PublishedResult, read_phase
from experiment_runner.core.record_schema import SCHEMA_VERSION
from experiment_runner.core.results import verification_code
from experiment_runner.core.stats import summarize

# The keys PyTorch/XLA's benchmarks/experiment_runner.py puts in a record's `metrics`, each
# a list with one value per timed repeat (run_once_and_gather_metrics, accumulated per repeat
# in run_single_config): timings, the XLA trace split and counters, the profiler totals of
# --profile-cuda-cpu and the per-op tables of --profile-cuda-cpu-individual-ops.
# dynamo_counters is left out on purpose: the reference stores one counter snapshot per
# repeat, ours is one snapshot of the whole experiment (a different figure under that name).
REFERENCE_METRICS: tuple[str, ...] = (
    "total_time", "per_iter_time", "trace_total_time", "trace_per_iter_time",
    "xla_CompileTime_time_s", "xla_CompileTime_number", "xla_ExecuteTime_time_s", "xla_ExecuteTime_number",
    "total_cpu_time_s", "total_cuda_time_s", "per_iter_cpu_time_s", "per_iter_cuda_time_s",
    "inductor_ops", "xla_unlowered_ops",
)
# The child's lifetime (timings.child_s, the run_task call) in disjoint phases, in the order they
# run: start-up imports, setup (threads, device, environment), model build, the paired
# baseline's first warm-up (on a copy, before the compile), the step's build
# (torch.compile's wrapper; the first imports dynamo), warm-up less its compile, compile (first
# warm-up iteration minus a steady one), calibration, the isolated timed samples, the paired
# baseline's build and warm-up, the pairs, instrumentation, the harness-style graph-break count,
# freeing the timed model before verification, verification (its float64 reference included),
# reading the device's artifacts and lifetime peak memory at the end, and other_s, what none of
# them holds (child_s minus the rest). A phase that did not run is absent.
TIMING_PHASES: tuple[str, ...] = (
    "import_s", "setup_s", "load_s", "baseline_first_warmup_s", "build_step_s", "warmup_s", "compile_s",
    "calibration_s", "samples_s", "pairs_warmup_s", "pairs_s", "instrument_s", "verify_prepare_s", "verify_s",
    "harness_graph_breaks_s", "finish_s", "other_s")
# verify_s's steps, each inside it (never summed with TIMING_PHASES): the two eager runs, the float64
# reference (only when a comparison needs it), the experiment's own run, and the comparisons (the
# eager determinism check included). verify_s also holds what lies between them (policy, memory plan).
VERIFY_STEPS: tuple[str, ...] = ("verify_eager_s", "verify_compiled_s", "verify_float64_s", "verify_compare_s")

# What the reference writes as metrics.error for a model it skips as incompatible.
REFERENCE_SKIP_ERROR = "SKIP"

# Lines that identify a memory exhaustion in a log when the child died without a result.
_OOM_MARKERS = ("MemoryError", "out of memory", "OutOfMemoryError", "Cannot allocate memory")


@dataclass
class ChildOutcome:
    """What happened to one child, seen from the parent."""

    result: PublishedResult | None
    returncode: int | None
    timed_out: bool = False
    interrupted: bool = False
    wall_s: float = 0.0
    log_tail: str = ""
    launcher: str = "subprocess"
    cuda_visible_devices: str | None = None  # the GPU the child was pinned to, if any
    # Set by a remote executor that lost the child with its node: error.reason, and what the engine said.
    lost_reason: str | None = None
    lost_detail: str = ""
    # Kernel OOM kills counted while the child ran (see core.process_groups.oom_kill_count) and
    # where they were counted; None when this host does not say.
    oom_kills: int | None = None
    oom_counter: str | None = None
    # Why the outcome is not the child's own (e.g. its fork server died); None when it is.
    launcher_note: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ChildOutcome":
        """The outcome a Ray node sent as `dataclasses.asdict`; fields this checkout lacks are left out."""
        known = {f.name for f in fields(cls)}
        outcome = {k: v for k, v in data.items() if k in known}
        if outcome.get("result") is not None:
            published = outcome["result"]
            outcome["result"] = PublishedResult(ChildResult.from_dict(published["result"]), published["final"])
        return cls(**outcome)


@contextmanager
def phase(timings: dict[str, float], key: str) -> Iterator[None]:
    """Add the wall time of the block to timings[key], also when it raises: a failed phase's
    time was spent too, and the breakdown must still add up to child_s."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        timings[key] = timings.get(key, 0.0) + time.perf_counter() - t0


def classify_death(outcome: ChildOutcome, timeout_s: float | None) -> tuple[str, dict[str, Any]]:
    """Status and error block for a child that left no result of its own."""
    rc = outcome.returncode
    error: dict[str, Any] = {"type": None, "message": "", "traceback_tail": outcome.log_tail,
                             "returncode": rc, "signal": None}
    if rc is not None and rc < 0:
        error["signal"] = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
    if outcome.lost_reason is not None:  # the executor lost it: its node died, or the engine killed it
        error.update(type="Lost", reason=outcome.lost_reason, message=outcome.lost_detail)
        return ("oom" if any(marker in outcome.lost_detail for marker in _OOM_MARKERS) else "crashed"), error
    if outcome.interrupted:
        how = outcome.launcher_note or "the child was killed"
        error.update(type="Interrupted", message=f"the run was interrupted (SIGINT, SIGTERM or SIGHUP); {how}")
        return "interrupted", error
    if outcome.timed_out:
        error.update(type="Timeout", message=f"no result within --subprocess-timeout={timeout_s}s; "
                                             "the child's process group was killed")
        return "timeout", error
    if rc == -signal.SIGKILL and outcome.oom_kills:
        error.update(type="OutOfMemory", message=f"killed by SIGKILL while the kernel counted {outcome.oom_kills} "
                                                 f"out-of-memory kill(s) ({outcome.oom_counter})")
        return "oom", error
    if any(marker in outcome.log_tail for marker in _OOM_MARKERS):
        error.update(type="OutOfMemory", message="the child died out of memory (its log says so)")
        return "oom", error
    if rc == -signal.SIGKILL:
        unknown = " (this host exposes no OOM-kill counter)" if outcome.oom_kills is None else \
            f" (no out-of-memory kill counted in {outcome.oom_counter})"
        error.update(type="Killed", message="killed by SIGKILL, not by the runner" + unknown)
        return "crashed", error
    if rc is None and outcome.launcher_note:
        error.update(type="LauncherDied", message=outcome.launcher_note)
    elif rc is not None and rc < 0:
        words = last_words(outcome.log_tail)
        error.update(type="Signal", message=f"the child died from signal {error['signal']}"
                                            + (f" after printing: {words}" if words else ""))
    else:
        error.update(type="Exit", message=f"the child exited with status {rc} without a result")
    return "crashed", error


def last_phase(artifacts_dir: Path | None, status: str) -> dict[str, Any]:
    """Where a child that left no result was when it died: the phase it last announced
    (core.protocol.PHASES) and for how long, so a timeout says whether it was compiling,
    timing or verifying. Empty when it announced none (it died starting, or ran elsewhere)."""
    found = read_phase(artifacts_dir) if artifacts_dir is not None and status != "skipped" else None
    if found is None:
        return {}
    name, since = found
    return {"last_phase": name, "last_phase_s": round(max(0.0, time.time() - since), 3)}


def split_metrics(figures: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(metrics, measurements): reference keys holding per-repeat lists, and the rest.

    A reference key in any other shape (a scalar, a summary) stays with our measurements,
    so the reference's tools, which take every metrics value as an array, never misread it.
    """
    metrics: dict[str, Any] = {}
    measurements: dict[str, Any] = {}
    for key, value in figures.items():
        if key in REFERENCE_METRICS and isinstance(value, list):
            metrics[key] = value
        else:
            measurements[key] = value
    return metrics, measurements


def reference_error(status: str, error: dict[str, Any] | None) -> str | None:
    """The text the reference's tools see as metrics.error: None when the experiment succeeded."""
    if status == "ok":
        return None
    if status == "skipped":
        return REFERENCE_SKIP_ERROR
    error = error or {}
    head = f"{error.get('type') or status}: {error.get('message') or ''}".rstrip(": ")
    tail = error.get("traceback_tail") or ""
    return f"{head}\n{tail}" if tail else head


def usable_result(outcome: ChildOutcome | None) -> PublishedResult | None:
    """The child's result if it may describe this outcome: none for an interrupted child. A
    timed-out child's result stands too: an interim one (timings published before
    verification) says how far it got, and a final one is the experiment's whole answer,
    whatever kept the child from exiting (see lingered)."""
    if outcome is None or outcome.result is None or outcome.interrupted:
        return None
    return outcome.result


def lingered(outcome: ChildOutcome | None, timeout_s: float | None) -> str | None:
    """The note for a child that published its final result but was still there at the
    timeout (a non-daemon thread, a hung exit): the record is its result, and says so."""
    if outcome is None or not outcome.timed_out or outcome.result is None or outcome.interrupted:
        return None
    if not outcome.result.final:
        return None
    return (f"the child published its final result but had not exited after --subprocess-timeout={timeout_s}s; "
            "its process group was killed")


@dataclass
class RecordContext:
    """Run-wide fields every record carries; `timestamp` is the run's, one for all its records."""

    run_id: str
    options: RunOptions
    output_dir: Path
    fingerprint: str  # RunConfig.fingerprint: which command's run this is (resume reads it)
    host_environment: dict[str, Any] = field(default_factory=dict)
    timestamp: float = field(default_factory=time.time)
    processes: int = 1  # --processes: fresh processes per experiment
    # Which static shard of the suite this run is: partition_id, total_partitions and how the
    # models were split ("contiguous", the reference's, "round-robin" or "duration:PATH").
    shard: dict[str, Any] = field(default_factory=lambda: {"partition_id": 0, "total_partitions": 1,
                                                           "by": "contiguous"})


def build_record(ctx: RecordContext, exp: Experiment, outcome: ChildOutcome | None = None,
                 skip_reason: str | None = None, artifacts_dir: Path | None = None,
                 timeout_s: float | None = None, source: str | None = None,
                 placement: dict[str, Any] | None = None, process_index: int = 0) -> dict[str, Any]:
    """The one record of an experiment's process, from its child's result or its death.

    `placement` says where it ran (executor, host, node id); by default, on this host.
    `process` says which of the experiment's `--processes` this attempt was; readers
    aggregate the processes of one (run_id, experiment_id).
    """
    config = exp.config
    published = usable_result(outcome)
    interim = published is not None and not published.final
    child = None if published is None else published.result
    note = lingered(outcome, timeout_s) or (outcome.launcher_note if outcome is not None else None)
    verification = child.verification if child is not None else None
    if skip_reason is not None:
        status, error = "skipped", {"type": "Skipped", "message": skip_reason}
    elif child is not None and interim:
        # The timed runs finished and were published; the child died verifying them.
        assert outcome is not None
        death_status, death = classify_death(outcome, timeout_s)
        status, error = child.status, {**death, "phase": "verification"}
        verification = {"code": verification_code(ctx.options.verify, status, None), "method": None,
                        "tolerance": None, "details": {"reason": f"the child died during verification "
                                                                 f"({death_status}): {death['message']}"}}
    elif child is not None:
        status, error = child.status, child.error
        if error is not None:
            error = {**error, "returncode": outcome.returncode, "signal": None}
    else:
        assert outcome is not None
        status, error = classify_death(outcome, timeout_s)
        error.update(last_phase(artifacts_dir, status))
        if status == "timeout" and "last_phase" in error:
            error["message"] += f"; it had been {error['last_phase']} for {error['last_phase_s']:.0f} s"
    result = child or ChildResult(status, config.batch_size, config.precision)
    code = verification_code(ctx.options.verify, status, verification)
    metrics, measurements = split_metrics(result.metrics)
    failure = reference_error(status, error)
    if failure is not None:
        metrics["error"] = failure
    relative = (lambda p: os.path.relpath(p, ctx.output_dir)) if artifacts_dir is not None else None
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": ctx.run_id,
        "fingerprint": ctx.fingerprint,
        "experiment_id": exp.experiment_id,
        "model": {"suite_name": exp.suite_name, "model_name": exp.model_name,
                  "source": result.source or source},
        "experiment": {
            "accelerator": config.accelerator,
            "accelerator_model": result.accelerator_model,
            "xla": config.xla,
            "xla_flags": config.xla_flags,
            "dynamo": config.dynamo,
            "torch_xla2": config.torch_xla2,
            "keep_model_data_on_cuda": config.keep_model_data_on_cuda,
            # Off unless --enable-functionalization: xla children get XLA_DISABLE_FUNCTIONALIZATION=1.
            "enable_functionalization": config.enable_functionalization,
            "test": config.test,
            "batch_size": result.batch_size,
            "precision": result.precision,
            "autocast_dtype": autocast_dtype(config),
            # Train only: whose step it is, how it computes its loss and which optimizer steps it.
            "training_recipe": config.training_recipe if config.test == "train" else None,
            "loss": result.loss,
            "optimizer": result.optimizer,
            "flush_denormal": ctx.options.flush_denormal,
            "matmul_precision": ctx.options.effective_matmul_precision,
            "cuda_graphs": uses_cuda_graphs(config),
            "fullgraph": ctx.options.filter_by_single_graph and config.dynamo is not None,
            "compile_options": config.compile_options,
            # AOT Inductor exports the module: the step around it runs eagerly.
            "compile_scope": (None if config.dynamo is None else
                              "model" if config.compile_options in AOT_INDUCTOR_OPTIONS else ctx.options.compile_scope),
            # The PyTorch dashboard configuration (its CI's name) this experiment is, if any.
            "dashboard": config.dashboard,
            "dashboard_overrides": None if config.dashboard is None else dashboards.overrides(
                config.dashboard, exp.suite_name, config.accelerator, ctx.options.verify,
                result.batch_size, ctx.options.speedup, config.batch_size,
                dashboards.ADAPTIVE_PAIRS if ctx.options.pairs_adaptive
                else max(ctx.options.repeat, dashboards.HARNESS_PAIRS)),
        },
        "process": {"index": process_index, "count": ctx.processes},
        "repeat": ctx.options.repeat,
        # The count the child used: --iterations-per-run, or the one it calibrated; the options'
        # where it never timed.
        "iterations_per_run": (ctx.options.iterations_per_run if result.iterations_per_run is None
                               else result.iterations_per_run),
        "iterations_per_run_calibrated": (ctx.options.iterations_per_run is None
                                          if result.iterations_per_run_calibrated is None
                                          else result.iterations_per_run_calibrated),
        "metrics": metrics,
        "measurements": measurements,
        "stats": {"per_iter_time": summarize(result.metrics.get("per_iter_time", []))},
        "status": status,
        "error": error,
        "verification_code": code,
        "verification": verification,
        "artifacts": {
            **({"dir": relative(artifacts_dir), "log": relative(artifacts_dir / "child.log")}
               if relative is not None and outcome is not None else {}),
            **{k: os.path.join(relative(artifacts_dir), v) for k, v in result.artifacts.items()
               if relative is not None},
        },
        # finished_at: when this experiment ended (the run's `timestamp` is one for every record).
        "timings": {**result.timings, **({"wall_s": outcome.wall_s} if outcome else {}),
                    "finished_at": time.time()},
        "placement": {"executor": "local", "host": ctx.host_environment.get("hostname"), "node_id": None,
                      **(placement or {}),
                      "launcher": outcome.launcher if outcome else None,
                      **({"launcher_note": note} if note else {}),
                      "cuda_visible_devices": outcome.cuda_visible_devices if outcome else None,
                      "shard": ctx.shard},
        "environment": result.environment or ctx.host_environment,
        "timestamp": ctx.timestamp,
    }
