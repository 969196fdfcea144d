"""Issue 39's misleading answers, each run as a user met it: the command now says what it knows,
with the exit status that goes with it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from test_compare import record, write

from experiment_runner.cli import main as cli_main
from experiment_runner.core.matrix import Dropped, ExperimentConfig, Plan
from experiment_runner.errors import EXIT_OK, EXIT_USAGE
from experiment_runner.parent.session import print_dry_run

NIGHTS = ("2026-11-23", "2026-11-24")


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = cli_main([*map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def two_nights(tmp_path: Path, slowdown: float, noisy: bool, models: tuple[tuple[str, ...], ...] = (
        ("llama", "dlrm"), ("llama", "dlrm"))) -> Path:
    """Two nightly folders; the second `slowdown` times slower, its records noisy_host if `noisy`."""
    for night, (name, names) in enumerate(zip(NIGHTS, models)):
        folder = tmp_path / "nightly" / name
        folder.mkdir(parents=True)
        records = [record(f"run-{night}", model, [0.01 * (slowdown if night else 1.0)] * 5, ts=1.7e9 + night * 86400)
                   for model in names]
        for r in records:
            r["measurements"] = {"noisy_host": noisy and night == 1}
        write(folder / "results.jsonl", records)
    return tmp_path / "nightly"


def test_history_of_two_noisy_nights_says_why_it_cannot_judge(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    nightly = two_nights(tmp_path, slowdown=18.0, noisy=True)
    code, out, _ = run(capsys, "history", nightly, "--window", 1)
    assert code == EXIT_OK
    assert "0 changes" in out.splitlines()[0]
    judged = [line for line in out.splitlines() if line.startswith("not judged: ")]
    assert judged == ["not judged: 2 run(s): a step needs 4 runs to be found as a change (2 on each side), "
                      "and 3 to be suspected in the newest run"]
    (noisy,) = [line for line in out.splitlines() if line.startswith("noisy host: ")]
    assert noisy.startswith("noisy host: run run-1 (") and noisy.endswith(
        "2 of 2 records say noisy_host (other processes used the CPUs while they were timed): a time step there "
        "may be the host's, not the build's; rerun that run's experiments while nothing else runs on the host "
        "before trusting one (compare leaves such times unjudged)")
    _, out, _ = run(capsys, "history", nightly, "--window", 1, "--format", "json")
    document = json.loads(out)
    assert [line.removeprefix("not judged: ") for line in judged] == document["not_judged"]
    assert [noisy.removeprefix("noisy host: ")] == document["noisy_runs"]
    # compare on the same files says the same of the noisy night
    files = sorted(nightly.rglob("*.jsonl"))
    code, out, _ = run(capsys, "compare", *files)
    assert "noisy host (not judged)" in out


def test_history_of_one_run_counts_in_the_singular(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nightly = two_nights(tmp_path, slowdown=1.0, noisy=False, models=(("llama",), ()))
    code, out, _ = run(capsys, "history", nightly)
    assert code == EXIT_OK
    assert out.splitlines()[0].startswith("history: 1 run (")
    assert out.splitlines()[0].endswith("), 1 experiment, 0 changes, newest first")


def test_history_with_no_experiment_in_two_runs_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nightly = two_nights(tmp_path, slowdown=1.0, noisy=False, models=(("llama",), ("dlrm",)))
    code, out, _ = run(capsys, "history", nightly)
    assert code == EXIT_OK
    assert ("not judged: no experiment appears in more than one of the 2 runs: nothing to follow from run to run "
            "(different suites, models or configurations?)") in out.splitlines()
    assert "noisy_host" not in out


def test_compare_with_nothing_in_common_exits_non_zero_with_a_reason(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    a = write(tmp_path / "a.jsonl", [record("run-a", "llama", [0.01] * 5)])
    b = write(tmp_path / "b.jsonl", [record("run-b", "dlrm", [0.01] * 5, ts=1.8e9)])
    code, out, err = run(capsys, "compare", a, b)
    assert code == EXIT_USAGE and out == ""
    assert err.strip() == ("experiment_runner compare: error: run A (run-a) and run B (run-b) have no experiment "
                           "in common (1 only in A, 1 only in B): nothing to compare; compare runs of the same "
                           "suite, models and configurations")


def test_report_names_the_last_records_time_not_the_runs_start(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    start = 1.7e9
    records = [record("run-a", model, [0.01] * 5, ts=start) for model in ("llama", "dlrm")]
    for minutes, r in zip((3, 7), records):
        r["timings"] = {"finished_at": start + 60 * minutes}
    code, out, _ = run(capsys, "report", write(tmp_path / "r.jsonl", records))
    assert code == EXIT_OK

    def utc(t: float) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))

    assert out.splitlines()[0] == f"run run-a (2 experiments, started {utc(start)}, last record {utc(start + 420)})"
    for r in records:
        del r["timings"]
    _, out, _ = run(capsys, "report", write(tmp_path / "r.jsonl", records))
    assert out.splitlines()[0] == f"run run-a (2 experiments, run timestamp {utc(start)})"


def test_dry_run_explains_its_dropped_count(capsys: pytest.CaptureFixture[str]) -> None:
    configs = [ExperimentConfig(accelerator=a, xla=None, xla_flags=None, dynamo="openxla", test=t, precision="fp32")
               for a in ("cpu", "tpu") for t in ("eval", "train")]
    dropped = [Dropped("torchbench", model, config, "openxla requires xla=PJRT")
               for model in ("llama", "dlrm", "BERT_pytorch", "resnet50", "nanogpt") for config in configs]
    print_dry_run(Plan(planned=[], dropped=dropped), set())
    out = capsys.readouterr().out.splitlines()
    assert "20 combination(s) of a model and a configuration dropped (4 configuration(s), 5 model(s)):" in out
    # Nothing runs here, so every configuration that would have is listed, one a line.
    head = out.index("  - openxla requires xla=PJRT: 20 (4 configuration(s) x 5 model(s)):")
    assert out[head + 1:head + 5] == [f"      {config.label()}" for config in configs], out
