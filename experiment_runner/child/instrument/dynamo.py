"""Compile time and dynamo's own accounting: compilation metrics, counters, graph breaks."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Mapping

if TYPE_CHECKING:
    import torch

    from benchmark_models import BenchmarkModel

# Fields of dynamo's CompilationMetrics summed over every compiled frame, when this torch has them.
_DYNAMO_TIME_FIELDS = (
    "entire_frame_compile_time_s", "backend_compile_time_s", "inductor_compile_time_s", "code_gen_time_s",
)
_DYNAMO_COUNT_FIELDS = (
    "inductor_fx_local_cache_hit_count", "inductor_fx_local_cache_miss_count",
    "inductor_fx_remote_cache_hit_count", "inductor_fx_remote_cache_miss_count",
    "aotautograd_local_cache_hit_count", "aotautograd_local_cache_miss_count",
    "num_graph_breaks",
)
GRAPH_BREAK_REASON_CHARS = 300
# The dynamo counters PyTorch's harness writes in its CSVs, in its column order, each as the
# (group, key) of torch._dynamo.utils.counters it reads; fallbacks_to_eager, graph_breaks and
# unique_graph_breaks are derived (see harness_dynamo_stats).
HARNESS_DYNAMO_STATS: dict[str, Any] = {
    "source": "pytorch/pytorch benchmarks/dynamo/common.py @ 00391a7e1220ab2272e156b0ceb036f74f0b5f94, get_dynamo_stats",
    "columns": ["calls_captured", "unique_graphs", "fallbacks_to_eager", "graph_breaks", "unique_graph_breaks",
                "autograd_captures", "autograd_compiles", "cudagraph_skips"],
    "counters": {"calls_captured": ["stats", "calls_captured"], "unique_graphs": ["stats", "unique_graphs"],
                 "autograd_captures": ["compiled_autograd", "captures"],
                 "autograd_compiles": ["compiled_autograd", "compiles"],
                 "cudagraph_skips": ["inductor", "cudagraph_skips"]},
}


def compile_time_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Compile-time figures from the timing loop's metrics (see COMPILE_TIME_DOC)."""
    per_iter = metrics.get("per_iter_time") or []
    if not per_iter:
        return {}
    steady = statistics.median(per_iter)
    out = {"steady_iter_time_s": steady}
    warmup = metrics.get("warmup_time") or []
    if warmup:
        out["first_iter_time_s"] = warmup[0]
        out["compile_time_s"] = max(0.0, warmup[0] - steady)
    return out


def dynamo_compile_summary() -> dict[str, Any] | None:
    """Dynamo's own compile-time accounting, summed over the frames compiled in this process.

    Reads torch._dynamo.utils.get_compilation_metrics() (a bounded log of recent frames),
    so a model with more compiled frames than that log holds is under-counted; `frames`
    says how many were summed. None when nothing was compiled.
    """
    from torch._dynamo import utils as dynamo_utils

    entries = list(dynamo_utils.get_compilation_metrics())
    if not entries:
        return None
    summary: dict[str, Any] = {"frames": len(entries)}
    for name in _DYNAMO_TIME_FIELDS + _DYNAMO_COUNT_FIELDS:
        values = [getattr(e, name, None) for e in entries]
        present = [v for v in values if isinstance(v, (int, float))]
        if present:
            summary[name] = sum(present)
    failures = sorted({str(e.fail_type) for e in entries if getattr(e, "fail_type", None)})
    if failures:
        summary["fail_types"] = failures
    # Dynamo's own running total of compile wall time (its frames' and backward graphs' compiles),
    # the figure PyTorch's harness writes as its accuracy row's compilation_latency.
    summary["total_wall_time_s"] = dynamo_utils.calculate_time_spent()["total_wall_time"]
    return summary


def dynamo_counters() -> dict[str, dict[str, int | float | str]]:
    """torch._dynamo.utils.counters as plain JSON: string keys, numbers kept, anything else as text."""
    from torch._dynamo.utils import counters

    return {
        str(group): {str(k): v if isinstance(v, (int, float)) else str(v) for k, v in values.items()}
        for group, values in counters.items()
    }


def harness_dynamo_stats(counters: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, int]:
    """The counters as the harness's get_dynamo_stats reads them: dynamo's own, cumulative, unless
    `counters` is given (counters_delta's change over a replay: what the harness's accuracy run
    reads from the counters it cleared). The harness writes the change over its compiled warm-up
    (performance, stats_delta) or its accuracy check. fallbacks_to_eager is frames seen minus
    frames converted; graph_breaks sums the break reasons' counts; unique_graph_breaks counts the
    reasons with a nonzero count."""
    if counters is None:
        from torch._dynamo.utils import counters as dynamo_counters_now

        counters = dynamo_counters_now

    def read(group: str, key: str) -> int:
        return int(counters.get(group, {}).get(key, 0))

    breaks = counters.get("graph_break", {})
    stats = {column: read(group, key) for column, (group, key) in HARNESS_DYNAMO_STATS["counters"].items()}
    stats["fallbacks_to_eager"] = read("frames", "total") - read("frames", "ok")
    stats["graph_breaks"] = int(sum(breaks.values()))
    stats["unique_graph_breaks"] = sum(1 for count in breaks.values() if count > 0)
    return {column: stats[column] for column in HARNESS_DYNAMO_STATS["columns"]}


def stats_delta(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """What each harness column gained between two harness_dynamo_stats snapshots (the harness's
    Counter.subtract: unique_graph_breaks too is a difference of counts, not of sets)."""
    return {column: after[column] - before.get(column, 0) for column in after}


def counters_delta(before: Mapping[str, Mapping[str, Any]],
                   after: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """What changed between two counter snapshots (numeric entries only, zero changes left out)."""
    delta: dict[str, dict[str, float]] = {}
    for group, values in after.items():
        for key, value in values.items():
            old = before.get(group, {}).get(key, 0)
            if isinstance(value, (int, float)) and isinstance(old, (int, float)) and value != old:
                delta.setdefault(group, {})[key] = value - old
    return delta


def summarize_graph_breaks(counters: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Graph breaks grouped by the first line of dynamo's reason, most frequent first.

    Dynamo's reasons are multi-line (reason, explanation, hints, links); the first line
    names the cause and the explanation line says what was hit, which is what a reader
    scanning many records needs.
    """
    groups: dict[str, dict[str, Any]] = {}
    for text, count in counters.get("graph_break", {}).items():
        lines = [line.strip() for line in str(text).splitlines() if line.strip()]
        head = (lines[0] if lines else str(text))[:GRAPH_BREAK_REASON_CHARS]
        entry = groups.setdefault(head, {"reason": head, "count": 0})
        entry["count"] += int(count)
        explanation = next((line for line in lines if line.startswith("Explanation:")), None)
        if explanation and "explanation" not in entry:
            entry["explanation"] = explanation.removeprefix("Explanation:").strip()[:GRAPH_BREAK_REASON_CHARS]
    reasons = sorted(groups.values(), key=lambda e: (-e["count"], e["reason"]))
    stats = counters.get("stats", {})
    return {
        "total": sum(e["count"] for e in reasons),
        "unique_graphs": stats.get("unique_graphs", 0),
        "calls_captured": stats.get("calls_captured", 0),
        "reasons": reasons,
    }


def harness_accuracy_stats(model: "BenchmarkModel", autocast: Callable[[], ContextManager[Any]],
                           iterations: int) -> dict[str, int]:
    """The dynamo columns of PyTorch's accuracy CSV for this model (graph_breaks, calls_captured...).

    The harness reads its counters, cleared first, after dynamo compiled its accuracy run from a
    reset dynamo: `optimize_ctx(model_iter_fn)`, the suite's `forward_pass` (the model under the
    precision's autocast), called `iterations` times by `run_n_iterations` under no_grad. A break
    is counted once per frame dynamo compiles through it, so the frames matter: the count of a
    model that breaks inside its forward depends on how deep that forward is called. This replays
    exactly those frames; the later calls hit the first one's code, so calls_captured is one
    forward's.
    """
    import torch

    def forward_pass(mod: Any, inputs: tuple, collect_outputs: bool = True) -> Any:
        args, kwargs = inputs
        with autocast():
            if model.forward is not None:
                return model.run_forward(mod, args, kwargs)
            return mod(*args, **kwargs)

    def replay() -> None:
        compiled = torch.compile(forward_pass, backend="eager")
        with torch.no_grad():
            for index in range(iterations):
                compiled(model.module, (model.args, model.kwargs), collect_outputs=index == iterations - 1)

    return _replayed_stats(replay)


def harness_training_stats(model: "BenchmarkModel", optimizer: "torch.optim.Optimizer | None",
                           autocast: Callable[[], ContextManager[Any]], iterations: int) -> dict[str, int]:
    """The harness's accuracy-CSV dynamo columns for a training run: its check_accuracy compiles the suite's
    `forward_and_backward_pass` itself (`optimize_ctx(model_iter_fn)`) and calls it `iterations`
    times from a reset dynamo, the last collecting results. So every call enters a frame of the
    step, and the step's own calls break it whatever the model does: `clone_inputs` and
    `collect_results` (functions dynamo skips), the `optimizer_zero_grad` the harness disables,
    `Tensor.backward`, `reduce_to_scalar_loss` (skipped too) where the suite's loss calls it, and
    the optimizer's step (SGD's disabled, Adam's traced, with breaks of its own). A break inside a
    nested call also breaks every frame it resumes in, so the step is replayed call for call,
    loss included (`compute_loss` calls `reduce_to_scalar_loss` directly, scaled by the recipe,
    unless the recipe's loss is the model's own; timm's step takes the first output first), with
    the given optimizer (the one the harness takes on the CI job's device; with none it zeroes the
    module's gradients instead). The inputs are cloned in one call, as the harness clones its
    single inputs object (keyword inputs where the model takes them, else positional);
    `collect_results` is passed no prediction, as two of the three suites pass it: its arguments
    do not change where the step breaks.
    """
    import torch
    from torch._dynamo.testing import collect_results, reduce_to_scalar_loss
    from torch._dynamo.utils import clone_inputs

    inputs: Any = model.kwargs if model.kwargs and not model.args else list(model.args)
    extra_kwargs = model.kwargs if model.args else {}
    # The harness's compute_loss is the model's own loss only where the recipe's is (huggingface's
    # pred[0]); otherwise it calls reduce_to_scalar_loss itself: a suite's loss helper calling it a
    # few calls deeper would break more frames on that skipped function than the harness's one.
    own_loss = model.loss is not None and model.recipe.loss == "model_own"

    def compute_loss(pred: Any) -> Any:
        if own_loss:
            return model.loss(pred)
        loss = reduce_to_scalar_loss(pred)
        return loss if model.recipe.loss_scale == 1.0 else loss * model.recipe.loss_scale

    @torch._disable_dynamo(recursive=True)
    def optimizer_zero_grad(mod: Any) -> None:
        if optimizer is not None:
            optimizer.zero_grad(True)
        else:
            mod.zero_grad(True)

    def forward_and_backward_pass(mod: Any, inputs: Any, collect_outputs: bool = True) -> Any:
        cloned_inputs = clone_inputs(inputs)
        optimizer_zero_grad(mod)
        args, kwargs = ((), cloned_inputs) if isinstance(cloned_inputs, dict) else (cloned_inputs, extra_kwargs)
        with autocast():
            if model.forward is not None:
                pred = model.run_forward(mod, tuple(args), kwargs)
            else:
                pred = mod(*args, **kwargs)
            if not own_loss and model.recipe.loss == "mean_of_first_output" and isinstance(pred, tuple):
                pred = pred[0]
            loss = compute_loss(pred)
        loss.backward()
        if optimizer is not None:
            optimizer.step()
        if collect_outputs:
            return collect_results(mod, None, loss, cloned_inputs)
        return None

    def replay() -> None:
        model.module.train(mode=model.recipe.checked_in_train_mode)  # the mode its accuracy check runs in
        step = torch.compile(forward_and_backward_pass, backend="eager")
        for index in range(iterations):
            step(model.module, inputs, collect_outputs=index == iterations - 1)

    return _replayed_stats(replay)


def _replayed_stats(replay: Callable[[], None]) -> dict[str, int]:
    """The harness's dynamo columns over `replay`, run from a reset dynamo: what its accuracy run
    reads from the counters it cleared, taken here as their change so the experiment's own counts
    stay. Tracing decides graphs, calls and breaks, not the backend, so replays compile with the
    eager backend (no second inductor compile); for the same reason the replay cannot see
    inductor's cudagraph_skips, which it leaves out. Dynamo is reset before and after: the
    experiment's compiled code must not hide frames from it, and nothing compiled here may serve
    a later step."""
    import torch

    torch._dynamo.reset()
    before = dynamo_counters()
    try:
        replay()
        stats = harness_dynamo_stats(counters_delta(before, dynamo_counters()))
    finally:
        torch._dynamo.reset()
    del stats["cudagraph_skips"]
    return stats
