"""The record's schema: one versioned JSON Schema document says what every field of a record is.

The document (`record.schema.json`, package data beside this module) is the contract, written
as JSON Schema rather than generated from typed definitions: its readers are not only this
package but jq users, the reference runner's tools and other languages, and a JSON document
with a description per field serves them all as it is, with no generator to keep in step.
This module loads it, pins the version (`SCHEMA_VERSION`, read from the document's
`schema_version` const), resolves field paths for the readers that derive from it
(analysis/columns.py), validates records and renders docs/record.md.

Loading needs only the standard library; `jsonschema` is imported by validation alone, which
the runner's normal path never calls.
"""

from __future__ import annotations

import json
import sys
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING, Any, Iterator, Mapping

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

SCHEMA_FILE = "record.schema.json"
REGENERATE_DOCS = "python -m experiment_runner.core.record_schema > docs/record.md"


@cache
def record_schema() -> Mapping[str, Any]:
    """The record's JSON Schema document (draft 2020-12), parsed once."""
    return json.loads(files(__package__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))


SCHEMA_VERSION: int = record_schema()["properties"]["schema_version"]["const"]


class RecordSchemaError(ValueError):
    """A record does not follow the schema; the message names the field and what is wrong."""


def _resolve(node: Mapping[str, Any]) -> Mapping[str, Any]:
    """Follow a local `$ref` (the schema only refers to its own `$defs`), keeping the node's description."""
    ref = node.get("$ref")
    if ref is None:
        return node
    target: Any = record_schema()
    for part in ref.removeprefix("#/").split("/"):
        target = target[part]
    return {**target, **{k: v for k, v in node.items() if k != "$ref"}}


def field_schema(path: str) -> Mapping[str, Any]:
    """The schema of the field at a dotted path (`experiment.batch_size`); KeyError when the
    schema does not name it (a key an open object merely allows is not named)."""
    node: Mapping[str, Any] = record_schema()
    for depth, name in enumerate(path.split(".")):
        properties = _resolve(node).get("properties", {})
        if name not in properties:
            where = ".".join(path.split(".")[:depth]) or "the top level"
            raise KeyError(f"the record schema names no field {name!r} in {where} (path {path!r})")
        node = properties[name]
    return _resolve(node)


def field_types(path: str) -> tuple[str, ...]:
    """The JSON types a field may hold, `null` included where allowed."""
    node = field_schema(path)
    kind = node.get("type")
    return (kind,) if isinstance(kind, str) else tuple(kind or ())


@cache
def _validator() -> "Validator":
    from jsonschema import Draft202012Validator

    return Draft202012Validator(record_schema())


def record_errors(record: Any) -> list[str]:
    """Every way `record` breaks the schema, as `<field path>: <what is wrong>`; empty when it follows it."""
    errors = sorted(_validator().iter_errors(record), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{'.'.join(map(str, e.absolute_path)) or '(record)'}: {e.message[:300]}" for e in errors]


def validate_record(record: Any) -> None:
    """Raise RecordSchemaError naming every field of `record` that breaks the schema."""
    errors = record_errors(record)
    if errors:
        raise RecordSchemaError("; ".join(errors))


# --- docs/record.md ----------------------------------------------------------------------

def _type_text(node: Mapping[str, Any]) -> str:
    node = _resolve(node)
    if "anyOf" in node:
        return " or ".join(_type_text(option) for option in node["anyOf"])
    if "title" in node:
        return f"`{node['title']}`"
    if "const" in node:
        return f"`{json.dumps(node['const'])}`"
    kinds = node.get("type")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds or ["any"])
    if "items" in node:
        items = _type_text(node["items"])
        items = f"({items})" if " or " in items else items
        kinds = [f"array of {items}" if k == "array" else k for k in kinds]
    return " or ".join(kinds)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _objects(path: str, node: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(path, node) of every object with named fields, depth first in document order."""
    node = _resolve(node)
    if "properties" not in node:
        return
    yield path, node
    for name, child in node["properties"].items():
        if "$ref" not in child:
            yield from _objects(f"{path}.{name}" if path else name, child)


def _table(path: str, node: Mapping[str, Any]) -> list[str]:
    required = set(node.get("required", ()))
    lines = [f"## `{path}`", "", _cell(node.get("description", "")), "",
             "| field | type | required | description |", "| --- | --- | --- | --- |"]
    for name, child in node["properties"].items():
        resolved = _resolve(child)
        description = resolved.get("description", "")
        if "enum" in resolved:
            description += " One of " + ", ".join(f"`{v}`" for v in resolved["enum"]) + "."
        if resolved.get("deprecated"):
            description = "Deprecated. " + description
        lines.append(f"| `{name}` | {_type_text(child)} | {'yes' if name in required else ''} | {_cell(description)} |")
    extra = node.get("additionalProperties", True)
    if extra is False:
        lines += ["", "No other field is allowed."]
    elif extra is True:
        lines += ["", "Other fields may appear (open object)."]
    else:
        lines += ["", f"Other fields may appear, each a {_type_text(extra)}."]
    return lines + [""]


def record_reference_markdown() -> str:
    """docs/record.md: the schema as Markdown, a table per object (field, type, required, description)."""
    schema = record_schema()
    generated = f"<!-- Generated from experiment_runner/core/{SCHEMA_FILE} by `{REGENERATE_DOCS}`; do not edit. -->"
    version = f'Schema version {SCHEMA_VERSION}: every record written to it says `"schema_version": {SCHEMA_VERSION}`.'
    lines = ["# The record", "", generated, "", version, ""]
    for path, node in _objects("", schema):
        lines += _table(path or "record", node)
    for name, node in schema.get("$defs", {}).items():
        if "properties" in node:
            lines += _table(name, node)
        else:
            values = _type_text(node["additionalProperties"])
            lines += [f"## `{name}`", "", f"{_cell(node['description'])} Each value is a {values}.", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":
    sys.stdout.write(record_reference_markdown())
