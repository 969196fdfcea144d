"""The record schema: what build_record writes follows it, for every status; the golden files
follow it; it rejects what no record holds; docs/record.md is generated from it."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any, Iterator

import pytest
from jsonschema import Draft202012Validator

from experiment_runner.core.matrix import Experiment, ExperimentConfig
from experiment_runner.core.options import RunOptions
from experiment_runner.core.protocol import PHASES, PublishedResult
from experiment_runner.core.record import REFERENCE_METRICS, ChildOutcome, RecordContext, build_record
from experiment_runner.core.record_schema import (
    REGENERATE_DOCS,
    SCHEMA_VERSION,
    RecordSchemaError,
    field_schema,
    record_errors,
    record_reference_markdown,
    record_schema,
    validate_record,
)
from experiment_runner.core.results import STATUSES, VERIFICATION_CODES

ROOT = Path(__file__).parents[2]
GOLDEN = ROOT / "tests" / "golden"

# A child's result shaped as child/main.py run_task publishes it (figures as the timing loop,
# the instrumentation and the CPU runtime name them).
CHILD_RESULT: dict[str, Any] = {
    "status": "ok", "error": None, "source": "builtin", "batch_size": 4, "precision": "fp32",
    "accelerator_model": "Test CPU", "loss": "mean_per_output", "optimizer": "Adam(lr=0.01)",
    "metrics": {
        "total_time": [0.021, 0.022], "per_iter_time": [0.003, float("nan")], "warmup_time": [1.5, 0.004],
        "timing_clock": "host", "noisy_host": False, "calibration": [{"iterations": 7, "elapsed_s": 0.021}],
        "host_load": {"load_average_before": 0.5, "load_average_after": 0.6, "host_cpus": 2, "wall_s": 0.05,
                      "own_cpu_s": 0.05, "others_cpu_s": 0.0, "others_cpu_share": 0.0, "noisy_host": False,
                      "noisy_host_share": 0.1},
        "timed_peak_rss_bytes": 800_000_000, "lifetime_peak_rss_bytes": 900_000_000,
        "steady_iter_time_s": 0.003, "first_iter_time_s": 1.5, "compile_time_s": 1.497,
        "loss_first_timed_step": 2.3, "loss_last_timed_step": 2.3,
        "inductor_ops": [{"aten::mm": {"self_cpu_time_s": 0.001, "total_cpu_time_s": 0.002, "self_cuda_time_s": None,
                                       "total_cuda_time_s": None, "num_of_calls": 3}}],
        "per_op_profile": {"aten::mm": {"self_cpu_time_s": 0.001, "total_cpu_time_s": 0.002,
                                        "self_cuda_time_s": None, "total_cuda_time_s": None, "num_of_calls": 3}},
        "instrumentation_errors": {"profile": "RuntimeError: no profiler"},
    },
    "iterations_per_run": 7, "iterations_per_run_calibrated": True,
    "verification_code": "PASS",
    "verification": {"code": "PASS", "method": "rmse", "tolerance": 1e-4, "details": {"reference": "float64"}},
    "artifacts": {"output_repeat_0": "repeat_0/output.pt"},
    "environment": {"hostname": "h", "python": "3.11.7", "platform": "Linux", "torch": "2.13.0", "torch_xla": None,
                    "transformers": None, "timm": None, "torchbenchmark": None, "device driver": None,
                    "cpu": {"threads": 2, "threads_source": "physical cores in the affinity mask"}},
    "timings": {"import_s": 1.2, "load_s": 0.4, "measure_s": 2.0, "instrument_s": 0.1, "verify_s": 0.5,
                "work_s": 3.0, "child_s": 4.3},
}
FAILED_RESULT = {**CHILD_RESULT, "status": "error", "metrics": {}, "verification_code": "VERIFIER_DIDNT_RUN",
                 "verification": None,
                 "error": {"type": "ZeroDivisionError", "message": "boom", "traceback_tail": "Traceback ..."}}
OOM_RESULT = {**FAILED_RESULT, "status": "oom",
              "error": {"type": "OutOfMemoryError", "message": "CUDA out of memory", "traceback_tail": "..."}}
SKIPPED_RESULT = {**FAILED_RESULT, "status": "skipped", "verification_code": "VERIFIER_SKIPPED",
                  "error": {"type": "ModelSkipped", "message": "no train mode"}}
INTERIM_RESULT = {**CHILD_RESULT, "final": False, "verification_code": "VERIFIER_DIDNT_RUN", "verification": None}


def published(result: dict) -> PublishedResult:
    """The result as the parent reads it from the child's file."""
    return PublishedResult.from_file(result)

# (label, expected status, build_record keyword arguments): every way a record is made.
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("verified", "ok", {"outcome": ChildOutcome(published(CHILD_RESULT), 0, wall_s=5.0, launcher="forkserver")}),
    ("exception", "error", {"outcome": ChildOutcome(published(FAILED_RESULT), 1)}),
    ("own-oom", "oom", {"outcome": ChildOutcome(published(OOM_RESULT), 1)}),
    ("model-refused", "skipped", {"outcome": ChildOutcome(published(SKIPPED_RESULT), 0)}),
    ("skip-list", "skipped", {"skip_reason": "listed in the suite's skip rules", "source": "builtin"}),
    ("timeout", "timeout", {"outcome": ChildOutcome(None, -9, timed_out=True, log_tail="...")}),
    ("died-verifying", "ok", {"outcome": ChildOutcome(published(INTERIM_RESULT), -signal.SIGSEGV, log_tail="Fatal")}),
    ("timed-out-verifying", "ok", {"outcome": ChildOutcome(published(INTERIM_RESULT), -9, timed_out=True)}),
    ("interrupted", "interrupted", {"outcome": ChildOutcome(published(INTERIM_RESULT), -2, interrupted=True)}),
    ("sigkill-oom", "oom", {"outcome": ChildOutcome(None, -9, oom_kills=1, oom_counter="memory.events")}),
    ("segfault", "crashed", {"outcome": ChildOutcome(None, -signal.SIGSEGV, log_tail="Segmentation fault")}),
    ("exit", "crashed", {"outcome": ChildOutcome(None, 3)}),
    ("fork-server-died", "crashed", {"outcome": ChildOutcome(None, None, launcher="forkserver",
                                                             launcher_note="the fork server was killed")}),
    ("node-lost", "crashed", {"outcome": ChildOutcome(None, None, lost_reason="node lost",
                                                      lost_detail="NodeDiedError: gone"),
                              "placement": {"executor": "ray", "host": "node-2", "node_id": "abc123"}}),
]


def build(tmp_path: Path, verify: bool = True, **kwargs: Any) -> dict[str, Any]:
    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo="inductor", test="train",
                              precision="fp32")
    ctx = RecordContext(run_id="20261124T000000Z-abcdef", fingerprint="0123456789ab", options=RunOptions(verify=verify),
                        output_dir=tmp_path, host_environment={"hostname": "h", "python": "3.11.7"}, processes=2)
    if "outcome" in kwargs:
        kwargs.setdefault("artifacts_dir", tmp_path / "runs" / "exp")
        kwargs.setdefault("timeout_s", 30.0)
    # Through the results file's own encoding: NaN becomes null, as every reader sees it.
    return json.loads(json.dumps(build_record(ctx, Experiment("dummy", "dummy", config), **kwargs)))


@pytest.mark.parametrize("label, status, kwargs", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("verify", [True, False], ids=["verify", "no-verify"])
def test_build_record_follows_the_schema(tmp_path: Path, label: str, status: str, kwargs: dict, verify: bool) -> None:
    record = build(tmp_path, verify=verify, **kwargs)
    assert record["status"] == status
    assert record_errors(record) == []
    # Every field the schema names, build_record writes (merged_from is merge's; minified is joined by
    # readers from the minified.jsonl sidecar).
    assert set(record) == set(record_schema()["properties"]) - {"merged_from", "minified"}


def test_every_status_is_built_by_a_case() -> None:
    assert {status for _, status, _ in CASES} == set(STATUSES)


def test_the_schema_is_valid_and_pins_the_version(tmp_path: Path) -> None:
    Draft202012Validator.check_schema(record_schema())
    assert field_schema("schema_version")["const"] == SCHEMA_VERSION == 1
    record = build(tmp_path, outcome=ChildOutcome(published(CHILD_RESULT), 0))
    assert record["schema_version"] == SCHEMA_VERSION
    assert any("schema_version" in e for e in record_errors({**record, "schema_version": 2}))


def test_the_schema_lists_the_codes_statuses_and_reference_metrics() -> None:
    assert tuple(field_schema("status")["enum"]) == STATUSES
    assert tuple(field_schema("verification_code")["enum"]) == VERIFICATION_CODES
    reference = [name for name, node in field_schema("metrics")["properties"].items()
                 if node.get("type") == "array" and not node.get("deprecated")]
    assert tuple(reference) == REFERENCE_METRICS
    assert tuple(field_schema("error")["properties"]["last_phase"]["enum"]) == PHASES


def fields(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    for name, child in node.get("properties", {}).items():
        yield f"{path}{name}", child
        yield from fields(child, f"{path}{name}.")


def test_every_field_says_what_it_is() -> None:
    schema = record_schema()
    named = list(fields(schema)) + [(f"$defs.{d}.{n}", c) for d, node in schema["$defs"].items()
                                    for n, c in fields(node)]
    assert len(named) > 100
    undescribed = [path for path, node in named if len(node.get("description", "")) < 10]
    assert not undescribed, undescribed


@pytest.mark.parametrize("change, field", [
    (lambda r: r.update(surprise=1), "surprise"),
    (lambda r: r["experiment"].update(colour="red"), "colour"),
    (lambda r: r["placement"]["shard"].update(partition_id=-1), "placement.shard.partition_id"),
    (lambda r: r.update(status="fine"), "status"),
    (lambda r: r.update(verification_code="MAYBE"), "verification_code"),
    (lambda r: r["metrics"].update(per_iter_time="fast"), "metrics.per_iter_time"),
    (lambda r: r.pop("run_id"), "run_id"),
], ids=["top-level-key", "experiment-key", "negative-shard", "status", "code", "samples", "missing-run-id"])
def test_what_no_record_holds_fails(tmp_path: Path, change, field: str) -> None:
    record = build(tmp_path, outcome=ChildOutcome(published(CHILD_RESULT), 0))
    change(record)
    with pytest.raises(RecordSchemaError, match=field.split(".")[-1]):
        validate_record(record)


def test_open_blocks_take_new_figures(tmp_path: Path) -> None:
    record = build(tmp_path, outcome=ChildOutcome(published(CHILD_RESULT), 0))
    record["measurements"]["a_plugin_figure"] = {"any": "shape"}
    record["environment"]["model_repo_commit"] = "0517d552"
    record["artifacts"]["trace"] = "runs/x/trace.json"
    validate_record(record)


def golden_records() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(GOLDEN.rglob("*.jsonl")):
        for lineno, line in enumerate(path.read_text().splitlines(), start=1):
            yield f"{path.relative_to(GOLDEN)}:{lineno}", json.loads(line)


def test_the_golden_files_follow_the_schema() -> None:
    records = list(golden_records())
    assert len(records) > 100
    broken = {where: record_errors(record) for where, record in records if record_errors(record)}
    assert not broken, broken


def test_docs_record_page_is_generated_from_the_schema() -> None:
    page = ROOT / "docs" / "record.md"
    assert page.exists() and page.read_text() == record_reference_markdown(), \
        f"docs/record.md is out of date with the record schema: regenerate it with `{REGENERATE_DOCS}`"


def test_the_page_has_a_table_per_object() -> None:
    page = record_reference_markdown()
    for heading in ("record", "model", "experiment", "process", "metrics", "measurements", "stats", "error",
                    "verification", "artifacts", "timings", "placement", "placement.shard", "environment",
                    "merged_from", "minified", "summary", "op_totals", "op_table"):
        assert f"\n## `{heading}`\n" in page, heading
    assert "| `batch_size` | integer or null | yes | The batch size the model ran with" in page
    assert "| `per_iter_time` | `summary` or null | yes |" in page
