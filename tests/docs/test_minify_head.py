"""What `minify_real.py --standing` counts in the head of docs/benchmarks/minify.md, over cases
written here (test_study_heads.py checks the page against the kept cases)."""

from __future__ import annotations

import json
from pathlib import Path

import minify_real


def case(out: Path, suite: str, model: str, inject: str, minified: dict) -> None:
    """One case's folder as a run leaves it: its record (run 2026-11-28) and its `minified` line."""
    folder = minify_real.case_folder(out, suite, model, inject)
    folder.mkdir(parents=True)
    ids = {"run_id": "r1", "experiment_id": f"{suite}/{model}/cpu"}
    (folder / "results.jsonl").write_text(json.dumps(
        {**ids, "status": "ok", "verification_code": "FAIL", "timestamp": 1795885527.0}) + "\n")
    (folder / "minified.jsonl").write_text(json.dumps({**ids, "minified": minified}) + "\n")


def test_the_standing_counts_what_it_claims(tmp_path):
    """Three of six cases: one reproduced, one killed at its budget whose checkpoint the runner
    found reproducing, one whose repro did not reproduce; only the first counts as reproduced, the
    others are named with what their repro showed."""
    block = {"status": "reproduced", "reproduces": True, "nodes_before": 47, "nodes_after": 3, "minify_s": 600.0}
    case(tmp_path, "torchbench", "alexnet", "accuracy", block)
    case(tmp_path, "timm", "repvgg_a2", "compile_error",
         {**block, "status": "timeout", "nodes_before": 1377, "nodes_after": 90})
    case(tmp_path, "huggingface", "T5Small", "accuracy", {**block, "status": "not_reproduced", "reproduces": False})
    *table, _, total = minify_real.standing(tmp_path)
    assert table[2:] == ["| torchbench | alexnet | accuracy | reproduced | yes | 47 to 3 | 10.0 | 2026-11-28 |",
                         "| timm | repvgg_a2 | compile_error | timeout | yes | 1377 to 90 | 10.0 | 2026-11-28 |",
                         "| huggingface | T5Small | accuracy | not_reproduced | no | 47 to 3 | 10.0 | 2026-11-28 |"]
    assert total == ("3 of 6 cases run, 1 reproduced (minified to the end, the repro checked by the runner in a "
                     "fresh interpreter); not reproduced: timm repvgg_a2 compile_error (timeout at 1377 to 90 nodes, "
                     "its repro reproduces); huggingface T5Small accuracy (not_reproduced at 47 to 3 nodes, its "
                     "repro does not reproduce).")
