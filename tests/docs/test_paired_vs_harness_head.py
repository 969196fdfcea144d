"""What `paired_vs_harness.py --standing` and `--phases` count, over rows written here
(test_study_heads.py checks the page's head against the kept rows)."""

from __future__ import annotations

import json

import paired_vs_harness


def row(model: str, harness: tuple[float, str, float], ours: tuple[float, str, float], test: str = "eval") -> str:
    (h_speed, h_accuracy, h_time), (o_speed, o_accuracy, o_time) = harness, ours
    return json.dumps({"round": 1, "model": model, "test": test, "batch_size": 8,
                       "harness": {"speedup": h_speed, "accuracy": h_accuracy, "machine_s": h_time},
                       "ours": {"speedup": o_speed, "accuracy": o_accuracy, "machine_s": o_time, "pairs": 12}})


def test_the_standing_counts_what_it_claims(tmp_path):
    """Two models: one within 5% and at 0.40 of the machine time, one 10% off, failing where the
    harness passes, at 0.90: the totals say 1 of each and the time targets missed."""
    kept = tmp_path / "rows.jsonl"
    kept.write_text("\n".join([row("a", (2.0, "pass", 100.0), (2.04, "PASS", 40.0)),
                               row("b", (1.0, "pass", 100.0), (1.10, "FAIL", 90.0))]) + "\n")
    *table, _, total = paired_vs_harness.standing([kept])
    assert table[2] == "| a | eval | 8 | 1 | pass / PASS | 1.020 | 0.40 | 12 |"
    assert table[3] == "| b | eval | 8 | 1 | pass / FAIL | 1.100 | 0.90 | 12 |"
    assert total.startswith("2 model-tests, 2 model-rounds: verdicts equal in 1; ours' speedup within 5% of the "
                            "harness's in 1; ours' machine time 0.60 of the harness's in geomean (target at most "
                            "0.5: not met), at most 0.90 for one model (target at most 0.6: not met).")


def test_the_phases_and_the_floor_are_the_rows_own(tmp_path):
    """A training row of 30 pairs: its shares are its phases over the child's wall time, and its
    floor drops the 20 pairs above the rule's minimum and the replay, nothing else."""
    timings = {"compile_s": 40.0, "verify_compiled_s": 30.0, "pairs_s": 15.0, "harness_graph_breaks_s": 5.0,
               "child_s": 100.0}
    kept = tmp_path / "rows.jsonl"
    kept.write_text(json.dumps({"round": 1, "model": "m", "test": "train", "batch_size": 8,
                                "harness": {"speedup": 1.0, "accuracy": "pass", "machine_s": 200.0},
                                "ours": {"speedup": 1.0, "accuracy": "PASS", "machine_s": 160.0, "pairs": 30,
                                         "timings": {"inductor": timings}}}) + "\n")
    *table, _, total = paired_vs_harness.phases([kept])
    # floor: 0.80 x (1 - (15 x 20/30 + 5) / 100) = 0.80 x 0.85 = 0.68
    assert table[2] == "| m | train | 40% | 30% | 15% | 5% | 10% | 0.80 | 0.68 |"
    assert total == "Floor over 1 model-tests: 0.68 in geomean, 0.68 to 0.68 per model (targets 0.5 and 0.6)."
