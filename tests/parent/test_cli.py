"""The command line as a user meets it: help, dry runs, and one-line errors on bad input."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A private capabilities cache, shared by this module's runs so the probe runs once."""
    return dict(os.environ, XDG_CACHE_HOME=str(tmp_path_factory.mktemp("cache")))


def cli(env, *args, cwd=None):
    return subprocess.run([sys.executable, "-m", "experiment_runner", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300)


@pytest.mark.e2e
def test_help_lists_suites_and_dimension_values(env):
    out = cli(env, "--help").stdout
    for word in ("torchbench", "huggingface", "timm", "dummy", "inductor", "openxla", "PJRT", "eval", "train"):
        assert word in out


@pytest.mark.e2e
def test_dry_run_prints_the_plan_and_never_imports_torch_in_the_parent(env, tmp_path):
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "experiment_runner", "--suite-name=dummy",
                           "--dry-run", f"--output-dirname={tmp_path}"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    assert "torch" not in imported and "experiment_runner.core.matrix" in imported
    assert not any(name.startswith("experiment_runner.child") for name in imported)
    assert "dummy: cpu xla=None dynamo=inductor train fp32" in proc.stdout
    assert "openxla requires xla=PJRT" in proc.stdout
    assert not (tmp_path / "results.jsonl").exists()


def test_every_numeric_flag_declares_its_range():
    """A new numeric flag must say its range (checked by the CLI, stated in the error); the
    tiers are the exception: the reference ignores undefined ones with a warning."""
    from experiment_runner.core.flags import declared
    from experiment_runner.core.run_config import CONFIGS

    numeric = [o for o in declared(*CONFIGS) if o.flag.parse in (int, float) and o.flag.kind != "list"]
    assert len(numeric) >= 16
    for option in numeric:
        assert option.flag.wanted and (option.flag.low is not None or option.flag.high is not None), option.name
        assert not option.flag.out_of_range(option.default), option.name


@pytest.mark.e2e
@pytest.mark.parametrize("args, message", [
    (["--suite-name=nope"], "unknown suite 'nope'"),
    (["--suite-name=dummy", "--filter=("], "invalid regex for --filter: '('"),
    (["--suite-name=dummy", "--accelerator=cuda"], "CUDA is not available"),
    (["--suite-name=dummy", "--filter=no_such_model"], "no dummy model matches the filters; models: dummy"),
    (["--suite-name=dummy", "--dynamo=not_a_backend"], "unknown dynamo backend 'not_a_backend'"),
    (["--suite-name=dummy", "--repeat=0"], "--repeat must be at least 1"),
    (["--suite-name=dummy", "--partition-id=3", "--total-partitions=2"], "--partition-id must be in"),
    (["--suite-name=dummy", "--accelerator=gpu"], "invalid choice: 'gpu'"),
    (["--suite-name=dummy", "--iterations-per-run=0"], "--iterations-per-run must be at least 1"),
    (["--suite-name=dummy", "--min-sample-time=nan"], "--min-sample-time must be in (0, 60] seconds"),
    (["--suite-name=dummy", "--min-sample-time=0"], "--min-sample-time must be in (0, 60] seconds"),
    (["--suite-name=dummy", "--threads=0"], "--threads must be at least 1"),
    (["--suite-name=dummy", "--noisy-host-share=1.5"], "--noisy-host-share must be in [0, 1]"),
    (["--suite-name=dummy", "--compile-options=fast"], "invalid choice: 'fast'"),
    (["--suite-name=dummy", "--compile-scope=graph"], "invalid choice: 'graph'"),
    (["--suite-name=dummy", "--cpu-launcher=numactl"], "invalid choice: 'numactl'"),
    # Every numeric flag: finite and in range (nan passes every comparison, inf every lower bound).
    (["--suite-name=dummy", "--subprocess-timeout=nan"], "--subprocess-timeout must be a positive finite"),
    (["--suite-name=dummy", "--subprocess-timeout=inf"], "--subprocess-timeout must be a positive finite"),
    (["--suite-name=dummy", "--subprocess-timeout=0"], "--subprocess-timeout must be a positive finite"),
    (["--suite-name=dummy", "--tolerance=nan"], "--tolerance must be a finite number, 0 or more"),
    (["--suite-name=dummy", "--tolerance=-1"], "--tolerance must be a finite number, 0 or more"),
    (["--suite-name=dummy", "--tolerance=inf"], "--tolerance must be a finite number, 0 or more"),
    (["--suite-name=dummy", "--verify-iterations=0"], "--verify-iterations must be at least 1"),
    (["--suite-name=dummy", "--warmup-iterations=-1"], "--warmup-iterations must be 0 or more"),
    (["--suite-name=dummy", "--batch-size=0"], "--batch-size must be at least 1"),
    (["--suite-name=dummy", "--total-partitions=0"], "--total-partitions must be at least 1"),
    (["--suite-name=dummy", "--partition-id=-1"], "--partition-id must be 0 or more"),
    (["--suite-name=dummy", "--max-parallel=0"], "--max-parallel must be at least 1"),
    (["--suite-name=dummy", "--timestamp=nan"], "--timestamp must be a finite number of seconds since the epoch"),
    (["--suite-name=dummy", "--profile-xla-duration-ms=0"], "--profile-xla-duration-ms must be at least 1"),
    (["--suite-name=dummy", "--noisy-host-share=nan"], "--noisy-host-share must be in [0, 1]"),
    (["--suite-name=dummy", "--threads=-2"], "--threads must be at least 1"),
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


@pytest.mark.e2e
def test_a_plugin_suite_is_resolved_by_name_and_never_runs_in_the_parent(env, tmp_path):
    """A plugin importing torch at module level: the plan lists its models, yet the parent
    imports neither the plugin nor torch; only the catalog child does."""
    trace = tmp_path / "imported_by.txt"
    plugin_env = dict(env, PYTHONPATH=os.pathsep.join([str(REPO / "tests" / "support"), env.get("PYTHONPATH", "")]),
                      EXPERIMENT_RUNNER_SUITES="torch_plugin=torch_plugin_suite:TorchPluginSuite",
                      TORCH_PLUGIN_TRACE=str(trace))
    proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "experiment_runner",
                             "--suite-name=torch_plugin", "--dry-run", "--dynamo=None", f"--output-dirname={tmp_path}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=plugin_env)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "plugin_linear: cpu xla=None dynamo=None eval bf16" in out
    imported = {line.split("|")[-1].strip() for line in err.splitlines() if "|" in line}
    assert "torch" not in imported and "torch_plugin_suite" not in imported
    importers = {int(pid) for pid in trace.read_text().split()}
    assert importers and proc.pid not in importers


@pytest.mark.e2e
def test_an_unknown_suite_is_one_line_and_exit_2(env, tmp_path):
    out = cli(env, "--suite-name=nonesuch", "--dry-run", f"--output-dirname={tmp_path}")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "experiment_runner: error: unknown suite 'nonesuch'; choose from dummy, torchbench, huggingface, timm"]


@pytest.mark.e2e
@pytest.mark.parametrize("args", [("--suite-name=dummy", "--dry-run", "--output-dirname=unused"),
                                  ("report", str(REPO / "tests" / "golden" / "results.jsonl"))])
def test_a_reader_that_goes_away_is_no_traceback(env, tmp_path, args):
    """`experiment_runner --dry-run | head`: exit 141 (128 + SIGPIPE) and nothing on stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "experiment_runner", *args], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # before the child writes its first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141, err
    assert err == ""
