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


def test_a_differing_count_names_the_other_files_that_count_as_we_do():
    """BertForMaskedLM's 5 breaks are also the dynamic_inductor, dynamo_eager and inductor training
    files' (shipped data); 14 is only in dynamic_aot_eager's BartForCausalLM row (a file still at an
    older model list), so a Bert count of 14 is in no other file."""
    assert dashboard_sweep.same_breaks_in("aot_eager_huggingface_training.csv", "BertForMaskedLM", "5") == (
        "dynamic_inductor, dynamo_eager, inductor")
    assert dashboard_sweep.same_breaks_in("aot_eager_huggingface_training.csv", "BertForMaskedLM", "14") == ""
    assert dashboard_sweep.same_breaks_in("aot_eager_huggingface_training.csv", "BartForCausalLM", "14") == (
        "dynamic_aot_eager")
    assert dashboard_sweep.same_breaks_in("not_a_pytorch_file.csv", "BertForMaskedLM", "5") == ""
