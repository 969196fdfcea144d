"""The readers read only fields the record schema defines: DuckDB's columns are derived from
it (analysis/columns.py), and every key loader.py (and the results helpers it calls) reads
from a record is checked against it here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from experiment_runner.analysis import loader
from experiment_runner.analysis.columns import _COLUMNS, RECORD_PATHS, record_columns, sql_type
from experiment_runner.core import results
from experiment_runner.core.record_schema import field_schema

# The variables through which the readers hold a record or one of its blocks, and the schema
# object each one is; `figures` is metrics and measurements merged (ours win).
HOLDERS: dict[str, tuple[str, ...]] = {
    "record": ("",), "model": ("model",), "exp": ("experiment",), "metrics": ("metrics",),
    "figures": ("measurements", "metrics"), "error": ("error",), "process": ("process",),
}


def reads(path: Path) -> list[tuple[int, str, str]]:
    """(line, holder, key) of every `holder.get("key")`, `holder["key"]` and `"key" in holder`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        holder = key = None
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and isinstance(node.func.value, ast.Name) and node.args and isinstance(node.args[0], ast.Constant)):
            holder, key = node.func.value.id, node.args[0].value
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) \
                and isinstance(node.slice, ast.Constant):
            holder, key = node.value.id, node.slice.value
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) \
                and isinstance(node.ops[0], (ast.In, ast.NotIn)) and isinstance(node.comparators[0], ast.Name):
            holder, key = node.comparators[0].id, node.left.value
        if holder in HOLDERS and isinstance(key, str):
            found.append((node.lineno, holder, key))
    return found


def defined(holder: str, key: str) -> bool:
    for block in HOLDERS[holder]:
        try:
            field_schema(f"{block}.{key}" if block else key)
            return True
        except KeyError:
            continue
    return False


@pytest.mark.parametrize("module", [loader, results], ids=["loader", "results"])
def test_the_loader_reads_only_fields_the_schema_defines(module) -> None:
    found = reads(Path(module.__file__))
    assert found, "the check found no record reads: have the holders' names changed?"
    undefined = [f"{Path(module.__file__).name}:{line}: {holder}[{key!r}]" for line, holder, key in found
                 if not defined(holder, key)]
    assert not undefined, f"reads of fields the record schema does not define: {undefined}"


def test_the_check_sees_every_holder_flatten_uses() -> None:
    """A renamed variable would slip past the check: every holder must still be found reading."""
    seen = {holder for module in (loader, results) for _, holder, _ in reads(Path(module.__file__))}
    assert seen == set(HOLDERS)


def test_the_check_catches_an_undefined_read(tmp_path: Path) -> None:
    source = tmp_path / "reader.py"
    source.write_text('def f(record, exp):\n    return record.get("run_id"), exp.get("colour"), "gpu" in exp\n')
    found = reads(source)
    assert [(holder, key) for _, holder, key in found] == [("record", "run_id"), ("exp", "colour"), ("exp", "gpu")]
    assert [key for _, holder, key in found if not defined(holder, key)] == ["colour", "gpu"]


def test_config_fields_are_experiment_fields() -> None:
    for name in loader.CONFIG_FIELDS:
        field_schema(f"experiment.{name}")


def test_duckdb_columns_come_from_the_schema() -> None:
    assert _COLUMNS == record_columns(RECORD_PATHS)
    assert _COLUMNS["experiment"].startswith('STRUCT("accelerator" VARCHAR,')
    assert sql_type("metrics.per_iter_time") == "DOUBLE[]" and sql_type("experiment.batch_size") == "BIGINT"
    assert sql_type("timestamp") == "DOUBLE"
    with pytest.raises(KeyError, match="colour"):
        record_columns(["experiment.colour"])
    with pytest.raises(KeyError, match="no field 'peak_gpu_bytes' in measurements"):
        sql_type("measurements.peak_gpu_bytes")
