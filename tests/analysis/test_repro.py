"""The repro line of an experiment: run as printed, it plans exactly that experiment."""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

import pytest

from experiment_runner.analysis.loader import load_rows
from experiment_runner.analysis.repro import repro_of
from experiment_runner.cli import parse_config

GOLDEN = Path(__file__).parents[1] / "golden" / "results.jsonl"


def planned_config(line: str):
    """The one configuration the line's flags ask for (each dimension has one value)."""
    config = parse_config(shlex.split(line)[1:])
    m = config.matrix
    for dimension in (m.accelerator, m.xla, m.dynamo, m.test, m.precision):
        assert dimension is not None and len(dimension) == 1, line
    return config


def test_every_golden_experiment_has_a_line_naming_one_configuration() -> None:
    rows = load_rows([GOLDEN])
    assert rows
    for row in rows:
        line = repro_of(row)
        config = planned_config(line)
        assert [p.pattern for p in config.matrix.filter_patterns] == [f"^{row.model}$"]
        assert (config.matrix.accelerator[0], config.matrix.dynamo[0], config.matrix.test[0]) == (
            row.accelerator, row.dynamo, row.test)


def test_every_dimension_and_measurement_flag_is_carried() -> None:
    row = replace(load_rows([GOLDEN])[0], model="vit_base_patch14_dinov2.lvd142m", suite="timm", xla="PJRT",
                  xla_flags="--xla_cpu_use_thunk_runtime=false", compile_options="max-autotune", repeat=4,
                  processes=3, dynamo="openxla",
                  experiment_id="timm/vit_base_patch14_dinov2.lvd142m/cpu-PJRT[x]-openxla-eval-bf16-bs8"
                                "-functionalization-max-autotune")
    line = repro_of(row)
    config = planned_config(line)
    m = config.matrix
    assert [p.pattern for p in m.filter_patterns] == [r"^vit_base_patch14_dinov2\.lvd142m$"]
    assert (m.xla, m.xla_flags, m.compile_options, m.batch_size) == (
        ("PJRT",), ("--xla_cpu_use_thunk_runtime=false",), ("max-autotune",), 8)
    assert m.enable_functionalization and config.options.repeat == 4 and config.session.processes == 3


@pytest.mark.e2e
def test_the_line_run_as_printed_runs_exactly_that_experiment(run_cli, tmp_path: Path) -> None:
    first = run_cli("--suite-name=faulty", "--accelerator=cpu", "--dynamo=None", "--test=eval", "--repeat=3",
                    "--filter=^quick_0[0-3]$", "--precision=fp32", "--batch-size=2")
    assert first.returncode == 0, first.stderr
    rows = {row.model: row for row in load_rows([first.results_path])}
    line = repro_of(rows["quick_02"])
    assert line.startswith("experiment_runner --suite-name=faulty --filter='^quick_02$' ")
    again = run_cli(*shlex.split(line)[1:], output_dir=tmp_path / "again")
    assert again.returncode == 0, again.stderr
    (record,) = again.records()
    assert record["experiment_id"] == rows["quick_02"].experiment_id
    assert record["repeat"] == 3 and record["status"] == "ok"
