"""A run's compiled experiments as the rows of PyTorch's dynamo harness, for export and check-expected.

The harness's statuses, columns, dtype and mode names come from data/dynamo_export.json
(MAPPING). `exported` pairs a run's compiled experiments with their eager baselines
(analysis.baselines) and their final records; export writes the rows and check-expected gates
them, both from here, so what one writes and the other checks cannot drift apart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from experiment_runner.analysis.baselines import DEFAULT_BASELINE, ModelResult, pair_with_baselines, parse_baseline
from experiment_runner.analysis.loader import Row, read_rows, run_records, runs_of, select_run
from experiment_runner.core import dashboards

DATA = Path(__file__).parent / "data"
MAPPING: dict[str, Any] = json.loads((DATA / "dynamo_export.json").read_text())
GB = 1e9
# The dynamo counter columns both CSVs carry (get_dynamo_stats's keys at the pinned commit), which
# the accuracy row has between its verdict and its compilation_latency.
HARNESS_STATS = MAPPING["accuracy_columns"][4:-1]
# The suites PyTorch's CI names in its TEST_CONFIGs and expected files, spelled as ours are.
CI_SUITES = ("torchbench", "huggingface", "timm")


def harness_dtype(precision: str | None) -> str:
    return MAPPING["dtype"].get(str(precision), str(precision))


def harness_mode(test: str | None) -> str:
    return MAPPING["mode"][str(test)]


def unchecked(row: Row, verified: bool) -> bool:
    """An ok record without an accuracy verdict: run without --verify (VERIFIER_SKIPPED with no
    verification block; `verified` tells the verifier's own VERIFIER_SKIPPED, a model too large to
    judge, from it), or a verification code this reader does not know. Never exported as a pass."""
    code = row.verification_code
    return row.status == "ok" and (code not in MAPPING["verification"] or (code == "VERIFIER_SKIPPED" and not verified))


def accuracy_status(result: ModelResult, verified: bool) -> str:
    """The harness's accuracy status for one compiled experiment (data/dynamo_export.json);
    `verified`: the verifier ran on it (its record has a verification block), which tells a
    VERIFIER_SKIPPED of the verifier's (a model too large to judge) from a run without --verify.
    A code this mapping does not know (a newer runner's, a hand-edited record) is no verdict, so
    no pass either."""
    row, base = result.row, result.baseline
    if base is not None and base.status != "ok":
        return MAPPING["baseline_failed"]
    if unchecked(row, verified):
        return MAPPING["unchecked"]
    if row.status == "ok":
        return MAPPING["verification"][str(row.verification_code)]
    return MAPPING["status"].get(row.status, MAPPING["status_default"])


@dataclass(frozen=True)
class Exported:
    """One compiled experiment as the harness's rows see it."""

    result: ModelResult
    record: dict[str, Any]  # its final record (environment, dynamo accounting)

    @property
    def row(self) -> Row:
        return self.result.row

    @property
    def harness_suite(self) -> str:
        return MAPPING["suite"].get(str(self.row.suite), str(self.row.suite))

    @property
    def output(self) -> str:
        """The harness's CSV name for this experiment's compiler (with its compile options, as the
        dashboard's inductor_dynamic_..., inductor_aot_inductor_... files), suite, dtype, mode, device;
        a performance mode's is named by the mode, as test_perf_for_dashboard names its files
        (inductor_with_cudagraphs_...), so it never shares a file with an accuracy job's run."""
        r = self.row
        job = dashboards.dashboards().get(str(self.dashboard))
        options = f"_{r.compile_options.replace('-', '_')}" if r.compile_options else ""
        compiler = job.name if job is not None and job.target == dashboards.PERFORMANCE else f"{r.dynamo}{options}"
        return f"{compiler}_{self.harness_suite}_{harness_dtype(r.precision)}_{harness_mode(r.test)}_{r.accelerator}"

    @property
    def experiment(self) -> dict[str, Any]:
        return self.record.get("experiment") or {}

    @property
    def dashboard(self) -> str | None:
        """The PyTorch dashboard configuration (CI job) this experiment is, if any: the record's own
        `experiment.dashboard`, which knows where a job's run was moved (a CUDA job's training on the
        CPU); a record older than that field is read through core/dashboards.json, where a training
        experiment is a job's only with the harness's step (`experiment.training_recipe`)."""
        if "dashboard" in self.experiment:
            return self.experiment["dashboard"]
        r = self.row
        return dashboards.name_of(str(r.accelerator), r.xla, r.dynamo, str(r.test), str(r.precision),
                                  r.compile_options or "default", self.experiment.get("training_recipe"))

    @property
    def ci_test_config(self) -> str | None:
        """PyTorch CI's TEST_CONFIG for this experiment's configuration and suite
        (cpu_inductor_amp_freezing_timm); None for a performance job's mode, whose files the CI names
        otherwise and no expected file gates."""
        job = dashboards.dashboards().get(str(self.dashboard))
        if job is None or job.target != dashboards.ACCURACY or self.row.suite not in CI_SUITES:
            return None
        return f"{self.dashboard}_{self.row.suite}"

    @property
    def expected_file(self) -> str | None:
        """PyTorch's expected file for this experiment, `<TEST_CONFIG>_<inference|training>.csv`: a job's
        inference and training runs are gated each against its own."""
        if self.ci_test_config is None:
            return None
        return f"{self.ci_test_config}_{dashboards.MODES[str(self.row.test)]}.csv"

    @property
    def ci_accuracy_file(self) -> str | None:
        """Where the CI job writes this experiment's accuracy row: `<TEST_CONFIG>/<inference|training>_<suite>.csv`
        (test.sh's --output for that run, the suite as the harness's module names it)."""
        if self.ci_test_config is None:
            return None
        return f"{self.ci_test_config}/{dashboards.MODES[str(self.row.test)]}_{self.harness_suite}.csv"

    @property
    def moved_to(self) -> str | None:
        """The device this experiment ran on where its CI job runs on another
        (`experiment.dashboard_overrides.accelerator`): its differences may be the device's."""
        return (self.experiment.get("dashboard_overrides") or {}).get("accelerator")

    @property
    def checked(self) -> bool:
        """Whether the experiment has an accuracy verdict (or failed before one could be given)."""
        return not unchecked(self.row, self.record.get("verification") is not None)

    @property
    def harness_counted(self) -> bool:
        """Whether the record's graph-break figure is the harness's own count: inference's is (with
        --verify, breaks.harness_count; AOT Inductor's export breaks nothing); a training step's
        only where its --verify run replayed the harness's step, else its figure is this runner's
        count of every frame compiled."""
        breaks = (self.record.get("measurements") or {}).get("graph_breaks") or {}
        return self.row.test != "train" or "harness_count" in breaks

    @property
    def measurements(self) -> dict[str, Any]:
        return self.record.get("measurements") or {}

    @property
    def harness_warmup(self) -> dict[str, Any]:
        """The eager and compiled warm-ups measured as the harness's run_performance_test measures
        them (measurements.harness_warmup: --speedup=paired or harness, a --dashboard run's)."""
        return self.measurements.get("harness_warmup") or {}

    def graph_stats(self) -> dict[str, int | str]:
        """The accuracy CSV's dynamo columns, counted as the harness's accuracy run counts them where
        the record has them (--verify on inference, and training with the harness's step:
        graph_breaks.harness_stats, the replay's or, where no frame broke, the timed compile's). A
        column a record of an older child lacks there (cudagraph_skips, which its replay did not
        reach) is the compiled warm-up's, the same compile, where recorded. A record without
        harness_stats gives graph_breaks and unique_graphs of everything the child compiled and
        leaves the rest empty, never a stand-in."""
        breaks = self.measurements.get("graph_breaks") or {}
        counted = breaks.get("harness_stats") or {}
        warmup = (self.harness_warmup.get("compiled") or {}).get("dynamo_stats") or {}
        if counted:
            return {column: counted.get(column, warmup.get(column, "")) for column in HARNESS_STATS}
        return self._child_stats()

    def _child_stats(self) -> dict[str, int | str]:
        """The columns the graph-break summary of everything the child compiled gives."""
        breaks = self.measurements.get("graph_breaks") or {}
        total, unique = int(breaks.get("total") or 0), int(breaks.get("unique_graphs") or 0)
        reasons = len(breaks.get("reasons") or [])
        return {"calls_captured": "", "unique_graphs": unique, "fallbacks_to_eager": "",
                "graph_breaks": int(breaks.get("harness_count", total)), "unique_graph_breaks": reasons,
                "autograd_captures": "", "autograd_compiles": "", "cudagraph_skips": ""}

    def performance_stats(self) -> dict[str, int | str]:
        """The performance CSV's dynamo columns: the counters' change over the compiled warm-up, compile
        included, as the harness's warmup() takes them (get_dynamo_stats before and after); a record
        without that warm-up gives what its graph_breaks summary holds (calls_captured over everything
        the child compiled, where recorded), the rest left empty."""
        compiled = self.harness_warmup.get("compiled") or {}
        if compiled.get("dynamo_stats"):
            return {column: compiled["dynamo_stats"].get(column, "") for column in HARNESS_STATS}
        breaks = self.measurements.get("graph_breaks") or {}
        return {**self._child_stats(), "calls_captured": breaks.get("calls_captured", "")}

    def peak_memory(self) -> tuple[float | None, float | None]:
        """(eager, dynamo) peak memory in the harness's unit: its warm-ups' figures (device memory on
        CUDA, 100 x the resident set in GB on the CPU: data/dynamo_export.json, peak_memory), else,
        for a record without them, the peaks of the timed samples of this experiment and its baseline."""
        eager, compiled = (self.harness_warmup.get(side) or {} for side in ("eager", "compiled"))
        if eager.get("peak_memory_bytes") and compiled.get("peak_memory_bytes"):
            scale = MAPPING["peak_memory"]["scale"].get(str(self.row.accelerator), 1) / GB
            return eager["peak_memory_bytes"] * scale, compiled["peak_memory_bytes"] * scale
        base = self.result.baseline
        eager_bytes, dynamo_bytes = (_peak(base) if base is not None else None), _peak(self.row)
        return (eager_bytes / GB if eager_bytes else None), (dynamo_bytes / GB if dynamo_bytes else None)

    def compilation_latency(self) -> float | None:
        """The harness's compilation_latency: its compiled warm-up's time less its eager warm-up's (the
        same count of iterations each); a record without them gives its first-iteration estimate."""
        eager, compiled = (self.harness_warmup.get(side) or {} for side in ("eager", "compiled"))
        if eager.get("latency_s") is not None and eager.get("iterations") == compiled.get("iterations"):
            return compiled["latency_s"] - eager["latency_s"]
        return self.row.compile_time_s

    @property
    def not_the_harness_step(self) -> str | None:
        """What the experiment timed where it is not the step the harness times (the record's
        environment.timed_step: an LLM entry's forward pass, where the harness times generate());
        such a speedup is no figure of the harness's CSV."""
        return (self.record.get("environment") or {}).get("timed_step")

    def performance(self) -> dict[str, Any] | None:
        """The performance CSV's row; None where there is no speedup to report, or none that is the
        harness's figure."""
        res, r = self.result, self.row
        if res.speedup is None or not r.median_per_iter_time_s or self.not_the_harness_step:
            return None
        eager_mem, dynamo_mem = self.peak_memory()
        latency = self.compilation_latency()
        return {"dev": r.accelerator, "name": r.model, "batch_size": r.batch_size,
                "speedup": round(res.speedup, 6), "abs_latency": round(r.median_per_iter_time_s * 1e3, 6),
                "compilation_latency": round(latency, 6) if latency is not None else 0.0,
                "compression_ratio": round(eager_mem / dynamo_mem, 6) if eager_mem and dynamo_mem else 0.0,
                "eager_peak_mem": round(eager_mem, 6) if eager_mem else 0.0,
                "dynamo_peak_mem": round(dynamo_mem, 6) if dynamo_mem else 0.0,
                **self.performance_stats()}

    def compilation_metrics(self) -> dict[str, Any] | None:
        """The harness's compilation-metrics row, beside a performance row: dynamo's own phase times
        from measurements.dynamo_compile under the dynamo_timed names the harness's columns carry
        (data/dynamo_export.json, compilation_metrics); None without a performance row or that record."""
        compiled = self.measurements.get("dynamo_compile")
        if not compiled or self.performance() is None:
            return None
        r, spec = self.row, MAPPING["compilation_metrics"]
        times = {column: f"{compiled[field]:.6f}" if isinstance(compiled.get(field), (int, float)) else ""
                 for column, field in spec["columns"].items()}
        return {"dev": r.accelerator, "name": r.model, "batch_size": r.batch_size, **times}

    def accuracy(self) -> dict[str, Any]:
        r = self.row
        total = (self.measurements.get("dynamo_compile") or {}).get("total_wall_time_s")
        return {"dev": r.accelerator, "name": r.model, "batch_size": r.batch_size,
                "accuracy": accuracy_status(self.result, self.record.get("verification") is not None),
                **self.graph_stats(), "compilation_latency": round(total, 6) if total is not None else ""}


def _peak(row: Row | None) -> float | None:
    if row is None:
        return None
    value = row.peak_allocated_bytes or row.timed_peak_rss_bytes or row.peak_rss_bytes
    return float(value) if value else None


def exported(paths: Sequence[Path], run_id: str | None) -> list[Exported]:
    """The run's compiled experiments (not the eager baselines), in model order."""
    rows = read_rows(paths)
    run = select_run(runs_of(rows), run_id)
    fixed = parse_baseline(DEFAULT_BASELINE)
    records = run_records(paths, run.run_id)
    results = [res for res in pair_with_baselines([r for r in rows if r.run_id == run.run_id], fixed)
               if res.row.dynamo is not None and res.baseline is not res.row]
    results.sort(key=lambda res: (str(res.row.suite), str(res.row.model), res.row.experiment_id))
    return [Exported(res, records.get(res.row.experiment_id, {})) for res in results]
