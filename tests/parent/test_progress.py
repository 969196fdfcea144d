"""What a user sees while a run goes on: each running experiment's phase, a heartbeat when
no terminal shows a progress bar, and the log of every failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiment_runner.core.matrix import Experiment, ExperimentConfig
from experiment_runner.core.options import RunOptions
from experiment_runner.core.protocol import PHASES, Task, read_phase, write_phase

COMMON = ("--suite-name=faulty", "--accelerator=cpu", "--dynamo=None", "--test=eval", "--repeat=1")


def test_the_phase_file_says_what_the_worker_does_and_a_new_attempt_clears_it(tmp_path: Path) -> None:
    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo=None, test="eval",
                              precision="fp32")
    task = Task(Experiment("dummy", "dummy", config), RunOptions(), str(tmp_path))
    assert read_phase(tmp_path) is None
    for phase in PHASES:
        write_phase(task, phase)
        assert read_phase(tmp_path)[0] == phase
    task.clear_results()
    assert read_phase(tmp_path) is None


@pytest.mark.e2e
def test_without_a_terminal_a_heartbeat_names_the_running_experiment_and_its_phase(run_cli) -> None:
    run = run_cli(*COMMON, "--filter=^hang$", "--subprocess-timeout=6", "--heartbeat=0.5", "--no-progress-bar")
    assert run.returncode == 0, run.stderr
    beats = [line for line in run.stderr.splitlines() if "running: hang cpu xla=None dynamo=None eval" in line]
    assert beats, run.stderr
    assert any(": warm-up for " in line for line in beats), beats  # the hang model hangs in its first iteration
    (failure,) = [line for line in run.stderr.splitlines() if line.startswith("[1/1] hang")]
    (record,) = run.records()
    log = run.output_dir / record["artifacts"]["log"]
    assert failure.endswith(f"(log: {log})") and log.exists()
    assert "Next: experiment_runner report" in run.stdout and "--retry-failed" in run.stdout


def test_a_failures_line_keeps_the_instruction_its_message_ends_with() -> None:
    from experiment_runner.parent.runner import MESSAGE_CHARS, describe

    requirements = "/home/a-user/a/long/path/to/a/clone/of/pytorch-benchmark/torchbenchmark/models/" \
                   "vision_maskrcnn/requirements.txt"
    message = ("torchbenchmark model vision_maskrcnn needs a package that is not installed (No module named "
               f"'pycocotools'); install it: pip install -r {requirements}\nTraceback (most recent call last): ...")
    line = describe({"status": "error", "error": {"type": "ImportError", "message": message}})
    assert line.endswith(f"install it: pip install -r {requirements}")
    assert line.startswith("error - ImportError: torchbenchmark model vision_maskrcnn needs")
    assert len(line) <= len("error - ImportError: ") + MESSAGE_CHARS and "Traceback" not in line


def test_a_failures_line_keeps_the_command_and_url_of_missing_input_data(tmp_path) -> None:
    from benchmark_models.torchbench.offline import missing_inputs_line
    from experiment_runner.parent.runner import describe

    package = tmp_path / "a" / "long" / "path" / "to" / "a" / "clone" / "of" / "pytorch-benchmark" / "torchbenchmark"
    missing = FileNotFoundError(2, "No such file or directory", str(package / "data" / ".data" / "x" / "y" / "z.txt"))
    message = missing_inputs_line(package, "speech_transformer", ["speech_transformer_inputs.tar.gz"], missing)
    line = describe({"status": "error", "error": {"type": "DownloadUnreachable", "message": message}})
    assert line.startswith("error - DownloadUnreachable: torchbenchmark model speech_transformer needs its input data")
    assert line.endswith("`python install.py speech_transformer` in the checkout downloads "
                         "https://ossci-datasets.s3.amazonaws.com/torchbench/data/speech_transformer_inputs.tar.gz; "
                         "offline, put that file in torchbenchmark/data/ first (install.py then only unpacks it)")
