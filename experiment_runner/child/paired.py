"""--speedup=paired and --speedup=harness: the compiled experiment's eager baseline, timed in the
same process and alternated with it, as PyTorch's dynamo harness measures a speedup.

Separate processes see different hosts: a frequency change, a neighbour ramping up, another
memory layout. Timing the baseline and the compiled step in one process, pair by pair, gives
both the same host at almost the same moment, so a slow drift cancels in each pair's ratio.
Both steps warm up first (the compiled one already did, before its own samples; under harness
eager's warm-up is the one on a copy before the compile, as the harness's); then each
pair times one sample of each with the same iterations per sample, in ABBA order (baseline
first in even pairs, compiled first in odd ones) so that neither always runs on the other's
heels. How many pairs (pairs_rule): with --adaptive-pairs (paired's default) until the median
ratio's 95% interval is within --pairs-half-width of it, between --min-pairs and --max-pairs;
otherwise max(--repeat, 30), the harness's 30 by default (harness's default). Training steps
are rewound to the same state before every sample.

Before the compile, the baseline's first warm-up runs on a deep copy of the module, which is
then dropped (warm_eager_first), as PyTorch's harness does. On CPU the order moves the eager
figure: glibc's malloc adapts its mmap threshold to what was freed before, so an eager forward
after the compile can take its activations from fresh mmaps, page-faulting them in every time,
where one after an eager warm-up reuses the heap. Measured on repvgg_a2 (batch 8, 2 cores):
34,000 minor faults per eager forward compile-first against 6,000-9,000 eager-first, and 11%
slower (docs/benchmarks/paired_vs_harness.md). Each sample's minor page faults are recorded
beside its time (getrusage), so a record shows when the allocator's state moved a figure.

`harness` times as PyTorch's harness does instead (HARNESS): five eager warm-up iterations,
then pairs of one iteration each, eager always first, and the speedup is the ratio of the two
series' medians. Under its --dynamic-batch-only (the dashboard's dynamic configuration; here
--compile-options=dynamic) its timed() also cuts or pads every eager input to another batch
(HARNESS_BATCH). It means to vary that batch between 0.8 and 1.2 times the nominal one, but it
draws the factor just after reseeding Python's `random` (reset_rng_state, seed 1337), so every
draw is the same, 1.0471: eager runs at the nominal batch up to 21 and about 4.7% above it from
22 on. A harness run with its draws logged shows it (docs/benchmarks/paired_vs_harness.md).
`harness` gives the dashboard's figure; `paired` keeps this runner's choices (ABBA order,
calibrated samples, the median of the per-pair ratios, eager always at the nominal batch).

XLA experiments keep the isolated method: a lazy-tensor baseline and compiled graph share one
device runtime and its compilation caches, so their samples would not be independent pairs.
"""

from __future__ import annotations

import copy
import gc
import math
import random
import resource
import statistics
from dataclasses import replace
from time import perf_counter
from typing import Any, Callable

from experiment_runner.child.devices import DeviceRuntime
from experiment_runner.child.driver import ExperimentDriver, WarmupProbe, run_sample
from experiment_runner.core import dashboards
from experiment_runner.core.cpus import HostLoadSample
from experiment_runner.core.options import PAIRED_METHODS, RunOptions
from experiment_runner.core.stats import PairsRule, paired_speedup, relative_half_width
from benchmark_models import BenchmarkModel

# PyTorch's harness: 30 pairs (common.py's --repeat default) and, for --speedup=harness with
# dynamic shapes, the baseline batch of its timed(): max(2, int(batch x random.uniform(0.8,
# 1.2))) for batches over 1, drawn from Python's random just after reset_rng_state() reseeded it
# with 1337; the first dimension of each input equal to the batch is cut to that size or padded
# with copies of its last row. main() passes the batch to timed() only with --dynamic-batch-only.
# Source: pytorch/benchmark userbenchmark/dynamo/dynamobench/common.py @ 0e83c440 (synced from
# pytorch/pytorch benchmarks/dynamo) and torch/_dynamo/testing.py reset_rng_state.
HARNESS_PAIRS = dashboards.HARNESS_PAIRS
# run_performance_test's warmup(..., niters=5): eager on copy.deepcopy(model) before it compiles,
# then the compiled step (its compile included) with the same count.
HARNESS_EAGER_WARMUP = 5
HARNESS_BATCH = {"low": 0.8, "high": 1.2, "minimum": 2, "seed": 1337, "compile_options": "dynamic",
                 "source": "pytorch/benchmark userbenchmark/dynamo/dynamobench/common.py @ 0e83c440, timed()"}


def applies(driver: ExperimentDriver) -> bool:
    config = driver.config
    return driver.options.speedup in PAIRED_METHODS and config.dynamo is not None and config.xla is None


# measurements.samples_from: where a record's per_iter_time comes from in the paired modes.
PAIR_SAMPLES = "pairs"
ISOLATED_SAMPLES = "isolated"
EAGER_BESIDE_PAIRS = ("the run's compiled experiments time their own eager baseline in their process, pair by pair "
                      "with their samples (measurements.paired), and their speedups use that; this record is the "
                      "same eager step measured on its own, what isolated speedups and compare use")


def first_warmup_iterations(options: RunOptions) -> int:
    """How many iterations the baseline's first warm-up, on a copy before the compile, runs:
    the harness's five under harness, else --warmup-iterations (at least one)."""
    return HARNESS_EAGER_WARMUP if options.speedup == "harness" else max(1, options.warmup_iterations)


# error.phase of a record whose module could not be copied for the paired eager baseline.
BASELINE_COPY_PHASE = "paired baseline copy"


class BaselineCopyFailed(RuntimeError):
    """copy.deepcopy of the module failed for the paired eager baseline: the model's failure under
    this --speedup, not a failure of the compiler or of the eager run itself."""


def warm_eager_first(driver: ExperimentDriver, model: BenchmarkModel, device: DeviceRuntime,
                     options: RunOptions) -> dict[str, Any]:
    """The baseline's first warm-up, before anything compiles: eager iterations on a deep copy of
    the module (its parameters, buffers and optimizer state are the copy's, so the timed model is
    untouched), then the copy is dropped, as PyTorch's harness does (run_performance_test's
    warmup(..., copy.deepcopy(model), ...) under set_stance("force_eager")). Why: the allocator's
    state the pairs' eager samples start from (the module docstring). Measured as the harness
    measures its eager warm-up (WarmupProbe): the block for measurements.harness_warmup.eager."""
    try:
        module = copy.deepcopy(model.module)
    except Exception as exc:
        raise BaselineCopyFailed(f"--speedup={options.speedup}: the paired eager baseline's copy of the module failed "
                                 f"(copy.deepcopy, as PyTorch's harness copies it): {type(exc).__name__}: {exc}") from exc
    twin = replace(model, module=module, training_state=None)
    step = driver.make_step(twin, compiled=False)
    probe = WarmupProbe(device, dynamo_stats=False)
    probe.start()
    times = []
    for _ in range(first_warmup_iterations(options)):
        device.reset_rng(options.seed)
        times.append(run_sample(step, device, 1).elapsed)
    block = probe.finish(times)  # while the copy still lives, as in the harness's warmup()
    del step, twin
    gc.collect()
    return block


def eager_warmup_before_pairs(options: RunOptions) -> int:
    """Eager iterations on the timed model between the compile and the pairs: none under harness,
    whose speedup_experiment times eager on the model straight after the compiled warm-up (its
    eager warm-up ran on the copy, warm_eager_first), so its first pairs are taken as the
    harness takes them and the iterations it never runs cost nothing; --warmup-iterations else."""
    return 0 if options.speedup == "harness" else options.warmup_iterations


def timing_options(options: RunOptions, pairs: bool) -> RunOptions:
    """The options of the compiled step's own samples. Under harness its warm-up is the harness's
    five iterations, the eager warm-up's count, so that compilation_latency (their difference)
    holds the compile and not a difference of counts. When its pairs give its per_iter_time (no
    --isolated-samples) one sample is left, for the timed peak memory, the training losses and
    the per-repeat artifacts; under harness, whose pairs time one iteration each, it is one
    iteration too, so no calibration is spent on it."""
    if not pairs:
        return options
    if options.speedup == "harness":
        options = replace(options, warmup_iterations=HARNESS_EAGER_WARMUP)
    if options.isolated_samples:
        return options
    iterations = 1 if options.speedup == "harness" else options.iterations_per_run
    return replace(options, repeat=1, iterations_per_run=iterations)


def samples(metrics: dict[str, Any], options: RunOptions) -> dict[str, Any]:
    """What the compiled experiment's samples become beside its pairs: with --isolated-samples its
    own timed runs, as before; otherwise its samples in the pairs (per_iter_time, total_time,
    host_load and noisy_host from the pairs; the one sample alone is kept as memory_sample_time)."""
    if options.isolated_samples:
        return {"samples_from": ISOLATED_SAMPLES}
    block = metrics["paired"]
    per_iter = list(block["compiled_per_iter_time"])
    return {"samples_from": PAIR_SAMPLES, "memory_sample_time": metrics["total_time"],
            "per_iter_time": per_iter, "total_time": [t * block["iterations_per_sample"] for t in per_iter],
            "host_load": block["host_load"], "noisy_host": block["host_load"]["noisy_host"]}


def pairs_rule(options: RunOptions) -> PairsRule:
    """How many pairs: sequential between --min-pairs and --max-pairs (--adaptive-pairs, paired's
    default), else the fixed max(--repeat, 30), PyTorch's harness's 30 by default."""
    if options.pairs_adaptive:
        return PairsRule(floor=options.min_pairs, ceiling=options.max_pairs, half_width=options.pairs_half_width)
    fixed = max(options.repeat, HARNESS_PAIRS)
    return PairsRule(floor=fixed, ceiling=fixed)


def harness_batch(batch: int, compile_options: str) -> int:
    """The batch PyTorch's harness times its eager samples at: the nominal one, or with dynamic
    shapes the draw that follows the reseed its previous timed() call made."""
    if batch <= 1 or compile_options != HARNESS_BATCH["compile_options"]:
        return batch
    factor = random.Random(HARNESS_BATCH["seed"]).uniform(HARNESS_BATCH["low"], HARNESS_BATCH["high"])
    return max(HARNESS_BATCH["minimum"], int(batch * factor))


def resized(value: Any, batch: int, size: int) -> Any:
    """`value` (tensors in tuples, lists and dicts) with each tensor's first dimension of extent
    `batch` cut to `size`, or padded to it with copies of its last row."""
    import torch

    if isinstance(value, torch.Tensor):
        dim = next((d for d, extent in enumerate(value.shape) if extent == batch), None)
        if dim is None or size == batch:
            return value
        if size < batch:
            return value.narrow(dim, 0, size)
        pad = list(value.shape)
        pad[dim] = size - batch
        return torch.cat([value, value.narrow(dim, batch - 1, 1).expand(*pad)], dim=dim)
    if isinstance(value, dict):
        return {key: resized(item, batch, size) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        items = [resized(item, batch, size) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    return value


def measure_pairs(driver: ExperimentDriver, model: BenchmarkModel, compiled: Callable[[], Any],
                  device: DeviceRuntime, options: RunOptions, iterations: int,
                  timings: dict[str, float]) -> dict[str, Any]:
    """measurements.paired: both series (seconds per iteration), the ratios and their summary.
    `timings` gets pairs_warmup_s (the baseline's build and warm-up) and pairs_s (the pairs)."""
    started = perf_counter()
    compiled_state = model.training_state
    if compiled_state is not None:
        compiled_state.rewind()  # back to the saved start before the baseline saves its own
    eager = driver.make_step(model, compiled=False)
    eager_state = model.training_state if compiled_state is not None else None
    model.training_state = compiled_state
    as_harness = options.speedup == "harness"
    for _ in range(eager_warmup_before_pairs(options)):
        device.reset_rng(options.seed)
        run_sample(eager, device, 1)
    if as_harness:
        iterations = 1
    size = harness_batch(model.batch_size, driver.config.compile_options) if as_harness else model.batch_size
    if size != model.batch_size:
        if compiled_state is not None:
            compiled_state.rewind()  # the shared module back at the start the new state saves
        resized_model = replace(model, args=resized(model.args, model.batch_size, size),
                                kwargs=resized(model.kwargs, model.batch_size, size), training_state=None)
        eager, eager_state = driver.make_step(resized_model, compiled=False), resized_model.training_state

    def timed(step: Callable[[], Any], state: Any, faults: list[int]) -> float:
        if state is not None:
            state.rewind()
            device.synchronize()
        device.reset_rng(options.seed)
        before = minor_faults()
        sample = run_sample(step, device, iterations, device_clock=options.pure_wall_time)
        faults.append(minor_faults() - before)
        return (sample.elapsed if sample.device_elapsed is None else sample.device_elapsed) / iterations

    timings["pairs_warmup_s"] = perf_counter() - started
    started = perf_counter()
    baseline: list[float] = []
    compiled_times: list[float] = []
    faults: dict[str, list[int]] = {"baseline": [], "compiled": []}
    rule = pairs_rule(options)
    load = HostLoadSample.start()
    while (stop_reason := rule.stop_reason(baseline, compiled_times)) is None:
        order = ((eager, eager_state, baseline, faults["baseline"]),
                 (compiled, compiled_state, compiled_times, faults["compiled"]))
        for step, state, series, counts in (order if len(baseline) % 2 == 0 or as_harness else order[::-1]):
            series.append(timed(step, state, counts))
    host_load = load.finish(options.noisy_host_share)
    summary = paired_speedup(baseline, compiled_times)
    block = {"method": ("baseline then compiled, one iteration each, in one process after both warmed up (as "
                        "PyTorch's harness)" if as_harness else
                        "baseline and compiled samples alternated in one process (ABBA), after both warmed up"),
             "baseline": "eager, same model, inputs, precision and batch size",
             "iterations_per_sample": iterations, "baseline_per_iter_time": baseline,
             "compiled_per_iter_time": compiled_times, **summary, "t_test_p_value": t_test(baseline, compiled_times),
             "speedup": summary["median_ratio"], "speedup_of": "the median of the per-pair ratios",
             "stop_reason": stop_reason, "stopping_rule": rule.describe(),
             "ci95_relative_half_width": relative_half_width(summary), "host_load": host_load,
             "baseline_first_warmup": {"iterations": first_warmup_iterations(options), "before": "the compile",
                                       "on": "a deep copy of the module, dropped before the compile"},
             "baseline_minor_faults": faults["baseline"], "compiled_minor_faults": faults["compiled"]}
    if as_harness:
        block.update({
            "speedup": statistics.median(baseline) / statistics.median(compiled_times),
            "speedup_of": "the ratio of the two series' medians, as PyTorch's harness computes it",
            "baseline": "eager, same model, inputs and precision, at the batch PyTorch's harness times eager at",
            "baseline_batch_size": size, "baseline_batch_rule": HARNESS_BATCH})
    timings["pairs_s"] = perf_counter() - started  # the summary's too: the t-test imports scipy
    return block


def minor_faults() -> int:
    """This process's minor page faults so far, all its threads (getrusage's ru_minflt)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def t_test(baseline: list[float], compiled: list[float]) -> float | None:
    """Student's t-test of the two series, the test PyTorch's harness reports beside its speedups
    (scipy.stats.ttest_ind); None without scipy or with fewer than two pairs."""
    try:
        from scipy.stats import ttest_ind
    except ImportError:
        return None
    if len(baseline) < 2 or len(set(baseline)) == len(set(compiled)) == 1:
        return None  # no spread on either side: the test is undefined (scipy would warn and say NaN)
    p = float(ttest_ind(baseline, compiled).pvalue)
    return None if math.isnan(p) else p
