"""The per-experiment options a child needs, as the command line set them."""

from __future__ import annotations

from dataclasses import dataclass, fields

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

# How CPU experiments are started: plainly, or re-executed under the settings
# torch.backends.xeon.run_cpu computes (core pinning, tcmalloc/jemalloc preload, OpenMP).
CPU_LAUNCHERS: tuple[str, ...] = ("none", "run_cpu")

# A record is flagged noisy_host when other processes used more than this share of the
# host's CPUs while its timed runs ran.
DEFAULT_NOISY_HOST_SHARE = 0.10

# The IR formats --save-ir-format offers (PyTorch lazy IR text, HLO, StableHLO).
SAVE_IR_FORMATS: tuple[str, ...] = ("text", "hlo", "stablehlo")


@dataclass(frozen=True)
class RunOptions:
    """Per-experiment options from the command line that the worker needs."""

    repeat: int = 10
    iterations_per_run: int | None = None  # None: calibrated to min_sample_time per sample
    min_sample_time: float = DEFAULT_MIN_SAMPLE_TIME_S
    warmup_iterations: int = 2
    seed: int = 1337
    randomize_input: bool = False
    collect_full_output: bool = False
    verify: bool = False
    verify_iterations: int = 1
    tolerance: float | None = None
    matmul_precision: str | None = None
    disable_tf32: bool = False
    flush_denormal: bool = False
    collect_dynamo_counters: bool = False
    dump_dynamo_counters: bool = False
    profile_cuda_cpu: bool = False
    profile_cuda_cpu_individual_ops: bool = False
    dump_pytorch_profiles: bool = False
    cache_bench: bool = False  # cold then warm compile in fresh processes (experiment_runner.cachebench)
    dump_pytorch_xla_metrics: bool = False
    dump_hlo: bool = False
    save_ir_format: str | None = None
    filter_by_single_graph: bool = False  # torch.compile(fullgraph=True), as the reference
    pure_wall_time: bool = False
    save_output: bool = False
    profile_xla: bool = False
    profile_xla_duration_ms: int = 5000
    compile_scope: str = "step"
    threads: int | None = None  # None: the physical cores in the child's affinity mask
    cpu_launcher: str = "none"
    noisy_host_share: float = DEFAULT_NOISY_HOST_SHARE

    @property
    def effective_matmul_precision(self) -> str:
        """torch.set_float32_matmul_precision for every experiment: 'high' (TF32) by default, as
        the reference; 'highest' with --disable-tf32; an explicit --matmul-precision wins
        ('default' is torch's default, 'highest')."""
        if self.matmul_precision is not None:
            return "highest" if self.matmul_precision == "default" else self.matmul_precision
        return "highest" if self.disable_tf32 else "high"

    @classmethod
    def from_dict(cls, data: dict) -> "RunOptions":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
