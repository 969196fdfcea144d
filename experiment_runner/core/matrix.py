"""The experiment matrix: configurations, validity rules, filters, order and shards.

Pure Python on purpose (no torch): the parent expands and prints the matrix, and
`--dry-run` must stay instant and never touch a device.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field, replace
from itertools import product
from typing import Collection, Iterable, Mapping, Sequence

from experiment_runner.core import dashboards

ACCELERATORS: tuple[str, ...] = ("cpu", "cuda", "tpu")
XLA_MODES: tuple[str | None, ...] = (None, "PJRT")
# --xla accepts the reference runner's XRT too; it is planned and dropped with a reason.
XLA_CHOICES: tuple[str | None, ...] = (*XLA_MODES, "XRT")
TORCH_XLA2_MODES: tuple[str, ...] = ("extract_jax", "torch_export")
DYNAMO_BUILTINS: tuple[str | None, ...] = (None, "inductor", "openxla")
TESTS: tuple[str, ...] = ("eval", "train")
PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "fp16", "amp")

# The torch.compile settings the dashboards compare, one dimension of the matrix.
# "default" is plain torch.compile(backend=...); the modes are inductor's; "dynamic" marks
# the batch dimension dynamic from the start, as the harness's --dynamic-batch-only (any dynamo
# backend); "freezing" folds weights into constants (inductor inference); "aot-inductor" is the
# harness's --export-aot-inductor: torch.export, compiled by AOT Inductor into a package that is
# loaded and timed ("aot-inductor-freezing" with freezing, as PyTorch's CPU dashboard runs it).
# The CUDA performance dashboard's modes add: "no-cudagraphs" (the harness's --disable-cudagraphs),
# "cpp-wrapper" (TORCHINDUCTOR_CPP_WRAPPER=1, without CUDA graphs), "autotune" and
# "freezing-autotune" (TORCHINDUCTOR_MAX_AUTOTUNE=1: inductor's max_autotune config alone, with CUDA
# graphs; the max-autotune mode also tunes by coordinate descent).
COMPILE_OPTIONS: tuple[str, ...] = (
    "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs", "dynamic", "freezing",
    "aot-inductor", "aot-inductor-freezing", "no-cudagraphs", "cpp-wrapper", "autotune", "freezing-autotune",
)
DEFAULT_COMPILE_OPTIONS = "default"
AOT_INDUCTOR_OPTIONS = ("aot-inductor", "aot-inductor-freezing")
FREEZING_OPTIONS = ("freezing", "aot-inductor-freezing", "freezing-autotune")
_INDUCTOR_ONLY_OPTIONS = ("reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs", "freezing",
                          *AOT_INDUCTOR_OPTIONS, "no-cudagraphs", "cpp-wrapper", "autotune", "freezing-autotune")
_CUDA_GRAPH_OPTIONS = ("reduce-overhead",)
_INFERENCE_ONLY_OPTIONS = FREEZING_OPTIONS + AOT_INDUCTOR_OPTIONS

# Whose training step a train experiment takes (benchmark_models/training.py): PyTorch/XLA's
# runner's (an optimizer step on every device), or PyTorch's dynamo harness's (cloned inputs, its
# optimizer where it takes one: on CUDA only), which its dashboard's training runs take.
TRAINING_RECIPES: tuple[str, ...] = ("pytorch_xla", dashboards.HARNESS_RECIPE)
DEFAULT_TRAINING_RECIPE = "pytorch_xla"

# Precision when --precision is not given, as the PyTorch/XLA reference runner sets it:
# inference converted to bf16 on every accelerator, training under AMP where AMP exists (not
# on CPU, which trains in fp32). PyTorch's CPU dashboard measures fp32: --precision=fp32.
DEFAULT_PRECISION: dict[tuple[str, str], str] = {
    ("cpu", "eval"): "bf16",
    ("cpu", "train"): "fp32",
    ("cuda", "eval"): "bf16",
    ("cuda", "train"): "amp",
    ("tpu", "eval"): "bf16",
    ("tpu", "train"): "amp",
}


def parse_none(value: str | None) -> str | None:
    """The CLI spells the absent value 'None', as the reference runner does."""
    if value is None or value.strip().lower() in ("none", "null", ""):
        return None
    return value


@dataclass(frozen=True)
class ExperimentConfig:
    """One point of the configuration space, independent of the model."""

    accelerator: str
    xla: str | None
    xla_flags: str | None
    dynamo: str | None
    test: str
    precision: str
    batch_size: int | None = None  # None: the suite's default for this model and device
    torch_xla2: str | None = None
    keep_model_data_on_cuda: bool = False
    enable_functionalization: bool = False
    compile_options: str = DEFAULT_COMPILE_OPTIONS
    # Training only: whose training step (TRAINING_RECIPES); eval experiments keep the default.
    training_recipe: str = DEFAULT_TRAINING_RECIPE
    # The dashboard configuration --dashboard planned this as where the settings alone name another
    # (a performance job's mode that compiles as an accuracy job does: inductor_with_cudagraphs).
    job: str | None = None

    @property
    def dashboard(self) -> str | None:
        """The PyTorch dashboard configuration this is (cpu_inductor_amp_freezing, ...), if any."""
        return self.job or dashboards.name_of(self.accelerator, self.xla, self.dynamo, self.test, self.precision,
                                              self.compile_options, self.training_recipe)

    def key(self) -> str:
        """Stable text of the configuration; dimensions at their default add nothing, so keys
        written before they existed still match (plain torch.compile adds no compile options)."""
        bs = "default" if self.batch_size is None else str(self.batch_size)
        flags = "" if self.xla_flags is None else f"[{self.xla_flags}]"
        extra = "".join((f"-torch_xla2={self.torch_xla2}" if self.torch_xla2 else "",
                         "-keep_model_data_on_cuda" if self.keep_model_data_on_cuda else "",
                         "-functionalization" if self.enable_functionalization else "",
                         "" if self.compile_options == DEFAULT_COMPILE_OPTIONS else f"-{self.compile_options}",
                         "" if self.training_recipe == DEFAULT_TRAINING_RECIPE else f"-{self.training_recipe}",
                         "" if self.job is None else f"-{self.job}"))
        return (
            f"{self.accelerator}-{self.xla}{flags}-{self.dynamo}-{self.test}"
            f"-{self.precision}-bs{bs}{extra}"
        )

    def label(self) -> str:
        """Short human label used in progress lines and summary tables."""
        parts = [self.accelerator, f"xla={self.xla}", f"dynamo={self.dynamo}", self.test, self.precision]
        if self.xla_flags:
            parts.append(f"XLA_FLAGS={self.xla_flags}")
        if self.batch_size is not None:
            parts.append(f"bs={self.batch_size}")
        if self.torch_xla2:
            parts.append(f"torch_xla2={self.torch_xla2}")
        if self.keep_model_data_on_cuda:
            parts.append("keep_model_data_on_cuda")
        if self.enable_functionalization:
            parts.append("functionalization")
        if self.compile_options != DEFAULT_COMPILE_OPTIONS:
            parts.append(f"compile={self.compile_options}")
        if self.training_recipe != DEFAULT_TRAINING_RECIPE:
            parts.append(f"recipe={self.training_recipe}")
        if self.dashboard is not None:
            parts.append(f"[{self.dashboard}]")
        return " ".join(parts)


@dataclass(frozen=True)
class Experiment:
    suite_name: str
    model_name: str
    config: ExperimentConfig

    @property
    def experiment_id(self) -> str:
        """Stable key of model + configuration: equal across runs, shards and resumes."""
        return f"{self.suite_name}/{self.model_name}/{self.config.key()}"

    @property
    def dirname(self) -> str:
        """A file-system-safe, stable folder name for this experiment's artifacts."""
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{self.model_name}-{self.config.key()}")[:120]
        digest = hashlib.sha1(self.experiment_id.encode()).hexdigest()[:8]
        return f"{safe}-{digest}"

    def to_dict(self) -> dict:
        return {"suite_name": self.suite_name, "model_name": self.model_name, "config": asdict(self.config)}

    @classmethod
    def from_dict(cls, data: dict) -> "Experiment":
        return cls(data["suite_name"], data["model_name"], ExperimentConfig(**data["config"]))


@dataclass(frozen=True)
class SkipRule:
    """A model that cannot run in some configurations; data from the suite's files.

    A field left as None matches every value. `model` is an exact name.
    """

    model: str
    reason: str
    test: str | None = None
    accelerator: str | None = None
    xla: str | None = None
    dynamo: str | None = None

    def matches(self, exp: Experiment) -> bool:
        c = exp.config
        return (
            self.model == exp.model_name
            and self.test in (None, c.test)
            and self.accelerator in (None, c.accelerator)
            and (self.xla is None or self.xla == str(c.xla))
            and (self.dynamo is None or self.dynamo == str(c.dynamo))
        )


@dataclass(frozen=True)
class HostCapabilities:
    """What this host can run, probed once in a child process (see environment.py)."""

    cuda: bool = False
    cuda_device_count: int = 0
    torch_xla: bool = False
    xla_accelerators: frozenset[str] = frozenset()
    dynamo_backends: frozenset[str] = frozenset({"inductor"})


@dataclass(frozen=True)
class MatrixChoices:
    """The dimension values asked for on the command line; None means "the default"."""

    accelerators: Sequence[str] | None = None
    xla: Sequence[str | None] | None = None
    dynamo: Sequence[str | None] | None = None
    tests: Sequence[str] | None = None
    precisions: Sequence[str] | None = None
    xla_flags: Sequence[str | None] | None = None
    batch_size: int | None = None
    torch_xla2: Sequence[str | None] | None = None
    keep_model_data_on_cuda: bool = False
    enable_functionalization: bool = False
    # Suites whose models are always fp32 unless --precision says otherwise (the reference's dummy).
    default_precision: str | None = None
    compile_options: Sequence[str] | None = None
    # model → inference precision without --precision (torchbench's fp16 and forced-AMP lists).
    eval_precisions: Mapping[str, str] = field(default_factory=dict)
    # --dashboard: PyTorch dashboard configurations planned instead of the cartesian product.
    dashboards: Sequence[str] = ()
    # The batch size of PyTorch's accuracy runs for the suite, which --dashboard's accuracy jobs take
    # without --batch-size (its performance jobs take the models' own).
    dashboard_batch_size: int | None = None
    training_recipe: str = DEFAULT_TRAINING_RECIPE


@dataclass(frozen=True)
class Dropped:
    """A combination that cannot run here, with the reason `--dry-run` shows."""

    suite_name: str
    model_name: str
    config: ExperimentConfig
    reason: str


@dataclass(frozen=True)
class Planned:
    """An experiment that gets a record: run it, or record it as skipped with the reason.

    With `--processes N` an experiment is planned N times, once per fresh process;
    `process_index` says which (0-based). A skipped experiment is planned once.
    """

    experiment: Experiment
    skip_reason: str | None = None
    process_index: int = 0


@dataclass
class Plan:
    """The expanded matrix in order; dropped combinations are kept for `--dry-run`."""

    planned: list[Planned] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)

    @property
    def to_run(self) -> list[Experiment]:
        return [p.experiment for p in self.planned if p.skip_reason is None]


def rounds(planned: Sequence[Planned], processes: int, done: Collection[tuple[str, int]] = frozenset(),
           failed: Collection[str] = frozenset()) -> list[Planned]:
    """Every experiment's processes interleaved, pyperf-style: round i runs process i of every
    experiment in plan order, so a slow drift of the host (thermal, a neighbour's job) spreads
    over all experiments instead of biasing the ones that happened to run during it.

    `done` holds (experiment_id, process index) pairs already recorded (`--resume`);
    experiments in `failed` already failed in one process and get no further ones.
    """
    order = []
    for index in range(processes):
        for p in planned:
            eid = p.experiment.experiment_id
            if (p.skip_reason is not None and index > 0) or (eid, index) in done or eid in failed:
                continue
            order.append(Planned(p.experiment, p.skip_reason, index))
    return order


def invalid_reason(config: ExperimentConfig, caps: HostCapabilities) -> str | None:
    """Why a configuration cannot run on this host, or None when it can."""
    acc, xla, dynamo = config.accelerator, config.xla, config.dynamo
    if xla == "XRT":
        return "xla=XRT was removed from torch_xla (its runtime is PJRT since 2.1); --xla=XRT is accepted and dropped"
    if config.torch_xla2 and dynamo is not None:
        return "torch_xla2 runs without dynamo"
    if config.keep_model_data_on_cuda and dynamo != "openxla":
        return "keep_model_data_on_cuda requires dynamo=openxla"
    # Valid for the reference, dropped here as XRT is: nothing in this runner runs them.
    if config.torch_xla2:
        return ("torch_xla2 (torchax) has no path in this runner; --torch-xla2 is accepted and its experiments "
                "dropped")
    if config.keep_model_data_on_cuda:
        return ("keep_model_data_on_cuda is an XLA:CUDA path PyTorch/XLA removed in September 2025; "
                "--keep-model-data-on-cuda is accepted and its experiments dropped")
    if acc == "tpu" and xla is None:
        return "tpu requires xla=PJRT"
    if acc == "cuda" and not caps.cuda:
        return "cuda requires torch.cuda.is_available()"
    if dynamo == "inductor" and xla is not None:
        return "inductor requires xla=None"
    if dynamo == "inductor" and acc == "tpu":
        return "inductor does not run on tpu"
    if dynamo == "openxla" and xla is None:
        return "openxla requires xla=PJRT"
    if dynamo not in (None, "inductor", "openxla") and xla is not None:
        return f"dynamo backend {dynamo!r} runs without xla only"
    if dynamo not in (None, "openxla") and dynamo not in caps.dynamo_backends:
        return f"dynamo backend {dynamo!r} is not in torch._dynamo.list_backends()"
    if xla is not None and not config.torch_xla2:  # torch_xla2 brings its own runtime (JAX)
        if not caps.torch_xla:
            return "xla=PJRT requires torch_xla, which is not importable"
        if acc not in caps.xla_accelerators:
            return f"xla=PJRT found no PJRT device for accelerator {acc}"
    if config.precision not in PRECISIONS:
        return f"unknown precision {config.precision!r}"
    return compile_options_invalid_reason(config)


# --precision values that cast the model, and the torch dtype each casts to (amp casts nothing).
PRECISION_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp64": "float64"}


def autocast_dtype(config: "ExperimentConfig") -> str | None:
    """The dtype --precision=amp autocasts to, as the record names it: float16 on CUDA (PyTorch's
    CUDA jobs' and PyTorch/XLA's XLA:CUDA), bfloat16 elsewhere (the CPU jobs', TPU's); None
    without amp. One place, so the step and its record cannot disagree."""
    if config.precision != "amp":
        return None
    return "float16" if config.accelerator == "cuda" else "bfloat16"


def uses_cuda_graphs(config: ExperimentConfig) -> bool:
    """Inductor on CUDA runs CUDA graphs unless the compile options leave them out: the
    reference runner turns them on for inductor on CUDA, reduce-overhead and max-autotune too,
    and PyTorch's harness for its dynamic and freezing configurations; AOT Inductor runs without
    (the harness passes --disable-cudagraphs with --export-aot-inductor). Never on the CPU, as the
    dashboard's CPU performance rows run (--disable-cudagraphs): the flag alone reorders a CPU
    graph's kernels (docs/benchmarks/paired_vs_harness.md)."""
    return (config.dynamo == "inductor" and config.accelerator == "cuda"
            and config.compile_options in (DEFAULT_COMPILE_OPTIONS, "reduce-overhead", "max-autotune",
                                           "dynamic", "freezing", "autotune", "freezing-autotune"))


def compile_options_invalid_reason(config: ExperimentConfig) -> str | None:
    """Why the experiment's compile options cannot apply to it, or None when they can."""
    options = config.compile_options
    if options == DEFAULT_COMPILE_OPTIONS:
        return None
    if options not in COMPILE_OPTIONS:
        return f"unknown compile options {options!r}"
    if config.dynamo is None:
        return f"compile options {options!r} need a dynamo backend"
    if options in _INDUCTOR_ONLY_OPTIONS and config.dynamo != "inductor":
        return f"compile options {options!r} are inductor's; dynamo={config.dynamo} does not take them"
    if options in _CUDA_GRAPH_OPTIONS and config.accelerator != "cuda":
        return f"compile options {options!r} use CUDA graphs, which need accelerator cuda"
    if options in _INFERENCE_ONLY_OPTIONS and config.test != "eval":
        return f"compile options {options!r} are for inference only (test eval), as in PyTorch's harness"
    return None


def compile_patterns(patterns: Iterable[str]) -> list[re.Pattern[str]]:
    """Compile user regexes (case-insensitive); re.error propagates for the CLI to report."""
    return [re.compile(p, re.IGNORECASE) for p in patterns]


def contiguous_shard(count: int, total_partitions: int, partition_id: int) -> slice:
    """The reference runner's shard: block i of N equal blocks, the last taking the rest."""
    size = count // total_partitions
    end = (partition_id + 1) * size if partition_id < total_partitions - 1 else count
    return slice(partition_id * size, end)


def select_models(
    names: Iterable[str],
    filters: Sequence[re.Pattern[str]] = (),
    excludes: Sequence[re.Pattern[str]] = (),
    total_partitions: int = 1,
    partition_id: int = 0,
    round_robin: bool = False,
    listing: Iterable[str] | None = None,
) -> list[str]:
    """Shard, filter and sort model names.

    By default, as the reference runner does, shard i of N is the i-th contiguous block of
    the sorted, UNFILTERED model list, filtered afterwards, so shard i runs the same models
    as the reference's shard i. The list is sorted by code point (uppercase first), as
    torchbenchmark's `_list_model_paths` sorts it, and is `listing` where the suite's listing
    holds more than its models (a torchbenchmark checkout's folders without a model count
    there, so they count here too, and are then left out). With round_robin, shards deal the
    sorted, filtered list round-robin instead (a similar mix of models on every host).
    """
    ordered = sorted(set(names))
    if not round_robin:
        full = sorted(set(ordered if listing is None else listing))
        block = set(full[contiguous_shard(len(full), total_partitions, partition_id)])
        ordered = [n for n in ordered if n in block]
    chosen = [n for n in ordered
              if (not filters or any(f.search(n) for f in filters)) and not any(x.search(n) for x in excludes)]
    return chosen[partition_id::total_partitions] if round_robin else chosen


def dashboard_configurations(choices: MatrixChoices) -> list[ExperimentConfig]:
    """--dashboard: each run (inference, training) of each named PyTorch dashboard configuration
    once, on its own device; --test keeps some runs, --accelerator moves training runs to another
    device (the CLI refuses the other dimension flags beside it). An accuracy job runs at PyTorch's
    accuracy batch size for the suite, a performance job at the models' own, unless --batch-size."""
    configs = []
    for d in dashboards.resolve(tuple(choices.dashboards)):
        batch_size = choices.batch_size
        if batch_size is None and d.target == dashboards.ACCURACY:
            batch_size = choices.dashboard_batch_size
        for run in d.runs:
            if choices.tests and run.test not in choices.tests:
                continue
            for accelerator in choices.accelerators or (d.accelerator,):
                config = ExperimentConfig(accelerator=accelerator, xla=None, xla_flags=None, dynamo=d.dynamo,
                                          test=run.test, precision=run.precision, batch_size=batch_size,
                                          compile_options=d.compile_options,
                                          training_recipe=dashboards.HARNESS_RECIPE if run.test == "train"
                                          else DEFAULT_TRAINING_RECIPE)
                configs.append(config if config.dashboard == d.name else replace(config, job=d.name))
    return configs


def configurations(choices: MatrixChoices) -> list[ExperimentConfig]:
    """The cartesian product in a fixed order: accelerator, xla, dynamo, test, flags, compile options,
    precision (or, with --dashboard, the dashboard configurations it names)."""
    if choices.dashboards:
        return dashboard_configurations(choices)
    accelerators = list(choices.accelerators or ACCELERATORS)
    xla_modes = list(choices.xla if choices.xla is not None else XLA_MODES)
    dynamos = list(choices.dynamo if choices.dynamo is not None else DYNAMO_BUILTINS)
    tests = list(choices.tests or TESTS)
    flags = list(choices.xla_flags or [None])
    xla2 = list(choices.torch_xla2 or [None])
    compile_options = list(choices.compile_options or [DEFAULT_COMPILE_OPTIONS])
    configs = []
    # As in the reference runner, --xla-flags is crossed with every xla value (XLA_FLAGS is
    # exported to every experiment that has them). Compile options only mean something with
    # dynamo: the eager baseline stays one experiment.
    for acc, xla, dynamo, test, xla_flags, torch_xla2, options in product(
            accelerators, xla_modes, dynamos, tests, flags, xla2, compile_options):
        precisions = choices.precisions or [choices.default_precision or DEFAULT_PRECISION[(acc, test)]]
        for precision in precisions:
            configs.append(ExperimentConfig(
                accelerator=acc, xla=xla, xla_flags=xla_flags, dynamo=dynamo,
                test=test, precision=precision, batch_size=choices.batch_size, torch_xla2=torch_xla2,
                keep_model_data_on_cuda=choices.keep_model_data_on_cuda,
                enable_functionalization=choices.enable_functionalization,
                compile_options=options if dynamo is not None else DEFAULT_COMPILE_OPTIONS,
                training_recipe=choices.training_recipe if test == "train" else DEFAULT_TRAINING_RECIPE,
            ))
    return list(dict.fromkeys(configs))


def model_precision(config: ExperimentConfig, model: str, choices: MatrixChoices) -> ExperimentConfig:
    """A model's own inference precision where the suite lists one, as the reference runs it: only
    when neither --precision nor --dashboard chose, and AMP only where it exists (a CPU keeps the bf16 default)."""
    override = choices.eval_precisions.get(model)
    if override is None or choices.precisions or choices.dashboards or config.test != "eval":
        return config
    if override == "amp" and config.accelerator == "cpu":
        return config
    return replace(config, precision=override)


def expand(
    suite_name: str,
    models: Sequence[str],
    choices: MatrixChoices,
    caps: HostCapabilities,
    skip_rules: Sequence[SkipRule] = (),
    no_skip: bool = False,
) -> Plan:
    """Models × configurations, split into runnable, skipped (recorded) and dropped (invalid)."""
    plan = Plan()
    configs = configurations(choices)
    for model in models:
        for config in configs:
            config = model_precision(config, model, choices)
            reason = invalid_reason(config, caps)
            if reason is not None:
                plan.dropped.append(Dropped(suite_name, model, config, reason))
                continue
            exp = Experiment(suite_name, model, config)
            rule = None if no_skip else next((r for r in skip_rules if r.matches(exp)), None)
            plan.planned.append(Planned(exp, None if rule is None else rule.reason))
    return plan
