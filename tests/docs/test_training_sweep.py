"""The training sweep's table in docs/benchmarks/dashboard.md is what `dashboard_sweep.py
--markdown` prints from the records kept beside it, so a piece added to the records and not to
the page (or the reverse) fails here."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import dashboard_sweep  # noqa: E402

RECORDS = ROOT / "docs" / "benchmarks" / "data" / "dashboard_training"


def test_the_training_sweep_table_is_the_scripts_output_over_the_kept_records():
    doc = (ROOT / "docs" / "benchmarks" / "dashboard.md").read_text()
    block = re.search(r"<!-- training-sweep:begin -->\n(.*?)\n<!-- training-sweep:end -->", doc, re.S)
    assert block is not None
    printed = dashboard_sweep.tables(RECORDS)
    assert len(printed) > 6, "no training record is kept"
    assert block.group(1).strip() == "\n".join(printed).strip(), (
        "the training sweep's table is stale: paste `python benchmarks/dashboard_sweep.py "
        f"--output {RECORDS.relative_to(ROOT)} --markdown`")
