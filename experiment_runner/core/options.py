"""The per-experiment options a child needs, each declared once with its flag."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, fields
from typing import Any, Mapping

from experiment_runner.core import dashboards
from experiment_runner.core.flags import Flag, declared, option

# How compile_time_s is derived; the child computes it, --help states it.
COMPILE_TIME_DOC = (
    "compile_time_s = first warm-up iteration minus the median timed iteration, floored at 0: "
    "the one-off cost of the first call (dynamo tracing, backend compilation, cache loads, lazy "
    "initialization) beyond a steady iteration. first_iter_time_s and steady_iter_time_s are "
    "recorded beside it; without warm-up iterations there is no compile_time_s."
)

# Sample calibration (pyperf and torch.utils.benchmark.Timer do the same): a sample shorter
# than this is dominated by per-sample overhead and clock granularity.
DEFAULT_MIN_SAMPLE_TIME_S = 0.02

# What torch.compile wraps: the whole step (zero_grad, forward, loss, backward, optimizer
# step; eval: the forward step), as PyTorch's and PyTorch/XLA's harnesses do, or the module.
COMPILE_SCOPES: tuple[str, ...] = ("step", "model")

# The sequential rule for pairs (--adaptive-pairs): the interval's relative half-width to reach,
# between a floor and a ceiling of pairs. 6 is the fewest pairs with a 95% interval at all.
DEFAULT_PAIRS_HALF_WIDTH = 0.02
DEFAULT_MIN_PAIRS = 10
DEFAULT_MAX_PAIRS = 100

# How a compiled experiment's speedup is measured (--speedup); the last two time the eager
# baseline in the compiled experiment's own process (child/paired.py).
SPEEDUP_METHODS: tuple[str, ...] = ("isolated", "paired", "harness")
PAIRED_METHODS: tuple[str, ...] = ("paired", "harness")

# How CPU experiments are started: plainly, or re-executed under the settings
# torch.backends.xeon.run_cpu computes (core pinning, tcmalloc/jemalloc preload, OpenMP).
CPU_LAUNCHERS: tuple[str, ...] = ("none", "run_cpu")

# A record is flagged noisy_host when other processes used more than this share of the
# host's CPUs while its timed runs ran.
DEFAULT_NOISY_HOST_SHARE = 0.10

# The IR formats --save-ir-format offers (PyTorch lazy IR text, HLO, StableHLO).
SAVE_IR_FORMATS: tuple[str, ...] = ("text", "hlo", "stablehlo")

MATRIX, MEASUREMENT, VERIFICATION, XLA_ARTIFACTS, INSTRUMENTATION = (
    "matrix", "measurement", "verification", "PyTorch/XLA artifacts", "instrumentation")


@dataclass(frozen=True)
class RunOptions:
    """Per-experiment options from the command line that the worker needs."""

    no_skip: bool = option(False, Flag(
        "run models the suite's skip list excludes, and models whose weights alone cannot fit the device's "
        "memory (the child sizes each model on the meta device before building it)", MATRIX, kind="switch"))
    repeat: int = option(10, Flag("timed runs (samples) per experiment", MEASUREMENT, parse=int, metavar="N", low=1,
                                  wanted="at least 1"))
    iterations_per_run: int | None = option(None, Flag(
        "iterations inside one timed run (sample); the record keeps the count used", MEASUREMENT, parse=int,
        metavar="N", low=1, wanted="at least 1",
        default_help="calibrated after warm-up so that one sample lasts --min-sample-time",
        compat="the reference runs 1 iteration per sample; --iterations-per-run=1 does the same"))
    min_sample_time: float = option(DEFAULT_MIN_SAMPLE_TIME_S, Flag(
        "shortest timed run when --iterations-per-run is calibrated (the trials are kept in "
        "measurements.calibration)", MEASUREMENT, parse=float, metavar="SECONDS", low=0, high=60, low_open=True,
        wanted="in (0, 60] seconds"))
    warmup_iterations: int = option(2, Flag(
        "untimed iterations first (they hold compilation; their times are recorded apart)", MEASUREMENT,
        parse=int, metavar="N", low=0, wanted="0 or more"))
    seed: int = 1337
    randomize_input: bool = option(False, Flag("random input values of the same shapes and dtypes", MEASUREMENT,
                                               kind="switch"))
    collect_full_output: bool = option(False, Flag(
        "training iterations return the model output beside the loss", MEASUREMENT, kind="switch"))
    verify: bool = option(False, Flag(
        "check accuracy against eager and float64 in the same run; code in the record. --dashboard turns it on, "
        "as its CI job always checks accuracy; --no-verify keeps it off there (the record says so in "
        "experiment.dashboard_overrides)", VERIFICATION, kind="toggle",
        default_help="off; on with --dashboard"))
    verify_iterations: int = option(1, Flag("training steps before comparing loss, gradients and parameters",
                                            VERIFICATION, parse=int, metavar="N", low=1,
                                            wanted="at least 1"))
    tolerance: float | None = option(None, Flag(
        "override the suite's verification tolerance", VERIFICATION, parse=float, metavar="TOL", low=0,
        wanted="a finite number, 0 or more", default_help="the suite's, from verifier/data/tolerances.json"))
    matmul_precision: str | None = option(None, Flag(
        "torch.set_float32_matmul_precision (and torch_xla's) for every experiment; 'default' is torch's "
        "default, 'highest'. Given, it wins over the TF32 default (the reference only honours it with "
        "--disable-tf32)", MEASUREMENT, choices=("default", "highest", "high", "medium"),
        default_help="'high' (TF32), as in the reference, but oneDNN's CPU matmuls kept IEEE as in PyTorch's "
        "harness; 'highest' with --disable-tf32"))
    disable_tf32: bool = option(False, Flag(
        "float32 matmuls at full precision; by default they use TF32 ('high'), as in the reference", MEASUREMENT,
        kind="switch"))
    flush_denormal: bool = option(False, Flag(
        "flush denormal floats to zero on the CPU (torch.set_flush_denormal), in eager and compiled runs "
        "alike; off by default, as PyTorch's CPU dashboard runs. Recorded as experiment.flush_denormal",
        MEASUREMENT, kind="toggle"))
    collect_dynamo_counters: bool = option(False, Flag(
        "torch._dynamo counters in the record's measurements as dynamo_counters", INSTRUMENTATION, kind="switch"))
    dump_dynamo_counters: bool = option(False, Flag(
        "dynamo counters after each timed run into repeat_<i>/dynamo_counters.json", INSTRUMENTATION,
        kind="switch"))
    profile_cuda_cpu: bool = option(False, Flag(
        "a torch.profiler pass after the timed runs: total_cpu_time_s, per_iter_cpu_time_s, total_cuda_time_s, "
        "per_iter_cuda_time_s per run", INSTRUMENTATION, kind="switch"))
    profile_cuda_cpu_individual_ops: bool = option(False, Flag(
        "per-op self/total CPU and CUDA time and call counts per profiled run as metrics.inductor_ops (aten "
        "ops; on XLA metrics.xla_unlowered_ops, the fallback ops), summed in measurements.per_op_profile",
        INSTRUMENTATION, kind="switch"))
    dump_pytorch_profiles: bool = option(False, Flag(
        "Chrome trace and key_averages table per profiled run in repeat_<i>/", INSTRUMENTATION, kind="switch"))
    cache_bench: bool = option(False, Flag(
        "cold then warm compile in two fresh processes on one inductor/triton cache folder: "
        "cold_compile_time_s, warm_compile_time_s", INSTRUMENTATION, kind="switch"))
    dump_pytorch_xla_metrics: bool = option(False, Flag(
        "write torch_xla's metrics report per repeat into repeat_<i>/", XLA_ARTIFACTS, kind="switch"))
    dump_hlo: bool = option(False, Flag(
        "dump the compiled HLO modules (XLA_FLAGS=--xla_dump_to) into hlo/", XLA_ARTIFACTS, kind="switch"))
    save_ir_format: str | None = option(None, Flag(
        "save the traced graphs' IR in this format into ir/", XLA_ARTIFACTS, aliases=("--save-ir",),
        choices=SAVE_IR_FORMATS))
    filter_by_single_graph: bool = option(False, Flag(
        "compile with fullgraph=True: an experiment whose model breaks into several graphs fails", MEASUREMENT,
        kind="switch"))
    speedup: str = option("isolated", Flag(
        "how a compiled experiment's speedup is measured. isolated: from its own timed samples and those of its "
        "eager experiment, each in its own process; paired: in addition, the compiled experiment's child times "
        "its eager baseline (same model, inputs, precision and batch size) and alternates baseline and compiled "
        "samples after both warmed up, as PyTorch's dynamo harness does, and records both series and the median "
        "ratio with its interval and p-value (measurements.paired), which report and compare then use; harness: "
        "paired, timed as PyTorch's harness times: one iteration per sample, eager first, the ratio of the two "
        "series' medians, and with --compile-options=dynamic eager at the batch its timed() cuts or pads to (the "
        "nominal one up to 21, about 4.7% more from 22 on): the figure PyTorch's dashboard shows. XLA "
        "experiments keep the isolated method. --dashboard takes harness unless this flag is given",
        MEASUREMENT, choices=SPEEDUP_METHODS, default_help="isolated; harness with --dashboard"))
    adaptive_pairs: bool | None = option(None, Flag(
        "time pairs sequentially: stop once the median ratio's 95% interval lies within --pairs-half-width of "
        "it, after at least --min-pairs and at most --max-pairs pairs (measurements.paired.stop_reason says "
        "which); --no-adaptive-pairs: a fixed count, max(--repeat, 30), PyTorch's harness's 30 by default",
        MEASUREMENT, kind="toggle",
        default_help="on for --speedup=paired, and under --dashboard (with its --pairs-half-width and --max-pairs "
                     "defaults); off for --speedup=harness otherwise, which keeps the harness's exact 30 pairs"))
    pairs_half_width: float = option(DEFAULT_PAIRS_HALF_WIDTH, Flag(
        "--adaptive-pairs: the 95% interval's half-width to reach, relative to the median ratio", MEASUREMENT,
        parse=float, metavar="SHARE", low=0, high=1, low_open=True, wanted="in (0, 1]",
        default_help=f"{DEFAULT_PAIRS_HALF_WIDTH}; {dashboards.PAIRS_HALF_WIDTH} with --dashboard"))
    min_pairs: int = option(DEFAULT_MIN_PAIRS, Flag(
        "--adaptive-pairs: the floor, pairs timed before the interval is read at all", MEASUREMENT, parse=int,
        metavar="N", low=6, wanted="at least 6 (fewer pairs have no 95% interval)"))
    max_pairs: int = option(DEFAULT_MAX_PAIRS, Flag(
        "--adaptive-pairs: the ceiling, pairs after which it stops however wide the interval still is",
        MEASUREMENT, parse=int, metavar="N", low=6, wanted="at least 6 and at least --min-pairs",
        default_help=f"{DEFAULT_MAX_PAIRS}; {dashboards.HARNESS_PAIRS}, the harness's count, with --dashboard"))
    isolated_samples: bool = option(False, Flag(
        "--speedup=paired or harness: also time the compiled experiment's --repeat isolated samples before its "
        "pairs and take its per_iter_time from them; by default its per_iter_time is its samples in the pairs "
        "(one compiled sample alone still gives its timed peak memory and training losses), so nothing is "
        "timed twice. measurements.samples_from says which", MEASUREMENT, kind="switch"))
    pure_wall_time: bool = option(False, Flag(
        "time CUDA experiments with CUDA events around the queued work (no host launch overhead); CPU and XLA "
        "samples stay device-synchronized wall time, which is what the reference's pure wall time is there; "
        "records say which clock (timing_clock)", MEASUREMENT, kind="switch"))
    save_output: bool = option(False, Flag(
        "save each timed run's output (moved to the CPU) with torch.save in the experiment's folder", MEASUREMENT,
        kind="switch"))
    profile_xla: bool = option(False, Flag(
        "XPlane profiler traces of the timed runs into xla-profile/ (TensorBoard); not with the PyTorch "
        "profiler flags", XLA_ARTIFACTS, kind="switch"))
    profile_xla_duration_ms: int = option(5000, Flag("how long --profile-xla traces", XLA_ARTIFACTS, parse=int,
                                                     metavar="MS", low=1, wanted="at least 1"))
    compile_scope: str = option("step", Flag(
        "what torch.compile wraps: step = the whole iteration (train: zero_grad, forward, loss, backward, "
        "optimizer step), as PyTorch's and PyTorch/XLA's harnesses do; model = the module's forward only",
        MEASUREMENT, choices=COMPILE_SCOPES))
    threads: int | None = option(None, Flag(
        "torch intra-op threads per experiment (recorded in environment.cpu)", MEASUREMENT, parse=int, metavar="N",
        low=1, wanted="at least 1", default_help="the physical cores in the process's affinity mask"))
    cpu_launcher: str = option("none", Flag(
        "run_cpu: CPU experiments get what torch.backends.xeon.run_cpu sets up (pinned to physical cores, "
        "OMP_NUM_THREADS, tcmalloc/jemalloc and Intel OpenMP preloaded when installed); the child re-executes "
        "itself under it", MEASUREMENT, choices=CPU_LAUNCHERS))
    noisy_host_share: float = option(DEFAULT_NOISY_HOST_SHARE, Flag(
        "flag a record noisy_host when other processes used more than this share of the host's CPUs during its "
        "timed runs, beyond what /proc/stat resolves (null: too short to tell; metrics host_load says how much, "
        "and others_cpu_resolution_s)", MEASUREMENT, parse=float, metavar="SHARE", low=0, high=1, wanted="in [0, 1]"))

    @property
    def effective_matmul_precision(self) -> str:
        """torch.set_float32_matmul_precision for every experiment: 'high' (TF32) by default, as
        the reference; 'highest' with --disable-tf32; an explicit --matmul-precision wins
        ('default' is torch's default, 'highest')."""
        if self.matmul_precision is not None:
            return "highest" if self.matmul_precision == "default" else self.matmul_precision
        return "highest" if self.disable_tf32 else "high"

    @property
    def pairs_adaptive(self) -> bool:
        """--adaptive-pairs as it applies: given, or on for paired and off for harness."""
        return self.speedup != "harness" if self.adaptive_pairs is None else self.adaptive_pairs

    def measured_otherwise(self, earlier: Mapping[str, Any]) -> list[str]:
        """The flags on which these options differ from a run's earlier ones (RunOptions as a dict),
        each as `--flag VALUE (the run's: VALUE)`: a rerun of a finished command that changed only
        how experiments are measured resumes that run and runs nothing, and must say why."""
        def said(value: Any) -> str:
            return ("on" if value else "off") if isinstance(value, bool) else "default" if value is None else str(value)

        now = json.loads(json.dumps(dataclasses.asdict(self)))
        return [f"{option.long} {said(now[option.name])} (the run's: {said(earlier[option.name])})"
                for option in declared(RunOptions)
                if option.name in earlier and now[option.name] != earlier[option.name]]

    @classmethod
    def from_dict(cls, data: dict) -> "RunOptions":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
