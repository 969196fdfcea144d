"""The import contract that keeps the analysis commands apart names every one of them.

`lint-imports` checks only the modules the contract lists: a new command that is not listed could
import another unnoticed, so the list is checked against the CLI's own table of subcommands.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from experiment_runner.cli import SUBCOMMANDS

CONTRACT = "the analysis commands never import each other"


def test_the_contract_lists_every_analysis_command() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the contract itself is checked by lint-imports
    config = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["name"] == CONTRACT]
    commands = {module for module, _ in SUBCOMMANDS.values() if module.startswith("experiment_runner.analysis.")}
    assert contract["type"] == "independence"
    assert set(contract["modules"]) == commands
