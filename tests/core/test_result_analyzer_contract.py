"""Our records through what PyTorch/XLA's own analysis scripts read.

`reference_analyze` below is a minimal re-implementation of what
pytorch/xla benchmarks/result_analyzer.py (ResultAnalyzer.extract_metrics_jsonl,
extract_metrics_csv, get_calculated_metrics) and benchmarks/aggregate.py (process_file,
DatapointSelector) read from a record, written from their source for this test:

- top level: `timestamp` (int()), `repeat`, `iterations_per_run`, `metrics`;
- `model.suite_name`, `model.model_name`;
- `experiment.accelerator`, `accelerator_model`, `xla`, `xla_flags`, `dynamo`,
  `torch_xla2`, `test`, `batch_size` (indexed, so they must exist), `outputs_file` (optional);
- `metrics`: a record is a failure exactly when "error" is one of its keys; otherwise every
  value goes through np.asarray(value, dtype="float") for min/median/max, and mean/std
  of value[1:]; `max_total_time` and `median_total_time` must then exist (compile time is
  their difference), so a non-empty success needs `total_time`;
- aggregate.py groups records into runs by `timestamp` and reads metrics.total_time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from experiment_runner.core.matrix import Experiment, ExperimentConfig
from experiment_runner.core.options import RunOptions
from experiment_runner.core.protocol import ChildResult, PublishedResult
from experiment_runner.core.record import REFERENCE_METRICS, ChildOutcome, RecordContext, build_record

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def reference_analyze(record: dict[str, Any]) -> dict[str, Any]:
    """One record as result_analyzer.py's jsonl row; raises where the real script would."""
    exp, model, metrics = record["experiment"], record["model"], record["metrics"]
    row: dict[str, Any] = {
        "timestamp": int(record["timestamp"]), "repeat": record["repeat"],
        "iterations_per_run": record["iterations_per_run"],
        "batch_size": -1 if exp["batch_size"] is None else exp["batch_size"],
        "dimensions": [model["suite_name"], model["model_name"], exp["accelerator"], exp["accelerator_model"],
                       exp["xla"], exp["xla_flags"], exp["dynamo"], exp["torch_xla2"], exp["test"],
                       exp.get("outputs_file")],
    }
    if "error" in metrics:
        row.update(run_status="failure", error_message=metrics["error"])
        return row
    row["run_status"] = "success"
    if metrics:
        for metric, raw in metrics.items():
            values = np.asarray(raw, dtype="float")
            for fn in (np.min, np.median, np.max):
                row[f"{fn.__name__}_{metric}"] = fn(values)
            if len(values[1:]):
                for fn in (np.mean, np.std):
                    row[f"{fn.__name__}_{metric}"] = fn(values[1:])
        row["compile_time"] = row["max_total_time"] - row["median_total_time"]
    return row


@pytest.mark.e2e
def test_records_of_a_real_run_read_as_the_reference_tools_read_them(run_cli) -> None:
    run = run_cli("--suite-name=faulty", "--filter=^quick_00$", "--filter=^raise_run$", "--accelerator=cpu",
                  "--dynamo=None", "--test=eval", "--repeat=3", "--warmup-iterations=1", "--profile-cuda-cpu",
                  "--timestamp=1700000000.5")
    assert run.returncode == 0, run.stderr
    rows = {r["model"]["model_name"]: (r, reference_analyze(r)) for r in run.records()}
    record, row = rows["quick_00"]
    assert row["run_status"] == "success" and record["status"] == "ok"
    assert set(record["metrics"]) <= set(REFERENCE_METRICS)
    assert len(record["metrics"]["total_time"]) == 3 and len(record["metrics"]["total_cpu_time_s"]) == 3
    assert row["median_per_iter_time"] == pytest.approx(np.median(record["metrics"]["per_iter_time"]))
    # Our own figures are kept beside, where the reference's tools do not look.
    assert {"warmup_time", "lifetime_peak_rss_bytes", "timed_peak_rss_bytes"} <= record["measurements"].keys()
    record, row = rows["raise_run"]
    assert record["status"] == "error" and row["run_status"] == "failure"
    assert "injected failure in the middle of a run" in row["error_message"]
    # aggregate.py: one run is one timestamp.
    assert {r["timestamp"] for r, _ in rows.values()} == {1700000000.5}


def record_of(status_case: str) -> dict[str, Any]:
    ctx = RecordContext(run_id="r", fingerprint="0123456789ab", options=RunOptions(repeat=2), output_dir=Path("."),
                        timestamp=1.0)
    exp = Experiment("torchbench", "m", ExperimentConfig("cpu", None, None, None, "train", "fp32"))
    if status_case == "skipped":
        return build_record(ctx, exp, skip_reason="the model cannot train")
    return build_record(ctx, exp, ChildOutcome(result=None, returncode=None, timed_out=True, log_tail="..."),
                        timeout_s=5)


@pytest.mark.parametrize("case", ["skipped", "timeout"])
def test_skips_and_deaths_are_failures_to_the_reference_tools(case: str) -> None:
    record = record_of(case)
    row = reference_analyze(record)
    assert row["run_status"] == "failure"
    assert row["error_message"] == ("SKIP" if case == "skipped" else
                                    "Timeout: no result within --subprocess-timeout=5s; "
                                    "the child's process group was killed\n...")


def test_figures_of_ours_never_land_in_metrics() -> None:
    ctx = RecordContext(run_id="r", fingerprint="0123456789ab", options=RunOptions(repeat=2), output_dir=Path("."),
                        timestamp=1.0)
    exp = Experiment("torchbench", "m", ExperimentConfig("cpu", None, None, "inductor", "eval", "fp32"))
    figures = {"total_time": [0.2, 0.1], "per_iter_time": [0.2, 0.1], "warmup_time": [3.0],
               "peak_rss_bytes": 10, "compile_time_s": 2.9, "dynamo_counters": {"stats": {}},
               "inductor_ops": [{"aten::mm": {"num_of_calls": 1}}] * 2}
    record = build_record(ctx, exp, ChildOutcome(result=PublishedResult(ChildResult("ok", None, "fp32", metrics=figures)), returncode=0))
    assert record["metrics"] == {"total_time": [0.2, 0.1], "per_iter_time": [0.2, 0.1],
                                 "inductor_ops": [{"aten::mm": {"num_of_calls": 1}}] * 2}
    assert record["measurements"] == {"warmup_time": [3.0], "peak_rss_bytes": 10, "compile_time_s": 2.9,
                                      "dynamo_counters": {"stats": {}}}
