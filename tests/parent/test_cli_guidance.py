"""What a user gets when a command goes wrong: a suggestion, the version, the install command
that fits this host, and one line instead of a record per experiment."""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path

import pytest

from experiment_runner.cli import build_parser, main, parse_config
from experiment_runner.core.requirements import install_command, missing
from experiment_runner.errors import EXIT_USAGE, UsageError


def test_a_misspelt_command_suggests_the_right_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reprot", "results.jsonl"]) == EXIT_USAGE
    (line,) = capsys.readouterr().err.splitlines()
    assert "unknown command 'reprot'; did you mean 'report'?" in line
    assert main(["frobnicate"]) == EXIT_USAGE
    assert "commands: report, compare, merge, history" in capsys.readouterr().err


def test_a_misspelt_flag_suggests_the_right_one() -> None:
    with pytest.raises(UsageError, match="did you mean --accelerator"):
        parse_config(["--suite-name=dummy", "--acclerator=cpu"])
    with pytest.raises(UsageError) as unknown:
        parse_config(["--suite-name=dummy", "--zzzz"])
    assert "did you mean" not in str(unknown.value)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from experiment_runner import __version__

    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"experiment_runner {__version__}"


def test_help_states_one_default_per_option() -> None:
    text = " ".join(build_parser().format_help().split())
    assert "(default: None)" not in text and text.count("(default: True)") == 0
    assert "--resume, --no-resume" in text and "(default: on)" in text
    assert "--progress-bar, --no-progress-bar tqdm progress bar (default: on when stderr is a terminal)" in text


def test_the_install_command_keeps_the_installed_torch() -> None:
    command = install_command(["timm", "psutil"])
    torch = metadata.version("torch").split("+")[0]
    assert command == f"pip install 'timm>=1.0' 'psutil' 'torch=={torch}'"
    assert missing(("timm", "surely_not_a_package_here")) == ["surely_not_a_package_here"]


@pytest.mark.e2e
def test_a_suite_whose_package_is_missing_is_one_line_and_no_records(run_cli, tmp_path: Path) -> None:
    hide = tmp_path / "hide_timm"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['timm'] = None  # as if not installed\n")
    run = run_cli("--suite-name=timm", "--accelerator=cpu", env={"PYTHONPATH": os.pathsep.join(
        [str(hide), os.environ.get("PYTHONPATH", "")])})
    assert run.returncode == EXIT_USAGE
    assert run.stderr.strip().splitlines() == [
        f"experiment_runner: error: --suite-name=timm needs timm, not installed here; install with: "
        f"{install_command(['timm'])}"]
    assert not run.output_dir.exists()
