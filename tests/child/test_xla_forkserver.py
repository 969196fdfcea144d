"""The XLA fork server for real (torch_xla on the CPU PJRT device, no mocks): a child forked
from it is the child a fresh interpreter would be, whatever torch_xla settings it asks for.

Run in the XLA environment with the rest of the `xla` tests (.ci/xla.sh). A file of its own
because pytest-xdist keeps a file on one worker: split from test_xla.py, the XLA stage's two
workers share its time evenly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import invoke_cli

from experiment_runner.core.matrix import Experiment, ExperimentConfig
from experiment_runner.core.options import RunOptions
from experiment_runner.core.protocol import Task

REPEAT = 2
ITERATIONS = 2


def _probes(folder: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in folder.glob("*.json")}


def _shape(value: object, key: str = "") -> object:
    """The keys of a record, recursively, with list lengths: what a reader can rely on.
    `noisy_host` is a judgement of the timed runs: true, false, or null when they were too short
    to tell (core/cpus.py), whichever launcher ran them."""
    if isinstance(value, dict):
        return {k: _shape(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return ("list", len(value))
    if key == "noisy_host" and (value is None or isinstance(value, bool)):
        return "bool | None"
    return type(value).__name__


def _comparable(record: dict) -> dict:
    """A record as fields and verdicts: values that depend on timing or the run are dropped."""
    figures = {**record.get("measurements", {}), **record["metrics"]}
    return {
        "shape": _shape({k: v for k, v in record.items() if k not in ("placement", "timings", "environment")}),
        "status": record["status"], "verification_code": record["verification_code"],
        "experiment": record["experiment"], "artifacts": sorted(record["artifacts"]),
        "xla_counts": {k: v for k, v in figures.items() if k.endswith("_number")},
    }


@pytest.mark.xla
def test_forked_xla_children_get_what_fresh_interpreters_get(tmp_path, cli_cache) -> None:
    """The same XLA matrix through both launchers: the same records (fields, verdicts,
    dumps) and, inside each child, the same device, environment and torch_xla state."""
    runs = {}
    for launcher in ("subprocess", "forkserver"):
        probes = tmp_path / f"probes-{launcher}"
        probes.mkdir()
        run = invoke_cli(["--suite-name=dummy", "--accelerator=cpu", "--xla=PJRT", "--dynamo=None",
                          "--dynamo=openxla", "--test=eval", f"--repeat={REPEAT}",
                          f"--iterations-per-run={ITERATIONS}", "--verify", "--dump-hlo",
                          "--xla-flags=--xla_dump_hlo_as_proto", "--save-ir-format=stablehlo",
                          "--dump-pytorch-xla-metrics", f"--launcher={launcher}"],
                         tmp_path / f"out-{launcher}", cli_cache, timeout=900,
                         env={"PJRT_DEVICE": "CPU", "EXPERIMENT_RUNNER_PLUGINS": "xla_env_probe",
                              "XLA_ENV_PROBE_DIR": str(probes)})
        assert run.returncode == 0, run.stderr
        runs[launcher] = (run, _probes(probes))
    (fresh_run, fresh_probes), (forked_run, forked_probes) = runs["subprocess"], runs["forkserver"]
    fresh, forked = fresh_run.records(), forked_run.records()
    assert [r["placement"]["launcher"] for r in forked] == ["forkserver"] * 2, "served by the XLA server"
    assert [r["placement"]["launcher"] for r in fresh] == ["subprocess"] * 2
    assert [_comparable(r) for r in forked] == [_comparable(r) for r in fresh]
    for f, r in zip(forked, fresh):
        assert (f["status"], f["verification_code"]) == ("ok", "PASS"), (f["error"], f["verification"])
        dumps = [sorted(p.suffix for p in (run.output_dir / rec["artifacts"]["hlo"]).iterdir())
                 for run, rec in ((forked_run, f), (fresh_run, r))]
        assert dumps[0] == dumps[1] and ".pb" in dumps[0] and ".txt" not in dumps[0], "its own XLA_FLAGS"
    assert sorted(forked_probes) == sorted(fresh_probes) and len(forked_probes) == 2
    for name, probe in forked_probes.items():
        for p in (probe, fresh_probes[name]):
            # Per run or per attempt by design: the test's own marker, the runner's reaping tokens.
            for run_specific in ("XLA_ENV_PROBE_DIR", "EXPERIMENT_RUNNER_TEST_MARKER", "EXPERIMENT_RUNNER_RUN_TOKEN",
                                 "EXPERIMENT_RUNNER_ATTEMPT"):
                p["environment"].pop(run_specific)
        fresh_env, forked_env = fresh_probes[name]["environment"], probe["environment"]
        assert forked_env == fresh_env, {k: (forked_env.get(k), fresh_env.get(k))
                                         for k in set(forked_env) | set(fresh_env)
                                         if forked_env.get(k) != fresh_env.get(k)}
        assert probe == fresh_probes[name]
        assert probe["runtime_started_before_first_use"] is False
        assert (probe["device"], probe["device_hw"]) == ("xla:0", "CPU")
        assert "--xla_cpu_enable_fast_math=false" in probe["environment"]["XLA_FLAGS"], "torch_xla's defaults"


@pytest.mark.xla
@pytest.mark.parametrize(("variable", "observed"), [("XLA_USE_BF16", "bf16_storage"),
                                                    ("XLA_DISABLE_FUNCTIONALIZATION", "functionalized")])
def test_one_xla_server_serves_children_asking_for_different_settings(tmp_path, variable, observed) -> None:
    """Variables torch_xla reads at first use are each child's own: one server serves a
    child with the variable and one without, and each behaves as a fresh interpreter does."""
    from conftest import SUPPORT

    from experiment_runner.parent.launch.forkserver_launcher import ForkServerLauncher
    from experiment_runner.parent.launch.subprocess_launcher import SubprocessLauncher

    probes = tmp_path / "probes"
    probes.mkdir()
    # tests/support on PYTHONPATH is an import-time setting: it gets a server of its own.
    common = {"EXPERIMENT_RUNNER_PLUGINS": "xla_env_probe", "XLA_ENV_PROBE_DIR": str(probes),
              "PYTHONPATH": os.pathsep.join(filter(None, [str(SUPPORT), os.environ.get("PYTHONPATH")]))}
    options = RunOptions(repeat=1, warmup_iterations=1)

    def launch(launcher: SubprocessLauncher, name: str, extra: dict[str, str]) -> dict:
        # Functionalization is disabled by default (as in the reference); "without" the
        # variable is an experiment that enables it.
        config = ExperimentConfig(accelerator="cpu", xla="PJRT", xla_flags=None, dynamo=None, test="eval",
                                  precision="fp32",
                                  enable_functionalization=variable == "XLA_DISABLE_FUNCTIONALIZATION" and not extra)
        task = Task(Experiment("dummy", "dummy", config), options, str(tmp_path / name))
        outcome = launcher.launch(task, tmp_path / f"{name}.log", {**common, **extra})
        assert outcome.launcher == launcher.name and outcome.result.result.status == "ok", outcome.log_tail
        return json.loads((probes / f"{name}.json").read_text())

    forkserver = ForkServerLauncher()
    try:
        forked_with = launch(forkserver, "forked-with", {variable: "1"})
        forked_without = launch(forkserver, "forked-without", {})
        assert len([kind for kind in forkserver.servers if kind.xla]) == 1, "one XLA server served both"
    finally:
        forkserver.close()
    fresh_with = launch(SubprocessLauncher(), "fresh-with", {variable: "1"})
    assert forked_with[observed] == fresh_with[observed] != forked_without[observed]
    assert not forked_with["runtime_started_before_first_use"]
