"""--speedup=paired: the compiled experiment's eager baseline, timed in the same process and
alternated with it, as PyTorch's dynamo harness measures a speedup.

Separate processes see different hosts: a frequency change, a neighbour ramping up, another
memory layout. Timing the baseline and the compiled step in one process, pair by pair, gives
both the same host at almost the same moment, so a slow drift cancels in each pair's ratio.
Both steps warm up first (the compiled one already did, in its own timed runs); then each
pair times one sample of each with the same iterations per sample, in ABBA order (baseline
first in even pairs, compiled first in odd ones) so that neither always runs on the other's
heels. Training steps are rewound to the same state before every sample. XLA experiments keep
the isolated method: a lazy-tensor baseline and compiled graph share one device runtime and its
compilation caches, so their samples would not be independent pairs.
"""

from __future__ import annotations

from typing import Any, Callable

from experiment_runner.child.devices import DeviceRuntime
from experiment_runner.child.harness import ExperimentHarness, run_sample
from experiment_runner.core.options import RunOptions
from experiment_runner.core.stats import paired_speedup
from model_suites import BenchmarkModel


def applies(harness: ExperimentHarness) -> bool:
    config = harness.config
    return harness.options.speedup == "paired" and config.dynamo is not None and config.xla is None


def measure_pairs(harness: ExperimentHarness, model: BenchmarkModel, compiled: Callable[[], Any],
                  device: DeviceRuntime, options: RunOptions, iterations: int) -> dict[str, Any]:
    """measurements.paired: both series (seconds per iteration), the ratios and their summary."""
    compiled_state = model.training_state
    if compiled_state is not None:
        compiled_state.rewind()  # back to the saved start before the baseline saves its own
    eager = harness.make_step(model, compiled=False)
    eager_state = model.training_state if compiled_state is not None else None
    model.training_state = compiled_state
    for _ in range(options.warmup_iterations):
        device.reset_rng(options.seed)
        run_sample(eager, device, 1)

    def timed(step: Callable[[], Any], state: Any) -> float:
        if state is not None:
            state.rewind()
            device.synchronize()
        device.reset_rng(options.seed)
        sample = run_sample(step, device, iterations, device_clock=options.pure_wall_time)
        return (sample.elapsed if sample.device_elapsed is None else sample.device_elapsed) / iterations

    baseline: list[float] = []
    compiled_times: list[float] = []
    for index in range(options.repeat):
        order = ((eager, eager_state, baseline), (compiled, compiled_state, compiled_times))
        for step, state, series in (order if index % 2 == 0 else order[::-1]):
            series.append(timed(step, state))
    return {"method": "baseline and compiled samples alternated in one process (ABBA), after both warmed up",
            "baseline": "eager, same model, inputs, precision and batch size",
            "iterations_per_sample": iterations, "baseline_per_iter_time": baseline,
            "compiled_per_iter_time": compiled_times, **paired_speedup(baseline, compiled_times)}
