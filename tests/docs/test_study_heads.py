"""Every study page that opens with its present tense: the table between its `standing` markers
is what its script's `standing()` prints from the records kept under docs/benchmarks/data, so a
study added to the records and not to the page (or the reverse) fails here."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

# script under benchmarks/, its page under docs/benchmarks/
STUDIES = [
    ("aa_false_alarms", "aa_false_alarms.md"),
    ("compile_time", "compile_time.md"),
    ("costs", "costs.md"),
    ("dashboard_sweep", "dashboard.md"),
    ("first_hour", "first_hour.md"),
    ("gpu_nightly", "cuda_check.md"),
    ("host_noise", "host_noise.md"),
    ("minify_real", "minify.md"),
    ("nightly_history", "nightly_history.md"),
    ("overhead", "overhead.md"),
    ("paired_vs_harness", "paired_vs_harness.md"),
    ("plans_vs_reference", "plans_vs_reference.md"),
    ("ray_overhead", "ray_overhead.md"),
    ("suite_sweep", "suite_sweep.md"),
    ("timing_fidelity", "timing_fidelity.md"),
    ("torchbench_offline", "torchbench_offline.md"),
    ("train_stability", "train_stability.md"),
    ("vs_reference", "vs_reference.md"),
]


def page_head(page: str) -> str:
    """The text between a study page's `standing` markers, which must sit in its "Where it stands"
    section, the page's first."""
    doc = (ROOT / "docs" / "benchmarks" / page).read_text()
    sections = re.split(r"^(?=## )", doc, flags=re.M)
    assert sections[1].startswith("## Where it stands\n"), f"{page}: the first section is not its head"
    block = re.search(r"<!-- standing:begin -->\n(.*?)\n<!-- standing:end -->", sections[1], re.S)
    assert block is not None, f"{page}: no standing block in its head"
    return block.group(1).strip()


@pytest.mark.parametrize(("script", "page"), STUDIES)
def test_the_pages_head_is_the_scripts_standing_over_the_kept_records(script, page):
    printed = importlib.import_module(script).standing()
    assert len(printed) > 2, f"{script}: no record is kept"
    assert page_head(page) == "\n".join(printed).strip(), (
        f"the head of {page} is stale: paste `python benchmarks/{script}.py --standing`")


def test_every_study_page_has_its_head_checked_or_is_named_as_without_one():
    """A page is in STUDIES, or in the index's list of pages without a head; verifier_agreement.md's
    head is checked by tests/verify/test_agreement.py (deterministic: it keeps no rows)."""
    folder = ROOT / "docs" / "benchmarks"
    listed = re.search(r"<!-- without-head:begin -->\n(.*?)<!-- without-head:end -->",
                       (folder / "index.md").read_text(), re.S)
    assert listed is not None
    without = set(re.findall(r"\]\(([\w.]+\.md)\)", listed.group(1)))
    pages = {path.name for path in folder.glob("*.md")} - {"index.md", "verifier_agreement.md"}
    assert pages - {page for _, page in STUDIES} == without
