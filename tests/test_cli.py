"""The command line as a user meets it: help, dry runs, and one-line errors on bad input."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A private capabilities cache, shared by this module's runs so the probe runs once."""
    return dict(os.environ, XDG_CACHE_HOME=str(tmp_path_factory.mktemp("cache")))


def cli(env, *args, cwd=None):
    return subprocess.run([sys.executable, "-m", "experiment_runner", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300)


def test_help_lists_suites_and_dimension_values(env):
    out = cli(env, "--help").stdout
    for word in ("torchbench", "huggingface", "timm", "dummy", "inductor", "openxla", "PJRT", "eval", "train"):
        assert word in out


def test_dry_run_prints_the_plan_and_never_imports_torch_in_the_parent(env, tmp_path):
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "experiment_runner", "--suite-name=dummy",
                           "--dry-run", f"--output-dirname={tmp_path}"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    assert "torch" not in imported and "experiment_runner.matrix" in imported
    assert "dummy_mlp: cpu xla=None dynamo=inductor train fp32" in proc.stdout
    assert "openxla requires xla=PJRT" in proc.stdout
    assert not (tmp_path / "results.jsonl").exists()


@pytest.mark.parametrize("args, message", [
    (["--suite-name=nope"], "unknown suite 'nope'"),
    (["--suite-name=dummy", "--filter=("], "invalid regex for --filter: '('"),
    (["--suite-name=dummy", "--accelerator=cuda"], "CUDA is not available"),
    (["--suite-name=dummy", "--filter=no_such_model"], "no dummy model matches the filters; models: dummy_mlp"),
    (["--suite-name=dummy", "--dynamo=not_a_backend"], "unknown dynamo backend 'not_a_backend'"),
    (["--suite-name=dummy", "--repeat=0"], "--repeat must be at least 1"),
    (["--suite-name=dummy", "--partition-id=3", "--total-partitions=2"], "--partition-id must be in"),
    (["--suite-name=dummy", "--accelerator=gpu"], "invalid choice: 'gpu'"),
])
def test_bad_input_is_one_line_exit_2_and_leaves_results_untouched(env, tmp_path, args, message):
    results = tmp_path / "results.jsonl"
    results.write_bytes(b'{"run_id": "earlier", "experiment_id": "x", "status": "ok"}\n')
    before = results.read_bytes()
    proc = cli(env, *args, f"--output-dirname={tmp_path}")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert results.read_bytes() == before
