"""Every study page that opens with its present tense: the table between its `standing` markers
is what its script's `standing()` prints from the records kept under docs/benchmarks/data, so a
study added to the records and not to the page (or the reverse) fails here."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

# script under benchmarks/, its page under docs/benchmarks/, the heading after its head's section
STUDIES = [
    ("dashboard_sweep", "dashboard.md", "## The training sweep"),
    ("minify_real", "minify.md", "## What it runs"),
    ("paired_vs_harness", "paired_vs_harness.md", "## What it runs"),
]


def page_head(page: str, next_heading: str) -> str:
    """The text between a study page's `standing` markers, which must sit in its "Where it stands"
    section, before the section headed `next_heading`."""
    doc = (ROOT / "docs" / "benchmarks" / page).read_text()
    block = re.search(r"<!-- standing:begin -->\n(.*?)\n<!-- standing:end -->", doc, re.S)
    assert block is not None and doc.index("## Where it stands") < block.start() < doc.index(next_heading)
    return block.group(1).strip()


@pytest.mark.parametrize(("script", "page", "next_heading"), STUDIES)
def test_the_pages_head_is_the_scripts_standing_over_the_kept_records(script, page, next_heading):
    printed = importlib.import_module(script).standing()
    assert len(printed) > 3, f"{script}: no record is kept"
    assert page_head(page, next_heading) == "\n".join(printed).strip(), (
        f"the head of {page} is stale: paste `python benchmarks/{script}.py --standing`")
