"""Command line: drop-in compatible with PyTorch/XLA's benchmarks/experiment_runner.py.

`experiment_runner [run flags]` runs a matrix; `experiment_runner report ...`,
`experiment_runner compare ...` and `experiment_runner history ...` analyse results files.
Bad input is one line on stderr and a non-zero exit (see `errors.py`), never a traceback.

Flags and dispatch only: the run itself is `parent.session.run`, the analysis commands
live in `analysis/`. `--help` imports neither torch nor any child-side module.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import sys
from dataclasses import fields
from typing import NoReturn, Sequence

from experiment_runner.core import matrix
from experiment_runner.core.options import (
    COMPILE_SCOPES,
    COMPILE_TIME_DOC,
    CPU_LAUNCHERS,
    DEFAULT_MIN_SAMPLE_TIME_S,
    DEFAULT_NOISY_HOST_SHARE,
    SAVE_IR_FORMATS,
    RunOptions,
)
from experiment_runner.errors import EXIT_BROKEN_PIPE, EXIT_INTERNAL, EXIT_USAGE, UsageError, fail

# Subcommand → the analysis module whose main(argv) runs it.
SUBCOMMANDS = {"report": "experiment_runner.analysis.report", "compare": "experiment_runner.analysis.compare",
               "merge": "experiment_runner.analysis.merge", "history": "experiment_runner.analysis.history"}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        fail(f"{message} (see --help)", EXIT_USAGE)


def _none_or(value: str) -> str | None:
    return matrix.parse_none(value)


def build_parser() -> argparse.ArgumentParser:
    from model_suites.registry import available_suites

    p = _Parser(
        prog="experiment_runner",
        description="Run an accelerator x xla x dynamo x test matrix of PyTorch model benchmarks, "
                    "one child process per experiment, one JSON line per experiment. "
                    "Subcommands: 'experiment_runner report FILE...', 'experiment_runner compare A B', "
                    "'experiment_runner merge SHARD.jsonl... -o ALL.jsonl' and "
                    "'experiment_runner history PATH...' (change points over nightly runs).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("matrix")
    g.add_argument("--suite-name", required=True,
                   help=f"model suite: {', '.join(available_suites())}. torchbench runs the real TorchBench when "
                        "it finds it (TORCHBENCH_DIR=checkout, else ./torchbench, ../benchmark ... as the reference "
                        "looks, else an installed torchbenchmark) and built-in models otherwise; the run's first "
                        "line says which")
    g.add_argument("--filter", "-k", action="append", default=[], metavar="REGEX",
                   help="run models whose name matches (repeatable, OR-ed, case-insensitive)")
    g.add_argument("--exclude", "-x", action="append", default=[], metavar="REGEX",
                   help="skip models whose name matches (repeatable, OR-ed, case-insensitive)")
    g.add_argument("--filter-by-tier", type=int, action="append", default=[], metavar="TIER",
                   help="run the TorchBench models of tier 1-3 (PyTorch/XLA's tiers; repeatable, OR-ed with "
                        "--filter)")
    g.add_argument("--exclude-by-tier", type=int, action="append", default=[], metavar="TIER",
                   help="skip the TorchBench models of tier 1-3 (repeatable)")
    g.add_argument("--accelerator", action="append", choices=matrix.ACCELERATORS,
                   help="default: every accelerator usable here")
    g.add_argument("--xla", action="append", type=_none_or, choices=matrix.XLA_CHOICES,
                   help="None or PJRT; default: both where torch_xla is usable. XRT is accepted and dropped "
                        "(removed from torch_xla)")
    g.add_argument("--dynamo", action="append", type=_none_or, metavar="BACKEND",
                   help="None, inductor, openxla or any torch._dynamo.list_backends() name; "
                        "default: None, inductor, openxla")
    g.add_argument("--test", action="append", choices=matrix.TESTS, help="default: eval and train")
    g.add_argument("--precision", action="append", choices=matrix.PRECISIONS,
                   help="default, as in the reference: eval bf16 on every accelerator (fp16 or amp for the "
                        "models torchbench lists), train amp on cuda and tpu and fp32 on cpu; the dummy suite "
                        "fp32. PyTorch's CPU dashboard measures fp32: --precision=fp32")
    g.add_argument("--xla-flags", action="append", type=_none_or, metavar="FLAGS",
                   help="one value of the XLA_FLAGS dimension (repeatable), crossed with every --xla value and "
                        "exported to those experiments as XLA_FLAGS")
    g.add_argument("--torch-xla2", action="append", choices=matrix.TORCH_XLA2_MODES,
                   help="run through torch_xla2 (torchax) in this mode: a dimension (repeatable); "
                        "requires dynamo None")
    g.add_argument("--keep-model-data-on-cuda", action="store_true",
                   help="openxla experiments: keep model and data on CUDA and let the dynamo bridge move them "
                        "to the XLA device (other dynamo values are dropped)")
    g.add_argument("--enable-functionalization", action="store_true",
                   help="keep torch_xla's functionalization layer on; by default xla experiments run with "
                        "XLA_DISABLE_FUNCTIONALIZATION=1, as in the reference")
    g.add_argument("--experiment-config", metavar="JSON",
                   help="run exactly this one configuration (a JSON object with accelerator, xla, dynamo, test "
                        "and optionally xla_flags, torch_xla2, keep_model_data_on_cuda, "
                        "enable_functionalization, batch_size), with --model-config")
    g.add_argument("--model-config", metavar="JSON",
                   help='run exactly this one model: {"model_name": NAME}, with --experiment-config')
    g.add_argument("--batch-size", type=int, help="override every model's default batch size")
    g.add_argument("--compile-options", action="append", choices=matrix.COMPILE_OPTIONS,
                   help="torch.compile settings, one matrix dimension (repeatable; default: default). "
                        "reduce-overhead/max-autotune/max-autotune-no-cudagraphs: inductor's modes "
                        "(reduce-overhead needs cuda); dynamic: dynamic shapes from the start; freezing: "
                        "inductor weight freezing, CPU eval only. Eager experiments ignore it; combinations "
                        "that cannot apply are dropped (see --dry-run)")
    g.add_argument("--total-partitions", type=int, default=1, help="shard the model list over N hosts")
    g.add_argument("--partition-id", type=int, default=0, help="which shard this host runs (0-based)")
    g.add_argument("--no-skip", action="store_true", help="run models the suite's skip list excludes")
    g.add_argument("--dry-run", action="store_true",
                   help="print the expanded matrix and what was dropped and why; run nothing")

    g = p.add_argument_group("timing")
    g.add_argument("--repeat", type=int, default=10, help="timed runs per experiment")
    g.add_argument("--iterations-per-run", type=int, default=None,
                   help="iterations inside one timed run (sample); default: calibrated after warm-up so "
                        "that one sample lasts --min-sample-time (the record keeps the chosen count)")
    g.add_argument("--min-sample-time", type=float, default=DEFAULT_MIN_SAMPLE_TIME_S, metavar="SECONDS",
                   help="shortest timed run when --iterations-per-run is calibrated (the trials are kept "
                        "in measurements.calibration)")
    g.add_argument("--compile-scope", choices=COMPILE_SCOPES, default="step",
                   help="what torch.compile wraps: step = the whole iteration (train: zero_grad, forward, "
                        "loss, backward, optimizer step), as PyTorch's and PyTorch/XLA's harnesses do; "
                        "model = the module's forward only")
    g.add_argument("--threads", type=int, metavar="N",
                   help="torch intra-op threads per experiment (default: physical cores in the process's "
                        "affinity mask; recorded in environment.cpu)")
    g.add_argument("--cpu-launcher", choices=CPU_LAUNCHERS, default="none",
                   help="run_cpu: CPU experiments get what torch.backends.xeon.run_cpu sets up (pinned to "
                        "physical cores, OMP_NUM_THREADS, tcmalloc/jemalloc and Intel OpenMP preloaded "
                        "when installed); the child re-executes itself under it")
    g.add_argument("--noisy-host-share", type=float, default=DEFAULT_NOISY_HOST_SHARE, metavar="SHARE",
                   help="flag a record noisy_host when other processes used more than this share of the "
                        "host's CPUs during its timed runs, beyond what /proc/stat resolves (null: too short "
                        "to tell; metrics host_load says how much, and others_cpu_resolution_s)")
    g.add_argument("--processes", type=int, default=1, metavar="N",
                   help="measure each experiment in N fresh processes, interleaved pyperf-style (round 1 runs "
                        "every experiment once, round 2 again, ...); one record per process, with "
                        "process.index and process.count. With N >= 2 `compare` tests on per-process medians, "
                        "so process-to-process noise (memory layout, autotuning, clocks) is sampled")
    g.add_argument("--warmup-iterations", type=int, default=2,
                   help="untimed iterations first (they hold compilation; their times are recorded apart)")
    g.add_argument("--randomize-input", action="store_true",
                   help="random input values of the same shapes and dtypes")
    g.add_argument("--collect-full-output", action="store_true",
                   help="training iterations return the model output beside the loss")
    g.add_argument("--matmul-precision", choices=("default", "highest", "high", "medium"),
                   help="torch.set_float32_matmul_precision (and torch_xla's) for every experiment; 'default' is "
                        "torch's default, 'highest'. Given, it wins over the default TF32 'high' (the reference "
                        "only honours it with --disable-tf32)")
    g.add_argument("--disable-tf32", action="store_true",
                   help="float32 matmuls at full precision; by default they use TF32 ('high'), as in the reference")
    g.add_argument("--pure-wall-time", action="store_true",
                   help="time CUDA experiments with CUDA events around the queued work (no host launch "
                        "overhead); CPU and XLA samples stay device-synchronized wall time, which is what the "
                        "reference's pure wall time is there; records say which clock (timing_clock)")
    g.add_argument("--filter-by-single-graph", action="store_true",
                   help="compile with fullgraph=True: an experiment whose model breaks into several graphs fails")
    g.add_argument("--save-output", action="store_true",
                   help="save each timed run's output (moved to the CPU) with torch.save in the experiment's "
                        "folder")
    g.add_argument("--flush-denormal", action=argparse.BooleanOptionalAction, default=False,
                   help="flush denormal floats to zero on the CPU (torch.set_flush_denormal), in eager and "
                        "compiled runs alike; off by default, as PyTorch's CPU dashboard runs. Recorded as "
                        "experiment.flush_denormal")

    g = p.add_argument_group("verification")
    g.add_argument("--verify", action="store_true",
                   help="check accuracy against eager and float64 in the same run; code in the record")
    g.add_argument("--verify-iterations", type=int, default=1,
                   help="training steps before comparing loss, gradients and parameters")
    g.add_argument("--tolerance", type=float, help="override the suite's verification tolerance")

    g = p.add_argument_group("PyTorch/XLA artifacts (xla experiments; files in each experiment's folder)")
    g.add_argument("--dump-hlo", action="store_true",
                   help="dump the compiled HLO modules (XLA_FLAGS=--xla_dump_to) into hlo/")
    g.add_argument("--save-ir-format", "--save-ir", dest="save_ir_format", choices=SAVE_IR_FORMATS,
                   help="save the traced graphs' IR in this format into ir/")
    g.add_argument("--dump-pytorch-xla-metrics", action="store_true",
                   help="write torch_xla's metrics report per repeat into repeat_<i>/")
    g.add_argument("--profile-xla", action="store_true",
                   help="XPlane profiler traces of the timed runs into xla-profile/ (TensorBoard); not with the "
                        "PyTorch profiler flags")
    g.add_argument("--profile-xla-duration-ms", type=int, default=5000, metavar="MS",
                   help="how long --profile-xla traces")

    g = p.add_argument_group(
        "instrumentation",
        "Every record's measurements carry first_iter_time_s, steady_iter_time_s and compile_time_s; "
        f"{COMPILE_TIME_DOC} Dynamo experiments also get dynamo_compile (dynamo's own compile-time "
        "accounting, and precompiled_headers_built: inductor's machine-wide C++ headers built during this "
        "compile) and graph_breaks (counts by reason). Peak memory is in bytes: timed_peak_rss_bytes "
        "(timed runs), lifetime_peak_rss_bytes (the child's whole life, read at its end), on CUDA "
        "peak_allocated_bytes and "
        "peak_reserved_bytes (timed runs). The flags below measure outside the timed runs.")
    g.add_argument("--collect-dynamo-counters", action="store_true",
                   help="torch._dynamo counters in the record's measurements as dynamo_counters")
    g.add_argument("--dump-dynamo-counters", action="store_true",
                   help="dynamo counters after each timed run into repeat_<i>/dynamo_counters.json")
    g.add_argument("--profile-cuda-cpu", action="store_true",
                   help="a torch.profiler pass after the timed runs: total_cpu_time_s, per_iter_cpu_time_s, "
                        "total_cuda_time_s, per_iter_cuda_time_s per run")
    g.add_argument("--profile-cuda-cpu-individual-ops", action="store_true",
                   help="per-op self/total CPU and CUDA time and call counts per profiled run as "
                        "metrics.inductor_ops (aten ops; on XLA metrics.xla_unlowered_ops, the fallback ops), "
                        "summed in measurements.per_op_profile")
    g.add_argument("--dump-pytorch-profiles", action="store_true",
                   help="Chrome trace and key_averages table per profiled run in repeat_<i>/")
    g.add_argument("--cache-bench", action="store_true",
                   help="cold then warm compile in two fresh processes on one inductor/triton cache folder: "
                        "cold_compile_time_s, warm_compile_time_s")

    g = p.add_argument_group("processes and output")
    g.add_argument("--subprocess-timeout", type=float, default=60 * 60,
                   help="seconds per experiment; then the child's whole process group is killed")
    g.add_argument("--print-subprocess", action="store_true", help="stream children's output here too")
    g.add_argument("--progress-bar", action=argparse.BooleanOptionalAction, default=None,
                   help="tqdm progress bar (default: on when stderr is a terminal)")
    g.add_argument("--output-dirname", default="output", help="folder for results and artifacts")
    g.add_argument("--output-basename", default="results.jsonl", help="results file inside the folder")
    g.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"),
                   help="the runner's own messages: info shows the run's start (source, counts); warning and "
                        "above only problems")
    g.add_argument("--timestamp", type=float, metavar="SECONDS",
                   help="the run's timestamp (seconds since the epoch) in every record of the run, as "
                        "nightly jobs pass one per night (default: when the run started; a resumed run "
                        "keeps its own)")
    resume = g.add_mutually_exclusive_group()
    resume.add_argument("--resume", action="store_true", default=True,
                        help="the default: continue the run in the results file (the one stamped --timestamp "
                             "when given, else the latest), skipping experiments it already has a record of; "
                             "a rerun of a finished command runs nothing")
    resume.add_argument("--no-resume", dest="resume", action="store_false",
                        help="start a new run, appended to the results file. Unlike the reference runner, "
                             "which deletes the file, earlier records are never deleted")
    g.add_argument("--retry-failed", action="store_true",
                   help="when resuming, also run again experiments whose record is not ok or skipped")
    g.add_argument("--max-parallel", type=int, default=1, metavar="N",
                   help="run up to N experiments at once, one per visible GPU (CUDA_VISIBLE_DEVICES pinned "
                        "per child); CPU experiments still run one at a time, since CPU timings taken side "
                        "by side interfere (see --parallel-cpu)")
    g.add_argument("--gpu-ids", metavar="IDS",
                   help="comma-separated GPU ids to spread cuda experiments over "
                        "(default: CUDA_VISIBLE_DEVICES, else every GPU torch sees)")
    g.add_argument("--parallel-cpu", action="store_true",
                   help="let CPU experiments run side by side under --max-parallel too; their timings "
                        "then interfere and are not comparable with serial runs")
    g.add_argument("--launcher", choices=("forkserver", "subprocess"), default="forkserver",
                   help="forkserver: fork each experiment's fresh process from a server that has torch "
                        "imported (fast start, no device initialized before the fork); subprocess: start "
                        "a new interpreter per experiment (XLA experiments get a server of their own; "
                        "PT_XLA_DEBUG ones start fresh). On Ray, each node's worker starts its experiments "
                        "the same way")

    g = p.add_argument_group("many hosts (see 'Many hosts' in the README)")
    g.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local: experiments on this host (--launcher, --max-parallel); ray: each experiment is a "
                        "Ray task on a node of an existing cluster, run there in its own child process "
                        "(needs pip install 'experiment_runner[ray]'; nodes declare experiment_slot for CPU "
                        "experiments, cuda experiments take one GPU each)")
    g.add_argument("--ray-address", default=os.environ.get("RAY_ADDRESS"), metavar="HOST:PORT",
                   help="the Ray cluster to join with --executor=ray (default: the RAY_ADDRESS variable)")
    g.add_argument("--allow-mixed-versions", action="store_true",
                   help="with --executor=ray, run even when the nodes' torch versions differ")
    g.add_argument("--shard-by", metavar="round-robin|duration:PATH",
                   help="balance the --total-partitions shards by each model's duration in an earlier results "
                        "file (longest first onto the least loaded shard; unknown models count as the median); "
                        "round-robin: deal the sorted, filtered models round-robin; "
                        "default: the reference's contiguous blocks of the sorted, unfiltered model list")
    return p


def options_from_args(args: argparse.Namespace) -> RunOptions:
    """RunOptions take every parsed flag whose name matches one of their fields."""
    values = vars(args)
    return RunOptions(**{f.name: values[f.name] for f in fields(RunOptions) if f.name in values})


# Every numeric run flag (but the tiers, which the reference ignores when undefined) with its
# range; each must also be finite (argparse takes "nan" and "inf" for a float flag, and nan
# compares false with every bound).
NUMERIC_FLAGS: dict[str, tuple[float, float, str]] = {
    "repeat": (1, math.inf, "at least 1"),
    "iterations_per_run": (1, math.inf, "at least 1"),
    "min_sample_time": (0, 60, "in (0, 60] seconds"),
    "threads": (1, math.inf, "at least 1"),
    "noisy_host_share": (0, 1, "in [0, 1]"),
    "processes": (1, math.inf, "at least 1"),
    "warmup_iterations": (0, math.inf, "0 or more"),
    "batch_size": (1, math.inf, "at least 1"),
    "total_partitions": (1, math.inf, "at least 1"),
    "partition_id": (0, math.inf, "0 or more"),
    "verify_iterations": (1, math.inf, "at least 1"),
    "tolerance": (0, math.inf, "a finite number, 0 or more"),
    "subprocess_timeout": (0, math.inf, "a positive finite number of seconds"),
    "max_parallel": (1, math.inf, "at least 1"),
    "timestamp": (0, math.inf, "a finite number of seconds since the epoch"),
    "profile_xla_duration_ms": (1, math.inf, "at least 1"),
}
# ... of which these exclude their lower bound: a zero timeout would kill every child at once.
EXCLUSIVE_LOW = frozenset({"min_sample_time", "subprocess_timeout"})


def validate(args: argparse.Namespace) -> None:
    for name, (low, high, wanted) in NUMERIC_FLAGS.items():
        value = getattr(args, name, None)
        if value is None:
            continue
        too_low = value <= low if name in EXCLUSIVE_LOW else value < low
        if not math.isfinite(value) or too_low or value > high:
            raise UsageError(f"--{name.replace('_', '-')} must be {wanted}, got {value}")
    if not args.partition_id < args.total_partitions:
        raise UsageError("--partition-id must be in [0, --total-partitions)")
    if args.retry_failed and not args.resume:
        raise UsageError("--retry-failed retries within a resumed run; it cannot go with --no-resume")
    if args.gpu_ids is not None and not re.fullmatch(r"\d+(,\d+)*", args.gpu_ids.replace(" ", "")):
        raise UsageError(f"--gpu-ids must be comma-separated integers, got {args.gpu_ids!r}")
    for flags in args.xla_flags or []:
        check_xla_flags(flags)
    if args.executor == "ray":
        local_only = [flag for flag, used in (("--max-parallel", args.max_parallel != 1),
                                              ("--gpu-ids", args.gpu_ids is not None),
                                              ("--parallel-cpu", args.parallel_cpu),
                                              ("--print-subprocess", args.print_subprocess)) if used]
        if local_only:
            raise UsageError(f"{local_only[0]} is for --executor=local; on Ray the nodes' resources "
                             "(GPUs, experiment_slot) decide what runs at once, and each child's log comes back "
                             "with its record")
    elif args.allow_mixed_versions:
        raise UsageError("--allow-mixed-versions needs --executor=ray")
    if args.shard_by is not None and args.shard_by != "round-robin":
        kind, _, path = args.shard_by.partition(":")
        if kind != "duration" or not path:
            raise UsageError("--shard-by must be round-robin or duration:PATH (an earlier results file), "
                             f"got {args.shard_by!r}")
    pytorch_profiling = args.dump_pytorch_profiles or args.profile_cuda_cpu or args.profile_cuda_cpu_individual_ops
    if args.profile_xla and pytorch_profiling:
        raise UsageError("--profile-xla cannot go with the PyTorch profiler flags (--dump-pytorch-profiles, "
                         "--profile-cuda-cpu*): one profiling path at a time, as in the reference")
    apply_single_config(args)
    apply_tiers(args)


# The keys an --experiment-config may hold: the reference's experiment configuration.
SINGLE_CONFIG_KEYS = frozenset({"accelerator", "xla", "xla_flags", "dynamo", "torch_xla2", "test", "batch_size",
                                "keep_model_data_on_cuda", "enable_functionalization"})


def _json_object(text: str, flag: str) -> dict:
    import json

    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{flag} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise UsageError(f"{flag} must be a JSON object, got {text!r}")
    return value


def apply_single_config(args: argparse.Namespace) -> None:
    """--experiment-config with --model-config: exactly one experiment, as the reference's
    subprocess mode runs it; the matrix flags are replaced by its single values."""
    if args.experiment_config is None and args.model_config is None:
        return
    if args.experiment_config is None or args.model_config is None:
        raise UsageError("--experiment-config and --model-config go together: they name one experiment")
    exp = _json_object(args.experiment_config, "--experiment-config")
    model = _json_object(args.model_config, "--model-config")
    unknown = sorted(set(exp) - SINGLE_CONFIG_KEYS)
    missing = sorted({"accelerator", "xla", "dynamo", "test"} - set(exp))
    if unknown or missing:
        raise UsageError(f"--experiment-config: {'unknown key ' + unknown[0] if unknown else 'missing ' + missing[0]}"
                         f"; keys: {', '.join(sorted(SINGLE_CONFIG_KEYS))}")
    if not isinstance(model.get("model_name"), str):
        raise UsageError('--model-config must name the model: {"model_name": NAME}')
    accelerator = str(exp["accelerator"]).lower()  # the reference lower-cases it (PJRT device names)
    if accelerator not in matrix.ACCELERATORS:
        raise UsageError(f"--experiment-config: unknown accelerator {exp['accelerator']!r}")
    none_or = lambda value: matrix.parse_none(None if value is None else str(value))  # noqa: E731
    args.accelerator, args.test = [accelerator], [str(exp["test"])]
    args.xla, args.dynamo = [none_or(exp["xla"])], [none_or(exp["dynamo"])]
    args.xla_flags = [none_or(exp.get("xla_flags"))]
    args.torch_xla2 = [none_or(exp.get("torch_xla2"))]
    args.keep_model_data_on_cuda = bool(exp.get("keep_model_data_on_cuda"))
    args.enable_functionalization = bool(exp.get("enable_functionalization"))
    if exp.get("batch_size") is not None:
        args.batch_size = int(exp["batch_size"])
    if args.test[0] not in matrix.TESTS or args.xla[0] not in matrix.XLA_CHOICES:
        raise UsageError(f"--experiment-config: test must be one of {', '.join(matrix.TESTS)} and xla one of "
                         "None, PJRT, XRT")
    args.filter, args.exclude = [f"^{re.escape(model['model_name'])}$"], []
    args.filter_by_tier, args.exclude_by_tier = [], []
    args.total_partitions, args.partition_id = 1, 0


def apply_tiers(args: argparse.Namespace) -> None:
    """--filter-by-tier/--exclude-by-tier become one more --filter/--exclude regex each."""
    from model_suites.base import tier_filter

    for tiers, patterns, flag in ((args.filter_by_tier, args.filter, "--filter-by-tier"),
                                  (args.exclude_by_tier, args.exclude, "--exclude-by-tier")):
        undefined = sorted({t for t in tiers if t not in (1, 2, 3)})
        if undefined:
            print(f"experiment_runner: warning: {flag}={undefined[0]} names no tier (1-3); ignored, as the "
                  "reference runner does", file=sys.stderr)
        pattern = tier_filter(tiers)
        if pattern is not None:
            patterns.append(pattern)


def check_xla_flags(flags: str | None) -> None:
    """XLA_FLAGS is a space-separated list of --name[=value]; XLA aborts the child on anything else."""
    import shlex

    if flags is None:
        return
    try:
        tokens = shlex.split(flags)
    except ValueError as exc:
        raise UsageError(f"malformed --xla-flags {flags!r}: {exc}") from None
    bad = [t for t in tokens if not re.fullmatch(r"--[A-Za-z0-9_]+(=.*)?", t, flags=re.S)]
    if bad or not tokens:
        raise UsageError(f"malformed --xla-flags {flags!r}: expected space-separated --flag[=value] items"
                         + (f", got {bad[0]!r}" if bad else ""))


def compile_or_fail(patterns: Sequence[str], flag: str) -> list[re.Pattern[str]]:
    try:
        return matrix.compile_patterns(patterns)
    except re.error as exc:
        bad = next(p for p in patterns if _invalid(p))
        raise UsageError(f"invalid regex for {flag}: {bad!r}: {exc}") from None


def _invalid(pattern: str) -> bool:
    try:
        re.compile(pattern)
        return False
    except re.error:
        return True


def run_command(argv: Sequence[str]) -> int:
    """Parse and validate the run flags (exit 2 on bad input), then hand over to the parent."""
    args = build_parser().parse_args(argv)
    try:
        validate(args)
        args.filter_patterns = compile_or_fail(args.filter, "--filter")
        args.exclude_patterns = compile_or_fail(args.exclude, "--exclude")
    except UsageError as exc:
        fail(str(exc), EXIT_USAGE)
    from experiment_runner.parent.session import run

    return run(args, options_from_args(args))


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP outside the run loop (which handles them itself, like Ctrl-C)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop(signum: int, _frame: object) -> None:
    raise Stopped(signum)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _dispatch(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:
        # Our reader went away (`experiment_runner --dry-run | head`): records already written
        # stay written; no traceback, and nothing more for Python to flush into the pipe at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _dispatch(argv: list[str]) -> int:
    if argv and argv[0] in SUBCOMMANDS:
        from importlib import import_module

        return import_module(SUBCOMMANDS[argv[0]]).main(argv[1:])
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop)
    try:
        return run_command(argv)
    except KeyboardInterrupt as exc:  # outside the run loop: no experiment is running
        signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
        print(f"experiment_runner: stopped by {signal.Signals(signum).name} while no experiment was running",
              file=sys.stderr)
        return 128 + signum
    except BrokenPipeError:
        raise
    except Exception:  # noqa: BLE001 - a bug of ours: keep the traceback, say so, exit 1
        import traceback

        traceback.print_exc()
        print("experiment_runner: internal error (a bug in the runner, not in your input); "
              "the traceback above says where", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
