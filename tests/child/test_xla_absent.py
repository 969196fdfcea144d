"""Without torch_xla (the main environment): XLA configurations are dropped with their
reason, and an explicit --xla=PJRT is a one-line usage error, not a traceback."""

from __future__ import annotations

import importlib.util

import pytest

from experiment_runner.errors import EXIT_USAGE

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch_xla") is not None,
                                reason="torch_xla is installed here; these tests need an environment without it")

REASON = "xla=PJRT requires torch_xla, which is not importable"


@pytest.mark.e2e
def test_dry_run_drops_every_xla_configuration_with_the_reason(run_cli) -> None:
    run = run_cli("--suite-name=dummy", "--accelerator=cpu", "--dry-run")
    assert run.returncode == 0, run.stderr
    planned, _, dropped = run.stdout.partition(" dropped (")
    assert "xla=PJRT" not in planned and "xla=None dynamo=None eval" in planned
    (line,) = [line for line in dropped.splitlines() if REASON in line]
    assert "xla=PJRT dynamo=None eval" in line and "xla=PJRT dynamo=openxla" in line
    assert not run.results_path.exists(), "a dry run runs nothing"


@pytest.mark.e2e
@pytest.mark.parametrize("flags", [["--xla=PJRT"], ["--xla=PJRT", "--dynamo=openxla", "--dry-run"]])
def test_explicit_xla_is_a_one_line_error(run_cli, flags) -> None:
    run = run_cli("--suite-name=dummy", "--accelerator=cpu", *flags)
    assert run.returncode == EXIT_USAGE
    assert run.stderr.strip() == "experiment_runner: error: --xla=PJRT, but torch_xla cannot be imported here"
    assert not run.results_path.exists()
