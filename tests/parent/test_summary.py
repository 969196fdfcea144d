"""The end-of-run summary says how many experiments were timed on a noisy host."""

from pathlib import Path

from experiment_runner.parent.summary import render_summary


def record(noisy: bool | None, block: str = "metrics") -> dict:
    return {"experiment": {"accelerator": "cpu", "xla": None, "dynamo": None, "test": "eval", "precision": "fp32"},
            "model": {"model_name": "m"}, "status": "ok", "verification_code": "VERIFIER_SKIPPED",
            "stats": {"per_iter_time": {"median": 0.001}},
            block: {"noisy_host": noisy, "host_load": {"noisy_host_share": 0.1}}}


def test_noisy_records_are_counted_wherever_the_record_keeps_its_figures():
    records = [record(True), record(False), record(None), record(True, block="measurements")]
    text = render_summary(records, Path("out/results.jsonl"), "run")
    assert "2 of 4 experiment(s) ran on a noisy host: other processes used more than 10% of the CPUs" in text


def test_a_quiet_run_says_nothing_about_noise():
    assert "noisy" not in render_summary([record(False)], Path("r.jsonl"), "run")


def test_the_summary_suggests_the_next_command_and_a_retry_after_failures():
    failed = {**record(False), "status": "error"}
    text = render_summary([record(False), failed], Path("out/results.jsonl"), "run")
    assert "1 experiment(s) failed" in text and "--retry-failed" in text
    assert text.splitlines()[-1] == "Next: experiment_runner report out/results.jsonl"
    assert "--retry-failed" not in render_summary([record(False)], Path("r.jsonl"), "run")


def test_control_characters_in_names_reach_the_terminal_escaped():
    from experiment_runner.parent.summary import printable

    named = {**record(False), "model": {"model_name": "evil\x1b[2Jname\n"}}
    text = render_summary([named], Path("r.jsonl"), "run")
    assert "\x1b" not in text and "evil\\x1b[2Jname\\n" in text
    assert printable("résumé 名前") == "résumé 名前"
