"""What the study scripts' --standing heads count, over rows written here (test_study_heads.py
checks each page's head against the rows kept under docs/benchmarks/data)."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

import aa_false_alarms
import compile_time
import costs
import first_hour
import gpu_nightly
import host_noise
import kept_rows
import overhead
import plans_vs_reference
import ray_overhead
import suite_sweep
import timing_fidelity
import train_stability
import torchbench_offline
import vs_reference


def host(date: str, cpu: str = "AMD EPYC") -> dict:
    return {"date": date, "cpu": cpu, "cpus": 2, "load_average": 0.4, "commit": "abc1234"}


def test_kept_rows_are_read_oldest_first_whatever_file_holds_them(tmp_path, monkeypatch):
    monkeypatch.setattr(kept_rows, "KEPT", tmp_path)
    kept_rows.append(tmp_path / "study" / "b.jsonl", {"host": host("2026-12-01"), "n": 1})
    kept_rows.append(tmp_path / "study" / "a.jsonl", {"host": host("2026-12-03"), "n": 2})
    kept_rows.append(None, {"host": host("2026-12-04"), "n": 3})  # no --rows-out: nothing kept
    assert [row["n"] for row in kept_rows.read("study")] == [1, 2]


def test_a_kept_row_is_strict_json_with_a_diverged_loss_spelled_out(tmp_path):
    kept_rows.append(tmp_path / "rows.jsonl", {"host": host("2026-12-03"), "losses": [1.5, math.nan, -math.inf],
                                                "at": {"10": math.inf}})
    line = (tmp_path / "rows.jsonl").read_text()
    assert json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in a kept row")) == {
        "host": host("2026-12-03"), "losses": [1.5, "nan", "-inf"], "at": {"10": "inf"}}


def noise(date: str, cpu: str, loop_spread: float) -> dict:
    figures = {"process_spread": loop_spread, "median_of_medians_s": 1e-8, "within_process_relative_iqr": [0.01, 0.2]}
    return {"host": host(date, cpu), "processes": 8, "samples": 10, "sample_time_s": 0.05,
            "workloads": {"python_loop": figures, "numpy_matmul": {**figures, "process_spread": 1.01}}}


def test_host_noise_shows_the_newest_row_of_each_processor():
    table = host_noise.standing([noise("2026-11-22", "AMD EPYC", 1.63), noise("2026-12-03", "AMD EPYC", 1.20),
                                 noise("2026-12-02", "Intel Xeon", 1.05)])
    assert [line.split(" | ")[0] for line in table[2:6]] == ["| 2026-12-03, AMD EPYC, 2 CPUs, load 0.4, abc1234"] * 2 + [
        "| 2026-12-02, Intel Xeon, 2 CPUs, load 0.4, abc1234"] * 2
    assert "| pure-Python loop | 1.20x | 0.20 |" in table[2]
    assert table[-1].startswith("2 processor(s); the host moves by up to 1.20x between processes")


def test_overhead_shows_the_median_and_range_of_the_newest_row_of_each_matrix():
    def row(date: str, matrix: list[str], values: list[float]) -> dict:
        figures = {"runs": len(values), "experiments": 2, "overhead_s": values, "startup_share_s": values,
                   "process_cost_s": [0.03] * len(values), "wall_s": values}
        return {"host": host(date), "matrix": matrix, "launchers": {"forkserver": figures}}

    table = overhead.standing([row("2026-11-20", ["--a"], [9.0]), row("2026-12-03", ["--a"], [0.5, 0.7, 0.6]),
                               row("2026-12-03", ["--b"], [1.0])])
    assert len(table) == 4
    assert table[2].endswith("| forkserver | 3 x 2 | 0.600 (0.500-0.700) | 0.600 (0.500-0.700) | 0.030 (0.030-0.030) |")
    assert table[3].startswith("| `--b` |")


def test_compile_time_says_whether_the_runner_is_within_ten_percent_of_the_bare_script():
    row = {"host": host("2026-12-03"), "test": "eval", "rounds": 3,
           "variants": {"bare": [10.0, 12.0, 11.0], compile_time.OURS: [12.0, 13.0, 12.5]}}
    *table, _, verdict = compile_time.standing([row])
    assert table[3] == f"| {compile_time.OURS} | 12.50 (12.00-13.00) | +13.6% |"
    assert verdict == f"eval: the runner ({compile_time.OURS}) +13.6% against the bare script (target within 10%: not met)."


def test_ray_overhead_takes_each_measure_from_the_newest_row_that_has_it():
    older = {"host": host("2026-11-23"), "overhead": {"launcher": "forkserver", "runs": 3,
                                                     "wall_overhead_s": {"local": [0.1, 0.12, 0.2], "ray": [0.15, 0.14, 0.1]},
                                                     "cpu_s": {"local": [1.0], "ray": [1.0]}}}
    newer = {"host": host("2026-12-03"), "shards": {"duration": 1.2, "round_robin": 1.3, "blocks": 1.4}}
    table = ray_overhead.standing([older, newer])
    assert "| `--shard-by=duration` 1.200; round-robin 1.300; contiguous blocks 1.400 | within 1.15 | not met |" in table[2]
    assert "local 0.120 s, Ray 0.140 s: **+0.020 s** | at most +0.2 s | met | 2026-11-23" in table[3]
    assert len(table) == 4, "no scaling row was kept"



def test_first_hour_times_the_readmes_own_main_command_and_reads_pytests_summaries():
    assert first_hour.main_command()[:2] == ["experiment_runner", "--suite-name=torchbench"]
    printed = ("========= 1 failed, 1417 passed, 34 warnings in 713.97s (0:11:53) =========\n"
               "time per tier: browser 6 s, cluster 112 s, e2e 1206 s, unit 78 s\n"
               "======================== 15 passed in 74.10s (0:01:14) ========================\n")
    assert [(m["counts"], m["seconds"]) for m in first_hour.SUMMARY.finditer(printed)] == [
        ("1 failed, 1417 passed, 34 warnings", "713.97"), ("15 passed", "74.10")]
    assert first_hour.TIERS.search(printed)["tiers"] == "browser 6 s, cluster 112 s, e2e 1206 s, unit 78 s"


def test_first_hour_shows_the_newest_row_of_each_command():
    main = {"host": host("2026-12-03"), "command": "main", "argv": ["experiment_runner", "--filter=llama"], "exit": 0,
            "took_s": 196.0, "noisy_host": 1, "load_after": 1.5,
            "experiments": {"llama-eval": {"status": "ok", "wall_s": 30.0}, "llama-train": {"status": "ok", "wall_s": 152.0}}}
    tests = {"host": host("2026-12-02"), "command": "tests", "exit": 1, "took_s": 1400.0, "load_after": 2.0,
             "pytest": [{"counts": "1 failed, 1417 passed", "seconds": 714.0}], "tiers": "unit 78 s"}
    table = first_hour.standing([{**main, "took_s": 999.0, "host": host("2026-11-30")}, main, tests])
    assert len(table) == 4
    assert table[2].endswith("| 1.5 | 3 min 16 s | exit 0; 2 of 2 experiments ok, 1 flagged noisy_host; "
                             "the slowest, llama-train, 152 s |")
    assert "| 23 min 20 s | exit 1; pytest: 1 failed, 1417 passed in 11 min 54 s" in table[3]


def test_plans_vs_reference_counts_refusals_apart_from_comparisons():
    def comparison(name: str, outcome: str, ours: int | None) -> dict:
        return {"name": name, "variant": "on cpu", "outcome": outcome, "reference": 4, "ours": ours, "dropped": 1}

    row = {"host": host("2026-12-03"), "reference": "pytorch/xla @ abc",
           "comparisons": [comparison("a", "same", 4), comparison("b", "differs", 3), comparison("c", "refused", None)]}
    *table, _, total = plans_vs_reference.standing([{**row, "comparisons": []}, row])
    assert table[4] == "| c | on cpu | refused | 4 / - | 1 |"
    assert total.startswith("1 of 2 comparisons plan the same experiments; 1 refused by ours on purpose")


def test_timing_fidelity_takes_each_case_from_the_newest_row_that_timed_it():
    def case(ratio: float, iqr_high: float) -> dict:
        return {"ours_over_timer": ratio, "same_process_ours_over_timer": 1.01, "same_process_range": [0.96, 1.06],
                "per_round_ratio_range": [0.73, 1.81], "ours_relative_iqr_range": [0.007, iqr_high],
                "timer_relative_iqr_range": [0.013, 0.32]}

    older = {"host": host("2026-11-22"), "rounds": 9, "summary": {"dummy": case(1.03, 0.43), "llama-eval-eager": case(0.9, 0.06)}}
    newer = {"host": host("2026-12-03"), "rounds": 5, "summary": {"llama-eval-eager": case(0.995, 0.065)}}
    *table, _, total = timing_fidelity.standing([older, newer])
    assert table[2].startswith("| dummy | **1.030** | 1.010 (0.96-1.06) | 0.73-1.81 | 0.007-0.430 | 0.013-0.320 | 9; 2026-11-22")
    assert table[3].startswith("| llama-eval-eager | **0.995** |")
    assert total == ("2 of 2 cases within ±5% of Timer (target: all); the dummy model's relative IQR at most 0.430 "
                     "over its processes (target at most 0.05: not met).")


def test_vs_reference_shows_the_newest_row_of_each_matrix_with_its_ratio():
    row = {"host": host("2026-12-03"), "reference": "pytorch/xla v2.9.0", "matrix": ["--suite-name=dummy"], "rounds": 3,
           "load": [0.5, 1.0], "wall_s": {"reference": 10.11, "ours": 6.38},
           "outside_timed_s": {"reference": 8.32, "ours": 6.35}, "our_overhead_s": 1.72,
           "cpu_s": {"reference": 10.41, "ours": 7.11}}
    table = vs_reference.standing([{**row, "rounds": 1}, row])
    assert len(table) == 3
    assert table[2].endswith("| 10.11 / 6.38 (**1.58x**) | 8.32 / 6.35 | 1.72 | 10.41 / 7.11 |")
    assert "| pytorch/xla v2.9.0 | 3; 2026-12-03" in table[2]


def test_aa_false_alarms_counts_the_rate_and_its_bound_per_mode():
    def mode(comparisons: int, alarms: int) -> dict:
        return {"comparisons": comparisons, "alarms": alarms, "beyond": 10, "held_by_floor": 6, "held_by_test": 3,
                "noisy": 0, "noisy_else_flagged": 0, "old_rule": 4}

    row = {"host": host("2026-12-03"), "pairs": 4, "processes": 5, "tests": ["eval", "train"], "repeat": 10,
           "iterations_per_run": 20, "modes": {"--processes 5": mode(120, 1), "one process": mode(600, 13)},
           "spread": {"median": 0.185, "max": 2.66, "runs": 96}}
    *table, _, total = aa_false_alarms.standing([row])
    assert table[2] == "| `compare` on --processes 5 | 120 | 1 | 0.83 (3.9) | 9 of 10: 6 by the noise floor, 3 by the test | 0 | 4 | met |"
    assert table[3].startswith("| `compare` on one process | 600 | 13 | 2.17 (")
    assert table[3].endswith("| not met |")
    assert total.startswith("4 pairs of identical runs (eval, train; 5 processes, repeat 10 x 20 iterations); an "
                            "experiment's median moves 18.5% between processes (median; max 266.0%)")


def test_costs_shows_each_models_steps_from_the_newest_run():
    found = {"n": 1, "verify_s": 8.27, "verify_eager_s": 4.04, "verify_compiled_s": 4.22, "verify_float64_s": None,
             "verify_compare_s": 0.0, "child_s": 115.56, "codes": "PASS allclose", "reference": "not needed"}
    row = {"host": host("2026-12-03"), "rounds": 1, "batch_size": 2, "models": {"mobilenetv3_large_100 inductor": found}}
    *table, _, total = costs.standing([{**row, "models": {}}, row])
    assert table[2] == "| mobilenetv3_large_100 inductor | 1 | 8.27 | 4.04 | 4.22 | - | 0.00 | 115.56 | PASS allclose | not needed |"
    assert total.startswith("Seconds, `--verify --batch-size=2`, 1 round(s); 2026-12-03")


def test_gpu_nightly_shows_each_steps_newest_result_on_a_gpu_and_the_steps_never_run_on_one():
    def outcome(name: str, holds: bool, verdict: str) -> dict:
        return {"name": name, "returncode": 0 if holds else 1, "seconds": 1.0, "holds": holds, "verdict": verdict}

    older = {"host": host("2026-12-01"), "budget_s": 540, "environment": {"device": "NVIDIA H100"},
             "outcomes": [outcome("oom", False, "1 record(s): crashed 1"), outcome("mission", True, "a | b")]}
    newer = {"host": host("2026-12-03"), "budget_s": 540, "environment": None,
             "outcomes": [outcome("oom", True, "1 record(s): oom 1")]}
    *table, _, said = gpu_nightly.standing([older, newer])
    cells = {line.split(" | ")[0][2:]: line for line in table[2:]}
    assert cells["oom"].endswith("| yes | 2026-12-03, device unknown: 1 record(s): oom 1 |")
    assert cells["mission"].endswith("| yes | 2026-12-01, NVIDIA H100: a / b |")
    assert cells["check-determinism"].endswith("| - | never run on a GPU |")
    assert "harness" in cells and said.startswith("2 run(s) kept, the newest 2026-12-03")
    assert gpu_nightly.standing([])[-1].startswith("No run of this nightly is kept")


def test_torchbench_offline_counts_the_newest_rows_models_and_quotes_each_failures_line():
    def model(status: str, line: str | None = None, stand_ins: tuple[str, ...] = ()) -> dict:
        return {"status": status, "ms_per_iter": 12.34 if status == "ok" else None, "stand_ins": list(stand_ins),
                "requirements": ["onnx"] if line else [], "line": line}

    older = {"host": host("2026-11-26"), "checkout_commit": "0e83c440", "listed": 3, "not_in_checkout": [],
             "batch_size": 2, "packages": {}, "models": {"a": model("error", "ImportError: x")}}
    newer = {**older, "host": host("2026-12-03"), "not_in_checkout": ["attention_is_all_you_need_pytorch"],
             "models": {"resnet18": model("ok", stand_ins=("pretrained_weights",)),
                        "BERT_pytorch": model("ok"), "yolov3": model("error", "DownloadUnreachable: a | b")}}
    *table, _, said = torchbench_offline.standing([older, newer])
    assert [line.split(" | ")[0] for line in table[2:]] == ["| BERT_pytorch", "| resnet18", "| yolov3"]
    assert table[3] == "| resnet18 | ok | 12.3 | pretrained_weights | - |  |"
    assert table[4] == "| yolov3 | error | - | - | onnx | DownloadUnreachable: a / b |"
    assert said.startswith("**2 of 3 ok** (pytorch/benchmark @ 0e83c440, 3 listed; not in the checkout: "
                           "attention_is_all_you_need_pytorch); eager, eval, fp32, batch size 2; 2026-12-03")


def test_suite_sweep_counts_each_suite_and_column_from_its_newest_run_and_names_each_failure():
    def model(status: str, code: str | None = "PASS", why: str | None = None) -> dict:
        return {"status": status, "verification_code": code, "why": why}

    old = {"host": host("2026-11-24"), "suite": "timm", "dynamo": ["None"], "tests": ["eval"], "verify": True,
           "seconds": 9, "models": {"a": {"eval": model("error", None, "error: boom")}}}
    new = {**old, "host": host("2026-12-03"),
           "models": {"a": {"eval": model("ok")}, "b": {"eval": model("ok", "FAIL_ACCURACY")},
                      "c": {"eval": model("skipped", None, "skipped: rule")}}}
    train = {**old, "tests": ["train"], "verify": False,
             "models": {"a": {"train": model("timeout", None, "timeout (the host)")}}}
    *table, _, failures = suite_sweep.standing([old, new, train])
    cells = {tuple(line.split(" | ")[:2]): line for line in table[2:]}
    assert len(cells) == 6 and cells[("| torchbench", "eval")].endswith("| no row kept: the dated table below |")
    assert cells[("| timm", "eval")].startswith("| timm | eval | 3 | 2 | 1 | 0 | FAIL_ACCURACY 1, PASS 1 | 2026-12-03")
    assert cells[("| timm", "train")].startswith("| timm | train | 1 | 0 | 0 | 1 | not verified | 2026-11-24")
    assert failures == "Failures: timm a (train): timeout (the host)"


def test_train_stability_shows_each_suites_newest_run_and_its_diverged_models():
    def model(name: str, diverged: bool, step: int | None = None) -> dict:
        return {"suite": "torchbench", "model": name, "finite": not diverged, "diverged": diverged,
                "first_nonfinite_step": step, "first_subnormal_step": 19 if name == "llama" else None}

    row = {"host": host("2026-12-03"), "suites": ["torchbench"], "steps": 100, "budget_s": 60.0,
           "models": [model("llama", False), model("BERT_pytorch", True, 16),
                      {"suite": "torchbench", "model": "vgg16", "error": "no result", "diverged": None}]}
    table = train_stability.standing([row])
    assert table[3] == ("| torchbench | 3 | 100, at most 60 s each | 1 | BERT_pytorch (step 16) | vgg16: no result | 1 | "
                        "2026-12-03, AMD EPYC, 2 CPUs, load 0.4, abc1234 |")
    assert table[2].endswith("| no row kept: the dated table below |")


def test_train_stability_adds_a_pieces_models_to_the_suite_and_a_whole_run_replaces_them():
    def model(name: str, finite: bool = True) -> dict:
        return {"suite": "huggingface", "model": name, "finite": finite, "diverged": not finite,
                "first_nonfinite_step": None if finite else 4, "first_subnormal_step": None}

    def run(date: str, names: list[str], only: str | None, steps: int = 10) -> dict:
        return {"host": host(date), "suites": ["huggingface"], "steps": steps, "budget_s": 60.0, "filter": only,
                "suite_sizes": {"huggingface": 55}, "models": [model(n, n != "MobileBert") for n in names]}

    pieces = [run("2026-12-01", ["Albert", "Bart"], "^[AB]"), run("2026-12-02", ["Bart", "MobileBert"], "^[BM]", 5)]
    (line,) = [row for row in train_stability.standing(pieces) if row.startswith("| huggingface")]
    assert line == ("| huggingface | 3 of 55 | 10, at most 60 s each; 5, at most 60 s each | 2 | MobileBert (step 4) | "
                    "none | 0 | 2026-12-02, AMD EPYC, 2 CPUs, load 0.4, abc1234 (and 1 earlier piece(s)) |")
    # A newer piece that retakes only an earlier model is still the newest row the head names.
    retaken = run("2026-12-04", ["Albert"], "^A")
    (line,) = [row for row in train_stability.standing([*pieces, retaken]) if row.startswith("| huggingface")]
    assert line.endswith("| 2026-12-04, AMD EPYC, 2 CPUs, load 0.4, abc1234 (and 1 earlier piece(s)) |")
    whole = run("2026-12-03", ["Albert"], None)
    whole["suite_sizes"] = {"huggingface": 1}
    (line,) = [row for row in train_stability.standing([*pieces, whole]) if row.startswith("| huggingface")]
    assert line.startswith("| huggingface | 1 | 10, at most 60 s each | 1 | none | none | 0 | 2026-12-03")


def test_train_stability_refuses_a_filter_that_matches_no_model_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(train_stability, "models_of", lambda suite: ["dummy"])
    monkeypatch.setattr(sys, "argv", ["train_stability.py", "--suite", "dummy", "--filter", "^zzz"])
    with pytest.raises(SystemExit) as exited:
        train_stability.main()
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith("--filter '^zzz' matches no model of dummy")


def test_standing_prints_the_head_and_exits_before_the_scripts_other_arguments_are_asked_for(capsys):
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    kept_rows.add_arguments(parser, "study", lambda: ["| head |", "said"])
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--standing"])
    assert exited.value.code == 0 and capsys.readouterr().out == "| head |\nsaid\n"
    assert parser.parse_args(["somewhere"]).out == Path("somewhere")


def test_a_suite_sweep_row_keeps_only_the_columns_its_run_planned(tmp_path):
    def record(model: str, test: str, status: str) -> dict:
        return {"model": {"model_name": model}, "experiment": {"dynamo": None, "test": test}, "status": status,
                "verification_code": "PASS" if test == "eval" else None,
                "error": None if status == "ok" else {"type": "Timeout", "message": "no result"}}

    (tmp_path / "timm").mkdir()
    lines = [record("a", "eval", "ok"), record("b", "eval", "ok"), record("a", "train", "timeout")]
    (tmp_path / "timm" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    args = argparse.Namespace(dynamo=None, test=["train"], no_verify=True)
    row = suite_sweep.kept_row(tmp_path, "timm", host("2026-12-03"), args, 12.0)
    assert row["models"] == {"a": {"train": {"status": "timeout", "verification_code": None,
                                             "why": "timeout (the host)"}}}
    assert (row["tests"], row["verify"]) == (["train"], False)


@pytest.mark.e2e
def test_a_row_taken_in_a_copy_without_git_names_the_commit_it_was_given(monkeypatch, tmp_path):
    monkeypatch.setattr(kept_rows, "ROOT", tmp_path)
    monkeypatch.setenv("KEPT_ROWS_COMMIT", "abc1234")
    assert kept_rows.host()["commit"] == "abc1234"
    monkeypatch.setattr(kept_rows, "ROOT", Path(__file__).parents[2])
    assert kept_rows.host()["commit"] != "abc1234"


def test_train_stability_says_a_model_whose_process_was_killed_was_killed(monkeypatch):
    """The OOM killer's SIGKILL leaves no traceback: densenet121 at its CPU training batch (512)
    read '(no output)' on a 24 GiB host before."""
    monkeypatch.setattr(train_stability.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a[0], -9, stdout="", stderr=""))
    (row,) = train_stability.run_all({"torchbench": ["densenet121"]}, steps=2, timeout_s=10, budget_s=None)
    assert row == {"suite": "torchbench", "model": "densenet121", "error": "killed by SIGKILL; (no output)",
                   "diverged": None}
