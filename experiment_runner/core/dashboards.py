"""PyTorch's inductor dashboards, by the names its CI and expected-results files use.

`--dashboard=cpu_inductor_amp_freezing` plans exactly the experiments PyTorch's CI job of that
name runs (its dynamo backend and compile options on its device; an inference run, and for most
CUDA jobs a training run beside it, each in the job's precision), and every record of such an
experiment names its dashboard configuration, so `check-expected` and `export` can pick PyTorch's
file for it. The settings are data (dashboards.json) with their source.

PyTorch's CI trains on CUDA only. A training run of a CUDA job may be planned on the CPU
(`--dashboard=inductor --accelerator=cpu --test=train`): its records name the job, with the
device in `dashboard_overrides`, so a difference from the job's file can be read as the device's.

Beside the accuracy jobs, the CUDA performance dashboard's configurations (inductor_with_cudagraphs,
inductor_max_autotune, ...: test.sh's test_perf_for_dashboard) are planned the same way, on the
models' own batch sizes as its --performance runs take them. No expected file gates them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

DATA_FILE = "dashboards.json"
# The training step an experiment of a training run takes: PyTorch's harness's (see
# benchmark_models/training.py), not the PyTorch/XLA runner's default.
HARNESS_RECIPE = "dynamo_harness"
# How the dashboard's performance job measures a speedup (--speedup): the harness's own way.
SPEEDUP = "harness"
# The pairs it times: a fixed 30, common.py's --repeat default (pytorch/pytorch
# benchmarks/dynamo/common.py @ 00391a7e, speedup_experiment's args.repeat loop).
HARNESS_PAIRS = 30
# dashboard_overrides.pairs of a sequential pair rule (--adaptive-pairs).
ADAPTIVE_PAIRS = "adaptive"
# The pair rule a --dashboard run takes unless told otherwise: sequential, stopping once the
# speedup's 95% interval is within ±5% of it, after --min-pairs and at most the job's 30 pairs: never
# more pairs than the job. Beside the harness's fixed 30 (docs/benchmarks/paired_vs_harness.md,
# 2026-12-02): verdicts equal, speedups within 5% for 8 of 10 models (two moved 15-20% between
# rounds on both sides); --no-adaptive-pairs restores the 30.
PAIRS_HALF_WIDTH = 0.05
# The expected files' word for each test.
MODES = {"eval": "inference", "train": "training"}
# Which dashboard a configuration feeds: its accuracy jobs (gated by expected files) or its
# performance jobs (speedups, no expected file).
ACCURACY, PERFORMANCE = "accuracy", "performance"


@dataclass(frozen=True)
class JobRun:
    """One run of a CI job: `--inference` or `--training`, in its precision."""

    test: str
    precision: str
    harness_flags: str  # what PyTorch's CI passes its harness for this run


@dataclass(frozen=True)
class Dashboard:
    """One configuration of PyTorch's inductor dashboard (a CI job, or one mode of its performance job)."""

    name: str
    accelerator: str
    dynamo: str
    compile_options: str
    runs: tuple[JobRun, ...]
    target: str = ACCURACY

    def run(self, test: str) -> JobRun | None:
        return next((r for r in self.runs if r.test == test), None)

    def expected_file(self, harness_suite: str, test: str) -> str | None:
        """PyTorch's expected-results file for this configuration, a suite (its harness's suite
        name: torchbench, huggingface, timm) and a test; None for a performance mode, which none gates."""
        return f"{self.name}_{harness_suite}_{MODES[test]}.csv" if self.target == ACCURACY else None


@cache
def _data() -> dict:
    return json.loads(files(__package__).joinpath(DATA_FILE).read_text(encoding="utf-8"))


def source() -> str:
    return _data()["source"]


def performance_source() -> str:
    return _data()["performance"]["source"]


def dashboards() -> dict[str, Dashboard]:
    """Every configuration, the accuracy jobs first (a run's settings name the first that has them)."""
    data = _data()
    return {name: Dashboard(name, fields["accelerator"], fields["dynamo"], fields["compile_options"],
                            tuple(JobRun(test, **run) for test, run in fields["runs"].items()), target)
            for target, configurations in ((ACCURACY, data["configurations"]),
                                           (PERFORMANCE, data["performance"]["configurations"]))
            for name, fields in configurations.items()}


def training_jobs() -> tuple[str, ...]:
    """The configurations whose CI job has a training run."""
    return tuple(name for name, d in dashboards().items() if d.run("train") is not None)


def groups() -> dict[str, tuple[str, ...]]:
    """Shorthands for every configuration of one device's dashboard (`--dashboard=cpu`)."""
    return {name: tuple(members) for name, members in _data()["groups"].items()}


def choices() -> tuple[str, ...]:
    return (*groups(), *dashboards())


def resolve(names: tuple[str, ...]) -> list[Dashboard]:
    """The configurations `--dashboard` values name, groups expanded, in order, once each."""
    known, shorthands = dashboards(), groups()
    chosen = [member for name in names for member in shorthands.get(name, (name,))]
    return [known[name] for name in dict.fromkeys(chosen)]


def name_of(accelerator: str, xla: str | None, dynamo: str | None, test: str, precision: str,
            compile_options: str, training_recipe: str | None = None) -> str | None:
    """The dashboard configuration an experiment is, or None when it is none of them. A training
    experiment is one only with the harness's training step (`training_recipe`), and may be a
    CUDA job's run on another device, since no CI job trains anywhere else."""
    if xla is not None or (test == "train" and training_recipe != HARNESS_RECIPE):
        return None
    matching = [d for d in dashboards().values()
                if (d.dynamo, d.compile_options) == (dynamo, compile_options)
                and (run := d.run(test)) is not None and run.precision == precision]
    same_device = [d for d in matching if d.accelerator == accelerator]
    chosen = same_device or (matching if test == "train" else [])
    return chosen[0].name if chosen else None


def dynamic_batch_skips() -> frozenset[str]:
    """Models whose batch the harness never marks dynamic (CI_SKIP_DYNAMIC_BATCH_ONLY)."""
    return frozenset(_data()["dynamic_batch"]["skip_models"])


def harness_iterations() -> int:
    """How many steps the harness's accuracy run compiles and runs (its --iterations default)."""
    return int(_data()["graph_breaks"]["iterations"])


def accuracy_inductor_config() -> dict[str, Any]:
    """The inductor settings the harness's accuracy runs compile under (random ops fall back to
    aten's, so a compiled step draws eager's dropout masks from the same seed)."""
    return dict(_data()["accuracy_inductor_config"]["settings"])


@dataclass(frozen=True)
class Determinism:
    """The harness's accuracy-run determinism for one model (dashboards.json accuracy_determinism):
    torch settings by their dotted name, environment variables, and whether deterministic
    algorithms are on (off for the models the harness exempts)."""

    settings: dict[str, bool]
    environment: dict[str, str]
    source: str

    def describe(self) -> dict[str, Any]:
        return {**self.settings, **{f"env.{k}": v for k, v in self.environment.items()}, "source": self.source}


def accuracy_determinism(model: str) -> Determinism:
    """What the harness's accuracy runs set for `model` before loading it (setup_determinism)."""
    data = _data()["accuracy_determinism"]
    settings = dict(data["settings"])
    if model in data["nondeterministic_algorithm_models"]:
        settings["torch.use_deterministic_algorithms"] = False
    return Determinism(settings, dict(data["environment"]), data["source"])


def accuracy_batch_size(suite: str) -> int | None:
    """The batch size PyTorch's accuracy runs (the ones its expected files come from) use for a
    suite of ours; None for a suite the harness does not run."""
    return _data()["accuracy_batch_size"]["sizes"].get(suite)


@dataclass(frozen=True)
class Batches:
    """The batch a dashboard experiment's verdict and speedup are taken at, here and in PyTorch's
    job; None is the model's own. PyTorch takes its verdict from an --accuracy run (its accuracy
    batch for the suite) and its speedup from a --performance run (the models' own); we verify and
    time one experiment at one batch, so one of the two figures may be at another batch."""

    verdict: int | None
    speedup: int | None
    job_verdict: int | None
    job_speedup: int | None

    def differing(self) -> tuple[str, ...]:
        """The figures taken at another batch than PyTorch's job takes them."""
        return tuple(figure for figure, here, job in (("verdict", self.verdict, self.job_verdict),
                                                      ("speedup", self.speedup, self.job_speedup))
                     if here != job)


def batches(suite: str, batch_size: int | None) -> Batches | None:
    """Where an experiment planned at `batch_size` (None: the model's own) takes a dashboard job's
    two figures, against the job; None for a suite PyTorch's harness does not run. The same for
    every configuration: an accuracy job's own CSV has no speedup, and the one PyTorch publishes
    for its compile comes from the performance runs, at the models' own batch."""
    wanted = accuracy_batch_size(suite)
    return None if wanted is None else Batches(batch_size, batch_size, wanted, None)


def overrides(name: str, suite: str, accelerator: str, verify: bool, batch_size: int | None,
              speedup: str, planned_batch_size: int | None = None,
              pairs: int | str = HARNESS_PAIRS) -> dict[str, Any]:
    """How an experiment of a dashboard configuration ran unlike its CI job: each setting that
    differs, with the value used ({} when it ran as the job runs it). The record keeps it, so a
    reader can tell a job's figure from one taken otherwise (record.experiment.dashboard_overrides).
    `batch_size` is the one it ran at; `planned_batch_size` the one planned (None: the model's own,
    which a performance job takes). `pairs` is the pair rule the speedup was timed with: a fixed
    count, or ADAPTIVE_PAIRS (--adaptive-pairs); the job's is a fixed HARNESS_PAIRS."""
    job = dashboards()[name]
    found: dict[str, Any] = {}
    if accelerator != job.accelerator:
        found["accelerator"] = accelerator
    if not verify:
        found["verify"] = False
    if job.target == PERFORMANCE:
        if planned_batch_size is not None:
            found["batch_size"] = batch_size
    elif (wanted := accuracy_batch_size(suite)) is not None and batch_size != wanted:
        found["batch_size"] = batch_size
    if speedup != SPEEDUP:
        found["speedup"] = speedup
    if speedup != "isolated" and pairs != HARNESS_PAIRS:
        found["pairs"] = pairs
    return found
