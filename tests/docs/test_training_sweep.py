"""The training sweep's table in docs/benchmarks/dashboard.md is what `dashboard_sweep.py
--markdown` prints from the records kept beside it, so a piece added to the records and not to the
page (or the reverse) fails here; how `--standing` treats an unexplained difference (the page's
head itself: test_study_heads.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import dashboard_sweep

ROOT = Path(__file__).parents[2]

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


def test_a_difference_nobody_explained_is_refused(tmp_path):
    (tmp_path / "why.json").write_text("{}")
    kept = ROOT / "docs" / "benchmarks" / "data"
    with pytest.raises(SystemExit, match="BartForCausalLM differs from PyTorch.s file .* does not say why"):
        dashboard_sweep.standing([kept / "dashboard_training"], tmp_path / "why.json")


def test_an_explanation_of_a_difference_that_is_gone_is_refused(tmp_path):
    kept = ROOT / "docs" / "benchmarks" / "data"
    why = json.loads(dashboard_sweep.EXCEPTIONS.read_text())
    why["inductor_timm_training/mobilenetv2_100"] = {"why": "nothing differs", "section": "#x"}
    (tmp_path / "why.json").write_text(json.dumps(why))
    with pytest.raises(SystemExit, match="explains inductor_timm_training/mobilenetv2_100, which no longer differ"):
        dashboard_sweep.standing([kept / "dashboard_sweep", kept / "dashboard_training"], tmp_path / "why.json")
