"""What a run is asked to do, as typed, frozen configuration: the flag table's other two parts.

`RunConfig` is what the CLI hands the parent: `matrix` (which experiments to plan),
`session` (how the parent runs and records them) and `options` (what every child gets,
`core.options.RunOptions`). Each field declares its own flag (`core.flags`), so this
module, with `core/options.py`, *is* the flag table; `GROUPS` orders and explains the
--help sections.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping

from experiment_runner.core import dashboards, matrix
from experiment_runner.core.flags import Flag, option, required
from experiment_runner.core.minify import CHECK_SHARE as MINIFY_CHECK_SHARE
from experiment_runner.core.minify import DEFAULT_TIMEOUT_S as DEFAULT_MINIFY_TIMEOUT_S
from experiment_runner.core.options import COMPILE_TIME_DOC, MATRIX, MEASUREMENT, VERIFICATION, RunOptions

OUTPUT, HOSTS, COMPAT = "output and resume", "executors and hosts", "reference compatibility"

# --help sections in order, with what each says above its flags.
GROUPS: dict[str, str] = {
    MATRIX: "Which experiments: the suite's models crossed with accelerator x xla x dynamo x test "
            "(x precision x compile options); a list flag is one dimension, repeat it for several values.",
    MEASUREMENT: "How each experiment is timed.",
    VERIFICATION: "",
    "PyTorch/XLA artifacts": "xla experiments; files go to each experiment's folder.",
    "instrumentation": (
        "Every record's measurements carry first_iter_time_s, steady_iter_time_s and compile_time_s; "
        f"{COMPILE_TIME_DOC} Dynamo experiments also get dynamo_compile (dynamo's own compile-time accounting, "
        "and precompiled_headers_built: inductor's machine-wide C++ headers built during this compile) and "
        "graph_breaks (counts by reason). Peak memory is in bytes: timed_peak_rss_bytes (timed runs), "
        "lifetime_peak_rss_bytes (the child's whole life, read at its end), on CUDA peak_allocated_bytes and "
        "peak_reserved_bytes (timed runs). The flags below measure outside the timed runs."),
    OUTPUT: "Where records go, and how a rerun continues the run they belong to.",
    HOSTS: "Where and how experiments run: processes, GPUs, static shards, a Ray cluster (docs/many-hosts.md).",
    COMPAT: "Flags of PyTorch/XLA's benchmarks/experiment_runner.py kept so its command lines run unchanged "
            "(docs/compatibility.md).",
}


def _none_or(value: str) -> str | None:
    return matrix.parse_none(value)


@dataclass(frozen=True)
class MatrixConfig:
    """Which experiments to plan: suite, models, dimensions and this host's shard."""

    suite_name: str = required(Flag(
        "model suite: dummy, torchbench, huggingface, timm, or a plugin suite named in $EXPERIMENT_RUNNER_SUITES. "
        "torchbench runs the real TorchBench when it finds it (TORCHBENCH_DIR=checkout, else ./torchbench, "
        "../benchmark ... as the reference looks, else an installed torchbenchmark) and built-in models "
        "otherwise; the run's first line says which", MATRIX))
    filter: tuple[str, ...] = option((), Flag(
        "run models whose name matches (repeatable, OR-ed, case-insensitive)", MATRIX, kind="list",
        aliases=("-k",), metavar="REGEX"))
    exclude: tuple[str, ...] = option((), Flag(
        "skip models whose name matches (repeatable, OR-ed, case-insensitive)", MATRIX, kind="list",
        aliases=("-x",), metavar="REGEX"))
    filter_by_tier: tuple[int, ...] = option((), Flag(
        "run the TorchBench models of tier 1-3 (PyTorch/XLA's tiers; repeatable, OR-ed with --filter)", COMPAT,
        kind="list", parse=int, metavar="TIER",
        compat="PyTorch/XLA's tiers; an undefined tier is ignored with a warning, as there"))
    exclude_by_tier: tuple[int, ...] = option((), Flag(
        "skip the TorchBench models of tier 1-3 (repeatable)", COMPAT, kind="list", parse=int, metavar="TIER",
        compat="PyTorch/XLA's tiers"))
    accelerator: tuple[str, ...] | None = option(None, Flag(
        "accelerator dimension", MATRIX, kind="list", choices=matrix.ACCELERATORS,
        default_help="every accelerator usable here"))
    xla: tuple[str | None, ...] | None = option(None, Flag(
        "None or PJRT", MATRIX, kind="list", parse=_none_or, choices=matrix.XLA_CHOICES,
        default_help="both where torch_xla is usable",
        compat="XRT is accepted and dropped at planning (removed from torch_xla)"))
    dynamo: tuple[str | None, ...] | None = option(None, Flag(
        "None, inductor, openxla or any torch._dynamo.list_backends() name", MATRIX, kind="list",
        parse=_none_or, metavar="BACKEND", default_help="None, inductor, openxla"))
    test: tuple[str, ...] | None = option(None, Flag("eval or train", MATRIX, kind="list", choices=matrix.TESTS,
                                                     default_help="eval and train"))
    precision: tuple[str, ...] | None = option(None, Flag(
        "precision dimension. PyTorch's CPU dashboard measures fp32: --precision=fp32", MATRIX, kind="list",
        choices=matrix.PRECISIONS,
        default_help="as in the reference: eval bf16 on every accelerator (fp16 or amp for the models "
                     "torchbench lists), train amp on cuda and tpu and fp32 on cpu; the dummy suite fp32"))
    xla_flags: tuple[str | None, ...] | None = option(None, Flag(
        "one value of the XLA_FLAGS dimension (repeatable), crossed with every --xla value and exported to "
        "those experiments as XLA_FLAGS", MATRIX, kind="list", parse=_none_or, metavar="FLAGS"))
    torch_xla2: tuple[str, ...] | None = option(None, Flag(
        "run through torch_xla2 (torchax) in this mode", COMPAT, kind="list", choices=matrix.TORCH_XLA2_MODES,
        compat="parsed and planned as the reference plans it, then dropped with its reason: this runner has "
               "no torch_xla2 (torchax) path"))
    keep_model_data_on_cuda: bool = option(False, Flag(
        "openxla experiments: keep model and data on CUDA", COMPAT, kind="switch",
        compat="an XLA:CUDA path PyTorch/XLA removed in September 2025: such experiments are dropped at "
               "planning with their reason"))
    enable_functionalization: bool = option(False, Flag(
        "keep torch_xla's functionalization layer on; by default xla experiments run with "
        "XLA_DISABLE_FUNCTIONALIZATION=1, as in the reference", MATRIX, kind="switch"))
    experiment_config: str | None = option(None, Flag(
        "run exactly this one configuration (a JSON object with accelerator, xla, dynamo, test and optionally "
        "xla_flags, torch_xla2, keep_model_data_on_cuda, enable_functionalization, batch_size), with "
        "--model-config", COMPAT, metavar="JSON", compat="the reference's single-experiment (subprocess) mode"))
    model_config: str | None = option(None, Flag(
        'run exactly this one model: {"model_name": NAME}, with --experiment-config', COMPAT, metavar="JSON",
        compat="the reference's single-experiment (subprocess) mode"))
    batch_size: int | None = option(None, Flag(
        "override every model's default batch size", MATRIX, parse=int, metavar="SIZE", low=1, wanted="at least 1",
        default_help="the suite's, per model and accelerator; with --dashboard, an accuracy job's is PyTorch's "
                     "accuracy runs' size for the suite (huggingface 1, torchbench 4, timm 8)"))
    compile_options: tuple[str, ...] | None = option(None, Flag(
        "torch.compile settings, one matrix dimension (repeatable). reduce-overhead/max-autotune/"
        "max-autotune-no-cudagraphs: inductor's modes (reduce-overhead needs cuda); dynamic: the batch dimension "
        "dynamic from the start (the harness's --dynamic-batch-only); freezing: inductor weight freezing, eval "
        "only; aot-inductor, aot-inductor-freezing: torch.export compiled by AOT Inductor into a package, loaded "
        "and timed (the harness's --export-aot-inductor), eval only; no-cudagraphs: inductor without CUDA graphs "
        "(the harness's --disable-cudagraphs; inductor on cuda takes them otherwise); cpp-wrapper: inductor's C++ "
        "wrapper, without CUDA graphs (TORCHINDUCTOR_CPP_WRAPPER=1); autotune, freezing-autotune: inductor's "
        "max_autotune setting alone, with CUDA graphs, the latter with freezing, eval only "
        "(TORCHINDUCTOR_MAX_AUTOTUNE=1, unlike the max-autotune mode, which also tunes by coordinate descent). "
        "Eager experiments ignore it; "
        "combinations that cannot apply are dropped (see --dry-run)", MATRIX, kind="list",
        choices=matrix.COMPILE_OPTIONS, default_help="default"))
    dashboard: tuple[str, ...] = option((), Flag(
        "plan PyTorch's inductor dashboard configuration NAME, as its CI job of that name runs it (repeatable; "
        "no --dynamo, --precision or --compile-options beside it): cpu_inductor, cpu_inductor_freezing, "
        "cpu_inductor_amp_freezing, dynamic_cpu_inductor, cpu_aot_inductor_freezing (inference), or cpu for all "
        "five; inductor, dynamic_inductor, aot_eager, dynamic_aot_eager, dynamo_eager (inference and training) "
        "and aot_inductor (inference), or cuda-accuracy for these six; the CUDA performance dashboard's modes "
        "inductor_with_cudagraphs, inductor_no_cudagraphs, inductor_dynamic, inductor_max_autotune (inference "
        "and training), inductor_cpp_wrapper, inductor_with_cudagraphs_freezing, "
        "inductor_with_cudagraphs_freezing_autotune, inductor_aot_inductor (inference), or cuda-perf for these "
        "eight; cuda for all fourteen, cuda-daily for all but the two autotune modes (PyTorch's performance "
        "workflow runs those on Sundays only). --test=train keeps the training runs; "
        "--accelerator=cpu with it runs a CUDA job's training on the CPU (PyTorch's CI trains on CUDA only). "
        "Each record names its configuration, which check-expected --pytorch and export use. As the job runs "
        "it: --verify, the job's --batch-size (an accuracy job's for the suite, a performance job's the models' "
        "own), --speedup=harness and the harness's training step, "
        "unless given otherwise (--no-verify, --batch-size, --speedup); what a run changed is in each record's "
        "experiment.dashboard_overrides",
        MATRIX, kind="list", choices=dashboards.choices(), metavar="NAME"))
    training_recipe: str | None = option(None, Flag(
        "whose training step train experiments take: pytorch_xla (PyTorch/XLA's runner: the suite's loss, then an "
        "Adam or SGD step on every device) or dynamo_harness (PyTorch's benchmarks/dynamo harness: cloned "
        "inputs, the suite's loss, an optimizer step on CUDA only, as its init_optimizer); --dashboard's "
        "training runs take dynamo_harness", MATRIX, choices=matrix.TRAINING_RECIPES,
        default_help=matrix.DEFAULT_TRAINING_RECIPE))
    total_partitions: int = option(1, Flag("shard the model list over N hosts", HOSTS, parse=int, metavar="N", low=1,
                                           wanted="at least 1"))
    partition_id: int = option(0, Flag("which shard this host runs (0-based)", HOSTS, parse=int, metavar="I", low=0,
                                       wanted="0 or more"))
    shard_by: str | None = option(None, Flag(
        "balance the --total-partitions shards by each model's duration in an earlier results file (longest "
        "first onto the least loaded shard; unknown models count as the median); round-robin: deal the "
        "sorted, filtered models round-robin", HOSTS, metavar="round-robin|duration:PATH",
        default_help="the reference's contiguous blocks of the sorted, unfiltered model list"))

    @property
    def filter_patterns(self) -> list[re.Pattern[str]]:
        return matrix.compile_patterns(self.filter)

    @property
    def exclude_patterns(self) -> list[re.Pattern[str]]:
        return matrix.compile_patterns(self.exclude)


@dataclass(frozen=True)
class SessionConfig:
    """How the parent runs the plan and where it records it."""

    dry_run: bool = option(False, Flag("print the expanded matrix and what was dropped and why; run nothing",
                                       MATRIX, kind="switch"))
    estimate_from: str | None = option(None, Flag(
        "with --dry-run, estimate the plan's machine time (GPU-hours for its cuda experiments, and the wall "
        "time over --max-parallel GPUs) from an earlier results file's wall time per experiment; experiments "
        "it does not hold count as the median of those it does", MATRIX, metavar="PATH"))
    list_models: bool = option(False, Flag(
        "print the suite's models that the filters select, one line per model and accelerator: the batch size "
        "of each test, the source, and why an experiment would be skipped; run nothing", MATRIX, kind="switch"))
    processes: int = option(1, Flag(
        "measure each experiment in N fresh processes, interleaved pyperf-style (round 1 runs every "
        "experiment once, round 2 again, ...); one record per process, with process.index and process.count. "
        "With N >= 2 `compare` tests on per-process medians, so process-to-process noise (memory layout, "
        "autotuning, clocks) is sampled", MEASUREMENT, parse=int, metavar="N", low=1, high=1000,
        wanted="between 1 and 1000 (pyperf uses 20)"))
    subprocess_timeout: float = option(60 * 60, Flag(
        "seconds per experiment; then the child's whole process group is killed", HOSTS, parse=float,
        metavar="SECONDS",
        low=0, low_open=True, wanted="a positive finite number of seconds"))
    print_subprocess: bool = option(False, Flag("stream children's output here too", OUTPUT, kind="switch"))
    progress_bar: bool | None = option(None, Flag("tqdm progress bar", OUTPUT, kind="toggle",
                                                  default_help="on when stderr is a terminal"))
    heartbeat: float = option(30.0, Flag(
        "without a progress bar (stderr not a terminal: cron, CI, a log file), say every SECONDS which "
        "experiments are running, in which phase (loading, warm-up with its compilation, timing, "
        "instrumenting, verifying) and for how long", OUTPUT, parse=float, metavar="SECONDS", low=0.5,
        wanted="at least 0.5 seconds (a line per experiment each time: less floods the log)"))
    wait_for_lock: float = option(0.0, Flag(
        "when another runner is writing the same results file, or holds a GPU this run needs, wait up to "
        "SECONDS for it to finish instead of exiting 2 (cron jobs that may overlap); then resume as usual", OUTPUT, parse=float, metavar="SECONDS",
        low=0, wanted="0 or more seconds", default_help="0: do not wait"))
    output_dirname: str = option("output", Flag("folder for results and artifacts", OUTPUT, metavar="DIR"))
    output_basename: str = option("results.jsonl", Flag("results file inside the folder (or an absolute path)", OUTPUT,
                                                         metavar="FILE"))
    log_level: str = option("info", Flag(
        "the runner's own messages: info shows the run's start (source, counts); warning and above only "
        "problems", OUTPUT, choices=("critical", "error", "warning", "info", "debug")))
    timestamp: float | None = option(None, Flag(
        "the run's timestamp (seconds since the epoch) in every record of the run, as nightly jobs pass one "
        "per night", OUTPUT, parse=float, metavar="SECONDS", low=0,
        wanted="a finite number of seconds since the epoch",
        default_help="when the run started; a resumed run keeps its own"))
    resume: bool = option(True, Flag(
        "--resume: continue the run in the results file (the one stamped --timestamp when given, else the "
        "latest), skipping experiments it already has a record of, so a rerun of a finished command runs "
        "nothing; --no-resume: start a new run, appended to the results file", OUTPUT, kind="toggle",
        compat="the reference's --no-resume deletes the results file; here earlier records are never deleted"))
    retry_failed: bool = option(False, Flag(
        "when resuming, also run again experiments whose record is not ok or skipped", OUTPUT, kind="switch"))
    max_parallel: int = option(1, Flag(
        "run up to N experiments at once, one per visible GPU (CUDA_VISIBLE_DEVICES pinned per child); CPU "
        "experiments still run one at a time, since CPU timings taken side by side interfere (see "
        "--parallel-cpu)", HOSTS, parse=int, metavar="N", low=1, wanted="at least 1"))
    gpu_ids: str | None = option(None, Flag(
        "comma-separated GPU ids to spread cuda experiments over", HOSTS, metavar="IDS",
        default_help="CUDA_VISIBLE_DEVICES, else every GPU torch sees"))
    gpu_lock_dir: str = option("/tmp/experiment_runner-gpus", Flag(
        "folder, shared by every run on this host, of the per-GPU locks a run with cuda experiments holds "
        "while it runs, so that two runs (two nights) never time on one GPU; a second run waits "
        "(--wait-for-lock) or exits 2 naming the holder", HOSTS, metavar="DIR"))
    parallel_cpu: bool = option(False, Flag(
        "let CPU experiments run side by side under --max-parallel too; their timings then interfere and are "
        "not comparable with serial runs", HOSTS, kind="switch"))
    launcher: str = option("forkserver", Flag(
        "forkserver: fork each experiment's fresh process from a server that has torch imported (fast start, "
        "no device initialized before the fork); subprocess: start a new interpreter per experiment (XLA "
        "experiments get a server of their own; PT_XLA_DEBUG ones start fresh). On Ray, each node's worker "
        "starts its experiments the same way", HOSTS, choices=("forkserver", "subprocess")))
    executor: str = option("local", Flag(
        "local: experiments on this host (--launcher, --max-parallel); ray: each experiment is a Ray task on a "
        "node of an existing cluster, run there in its own child process (needs pip install "
        "'experiment_runner[ray]'; nodes declare experiment_slot for CPU experiments, cuda experiments take "
        "one GPU each)", HOSTS, choices=("local", "ray")))
    ray_address: str | None = option(None, Flag(
        "the Ray cluster to join with --executor=ray", HOSTS, metavar="HOST:PORT", env_default="RAY_ADDRESS",
        default_help="the RAY_ADDRESS variable"))
    allow_mixed_versions: bool = option(False, Flag(
        "with --executor=ray, run even when the nodes' torch versions differ", HOSTS, kind="switch"))
    minify: bool = option(False, Flag(
        "after the run, shrink each red compiled experiment (verdict FAIL, which needs --verify, or status error) "
        "with PyTorch's minifier, one process each with its own inductor cache: accuracy failures after AOT at "
        "level 4 for inductor, after dynamo otherwise; errors at level 2. The repro.py it leaves in the "
        "experiment's minify/ folder is run in a fresh interpreter to check it still fails the same way; the "
        "answer is a `minified` block in minified.jsonl beside the results file, never a change to the record "
        "(the `minify` command does the same for an earlier run)", VERIFICATION, kind="switch"))
    minify_timeout: float = option(DEFAULT_MINIFY_TIMEOUT_S, Flag(
        f"seconds per experiment's minification (dump, shrink, check); past {1 - MINIFY_CHECK_SHARE:g} of them the "
        "process group and every descendant are killed, the last checkpoint is kept as repro.py and checked in "
        "the rest, and the `minified` block says timeout",
        VERIFICATION, parse=float, metavar="SECONDS", low=0, low_open=True,
        wanted="a positive finite number of seconds"))

    @property
    def results_path(self) -> Path:
        return Path(self.output_dirname) / self.output_basename


@dataclass(frozen=True)
class RunConfig:
    """A validated run: the CLI builds it, the parent reads it, the child gets `options`."""

    matrix: MatrixConfig
    session: SessionConfig
    options: RunOptions

    def fingerprint(self) -> str:
        """What the run plans, as a short hash: a rerun of the same command continues its own
        run, another command into the same results file starts its own. The matrix-shaping
        options count (after --experiment-config and the tiers were applied), and --processes;
        how each experiment is measured or where records go does not."""
        import hashlib
        import json

        shaping = {f.name: getattr(self.matrix, f.name) for f in fields(MatrixConfig)
                   if f.name not in ("experiment_config", "model_config", "filter_by_tier", "exclude_by_tier")}
        shaping["processes"] = self.session.processes
        shaping["no_skip"] = self.options.no_skip
        return hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()[:12]

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "RunConfig":
        """Each part takes the values named by its own fields; lists become tuples."""
        def part(config: type) -> Any:
            return config(**{f.name: _frozen(values[f.name]) for f in fields(config) if f.name in values})

        return cls(part(MatrixConfig), part(SessionConfig), part(RunOptions))


# The flag table, in the order --help and docs/cli.md list it.
CONFIGS: tuple[type, ...] = (MatrixConfig, RunOptions, SessionConfig)


def _frozen(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
