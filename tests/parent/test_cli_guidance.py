"""What a user gets when a command goes wrong: a suggestion, the version, the install command
that fits this host, and one line instead of a record per experiment."""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path

import pytest

from experiment_runner.cli import SUBCOMMANDS, build_parser, main, parse_config
from experiment_runner.core.matrix import HostCapabilities
from experiment_runner.core.run_config import MatrixConfig
from experiment_runner.core.requirements import install_command, missing
from experiment_runner.errors import EXIT_USAGE, UsageError
from experiment_runner.parent.session import check_requested

ALL_COMMANDS = ("report", "compare", "merge", "history", "bisect", "export", "check-expected", "minify")


def test_a_misspelt_command_suggests_the_right_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reprot", "results.jsonl"]) == EXIT_USAGE
    (line,) = capsys.readouterr().err.splitlines()
    assert "unknown command 'reprot'; did you mean 'report'?" in line
    assert main(["frobnicate"]) == EXIT_USAGE
    assert "commands: report, compare, merge, history" in capsys.readouterr().err


def test_a_misspelt_flag_suggests_the_right_one() -> None:
    with pytest.raises(UsageError, match="did you mean '--accelerator'"):
        parse_config(["--suite-name=dummy", "--acclerator=cpu"])
    with pytest.raises(UsageError) as unknown:
        parse_config(["--suite-name=dummy", "--zzzz"])
    assert "did you mean" not in str(unknown.value)


def test_a_misspelt_value_suggests_the_right_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError, match=r"invalid choice: 'evl' .*; did you mean 'eval'\?"):
        parse_config(["--suite-name=dummy", "--test=evl"])
    assert main(["report", "--fromat", "html", "results.jsonl"]) == EXIT_USAGE
    assert capsys.readouterr().err.strip() == ("experiment_runner report: error: unrecognized arguments: --fromat; "
                                               "did you mean '--format'? (see experiment_runner report --help)")
    assert main(["report", "--format", "htm", "results.jsonl"]) == EXIT_USAGE
    assert "invalid choice: 'htm'" in (err := capsys.readouterr().err) and "did you mean 'html'?" in err


def test_a_precision_of_another_width_is_not_taken_for_a_misspelling() -> None:
    """fp64 is one edit from fp16, the precision furthest from it in meaning."""
    with pytest.raises(UsageError) as wide:
        parse_config(["--suite-name=dummy", "--precision=fp64"])
    assert str(wide.value).endswith("; did you mean 'fp32'? (the widest precision measured; float64 is only "
                                    "--verify's reference) (see --help)")
    with pytest.raises(UsageError) as narrow:
        parse_config(["--suite-name=dummy", "--precision=fp8"])
    assert "did you mean" not in str(narrow.value)
    assert "(choose from 'fp32', 'bf16', 'fp16', 'amp')" in str(narrow.value)
    for spelt, meant in (("bfloat16", "bf16"), ("half", "fp16"), ("fp23", "fp32")):
        with pytest.raises(UsageError, match=f"did you mean '{meant}'\\?"):
            parse_config(["--suite-name=dummy", f"--precision={spelt}"])


def test_an_unknown_backend_suggests_one_and_lists_each_usable_backend_once() -> None:
    caps = HostCapabilities(dynamo_backends=frozenset({"inductor", "eager", "openxla", "openxla_eval",
                                                       "relu_compile_error_TESTING_ONLY"}))
    with pytest.raises(UsageError) as unknown:
        check_requested(MatrixConfig(suite_name="dummy", dynamo=("inducter",)), caps)
    assert str(unknown.value) == ("unknown dynamo backend 'inducter'; did you mean 'inductor'? "
                                  "(known: None, eager, inductor, openxla, openxla_eval)")
    check_requested(MatrixConfig(suite_name="dummy", dynamo=("relu_compile_error_TESTING_ONLY",)), caps)


def test_every_subcommand_is_discoverable(capsys: pytest.CaptureFixture[str]) -> None:
    assert tuple(SUBCOMMANDS) == ALL_COMMANDS
    help_text = build_parser().format_help()
    assert all(f"\n  {name} " in help_text for name in ALL_COMMANDS), help_text
    assert main([]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("experiment_runner: error: nothing to do: a run needs --suite-name")
    assert all(f"\n  {name} " in err for name in ALL_COMMANDS), err
    opening = (Path(__file__).parents[2] / "README.md").read_text().split("\n\n", 2)[1]
    assert all(f"`{name}`" in opening for name in ALL_COMMANDS), opening


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


def test_the_readme_says_which_torch_index_a_cpu_host_takes() -> None:
    """PyPI's torch for Linux is the CUDA build: a CPU host without a local wheel needs the CPU index."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    fresh = readme.split("## Fresh machine", 1)[1].split("### Run the tests", 1)[0]
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in fresh


def test_the_readme_says_what_its_main_command_runs_and_what_takes_its_time() -> None:
    """Half the main command's experiments train, and its time depends on the host: a newcomer on a
    busy host, or timing eval alone, must find the dated figures rather than read one as a promise."""
    from experiment_runner.core.matrix import HostCapabilities
    from experiment_runner.parent.session import build_plan
    from experiment_runner.parent.suites import suite_catalog

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    fresh = readme.split("## Fresh machine", 1)[1].split("### Run the tests", 1)[0]
    command = fresh.split("```bash\n", 1)[1].split("\n", 1)[0].rsplit("&& experiment_runner ", 1)[1]
    config = parse_config(command.split())
    suite = suite_catalog(config.matrix.suite_name)
    plan = build_plan(config.matrix, suite, suite.model_names, HostCapabilities())
    runs = {(p.experiment.config.test, p.experiment.config.precision, p.experiment.config.dynamo)
            for p in plan.planned}
    assert runs == {(test, precision, dynamo) for test, precision in (("eval", "bf16"), ("train", "fp32"))
                    for dynamo in (None, "inductor")}
    prose = " ".join(fresh.split())
    assert ("It runs four experiments of the built-in llama, eval (bf16) and train (fp32), each in eager and "
            "under inductor") in prose
    assert "the two training experiments take most of its time; `--test=eval` leaves them out" in prose
    assert "beside other work: dated timings on quiet and busy hosts are in" in prose
    assert "](docs/benchmarks/first_hour.md)" in prose
