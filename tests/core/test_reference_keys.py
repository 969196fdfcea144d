"""Drop-in compatibility: every key PyTorch/XLA's benchmarks/experiment_runner.py writes
into a record is in ours too, with the same shape, so existing jq and pandas scripts keep
working. Ours may add keys.

The key sets are facts read from the reference runner's record writer, experiment and
model descriptions and metric collection (pytorch/xla benchmarks/, 2024-2025; the
`experiment` block carried `keep_model_data_on_cuda` until September 2025 and has carried
`enable_functionalization` since October 2024, so both are pinned).
"""

from __future__ import annotations

from numbers import Real

import pytest

REFERENCE_RECORD_KEYS = frozenset({
    "model", "experiment", "repeat", "iterations_per_run", "metrics", "timestamp", "verification_code"})
REFERENCE_MODEL_KEYS = frozenset({"suite_name", "model_name"})
REFERENCE_EXPERIMENT_KEYS = frozenset({
    "accelerator", "accelerator_model", "xla", "xla_flags", "dynamo", "torch_xla2", "test", "batch_size",
    "keep_model_data_on_cuda", "enable_functionalization"})
REFERENCE_METRIC_KEYS = frozenset({"total_time", "per_iter_time"})
REFERENCE_XLA_METRIC_KEYS = REFERENCE_METRIC_KEYS | {
    "trace_total_time", "trace_per_iter_time", "xla_CompileTime_time_s", "xla_CompileTime_number",
    "xla_ExecuteTime_time_s", "xla_ExecuteTime_number"}

REPEAT = 2


def assert_reference_shape(record: dict) -> None:
    assert REFERENCE_RECORD_KEYS <= record.keys()
    assert REFERENCE_MODEL_KEYS <= record["model"].keys()
    assert REFERENCE_EXPERIMENT_KEYS <= record["experiment"].keys()
    metric_keys = REFERENCE_XLA_METRIC_KEYS if record["experiment"]["xla"] else REFERENCE_METRIC_KEYS
    missing = metric_keys - record["metrics"].keys()
    assert not missing, f"{record['experiment_id']}: metrics lack {sorted(missing)}"
    assert record["status"] == "ok", record["error"]
    assert (record["repeat"], record["iterations_per_run"]) == (REPEAT, 1)
    assert isinstance(record["timestamp"], Real)
    assert isinstance(record["experiment"]["batch_size"], int)
    # The reference appends one value per repeat to every metric.
    for key in metric_keys:
        values = record["metrics"][key]
        assert len(values) == REPEAT and all(isinstance(v, Real) for v in values), key


@pytest.mark.e2e
def test_eager_records_carry_every_reference_key(run_cli) -> None:
    run = run_cli("--suite-name=dummy", "--accelerator=cpu", "--xla=None", "--dynamo=None", "--test=eval",
                  f"--repeat={REPEAT}", "--iterations-per-run=1")
    assert run.returncode == 0, run.stderr
    (record,) = run.records()
    assert_reference_shape(record)
    assert record["experiment"]["xla"] is None and record["experiment"]["dynamo"] is None


@pytest.mark.xla
def test_records_of_a_matrix_with_xla_carry_every_reference_key(run_cli) -> None:
    run = run_cli("--suite-name=dummy", "--accelerator=cpu", "--dynamo=None", "--dynamo=openxla",
                  "--test=eval", f"--repeat={REPEAT}", "--iterations-per-run=1", env={"PJRT_DEVICE": "CPU"},
                  timeout=900)
    assert run.returncode == 0, run.stderr
    records = run.records()
    assert [(r["experiment"]["xla"], r["experiment"]["dynamo"]) for r in records] == [
        (None, None), ("PJRT", None), ("PJRT", "openxla")]
    for record in records:
        assert_reference_shape(record)
