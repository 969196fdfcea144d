"""The verifier stands alone: no module of it names the child, the parent, the analysis tools
or the CLI, not even for annotations (`lint-imports` is told to skip `if TYPE_CHECKING:`
imports, so this reads every import statement itself)."""

from __future__ import annotations

import ast
from pathlib import Path

import verifier

FORBIDDEN = ("experiment_runner.child", "experiment_runner.parent", "experiment_runner.analysis",
             "experiment_runner.cli")


def imported_names(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in `path`, wherever it sits (function bodies and TYPE_CHECKING blocks too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
    return found


def forbidden(name: str) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in FORBIDDEN)


def test_the_verifier_imports_nothing_of_the_child_parent_or_analysis() -> None:
    sources = sorted(Path(verifier.__file__).parent.rglob("*.py"))
    assert len(sources) >= 4
    offending = [f"{path.name}:{line}: {name}" for path in sources for line, name in imported_names(path)
                 if forbidden(name)]
    assert not offending, offending


def test_the_check_sees_annotation_only_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                      "    from experiment_runner.child.driver import ExperimentDriver\n")
    assert [name for _, name in imported_names(module) if forbidden(name)] == [
        "experiment_runner.child.driver.ExperimentDriver"]
