"""The generated documentation pages match the code they are generated from."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"

pytestmark = pytest.mark.unit


def _generator():
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("docs_generate", module)
    spec.loader.exec_module(module)
    return module


def test_generated_pages_are_current(capsys: pytest.CaptureFixture[str]) -> None:
    assert _generator().main(["--check"]) == 0, capsys.readouterr().err


def test_every_flag_of_the_parser_is_in_the_cli_reference() -> None:
    from experiment_runner.cli import build_parser

    page = (DOCS / "cli.md").read_text()
    names = {name for action in build_parser()._actions for name in action.option_strings
             if name not in ("-h", "--help")}
    assert len(names) > 70
    assert [name for name in sorted(names) if f"`{name}`" not in page] == []


def test_a_new_flag_makes_the_reference_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check compares with the parser as it is now, not with a copy of the page."""
    import dataclasses

    from experiment_runner.core import flags, run_config
    from experiment_runner.core.flags import Flag, option

    @dataclasses.dataclass(frozen=True)
    class Extra:
        brand_new: bool = option(False, Flag("a flag the page has never seen", run_config.MATRIX, kind="switch"))

    monkeypatch.setattr(run_config, "CONFIGS", (*run_config.CONFIGS, Extra))
    monkeypatch.setitem(flags.SIDES, "Extra", "planning")
    generator = _generator()
    assert "--brand-new" in generator.cli_reference()
    assert generator.main(["--check"]) == 1


@pytest.mark.parametrize("page", ["README.md", "docs/developer-guide.md"])
def test_the_readme_and_the_developer_guide_hold_no_dated_figure(page: str) -> None:
    """Dated figures live on dated pages (docs/benchmarks/): a present-tense page that quotes one
    host's timing on one day goes stale the next day."""
    text = (Path(__file__).resolve().parents[2] / page).read_text()
    assert re.findall(r"\b20\d\d-\d\d-\d\d\b", text) == []
