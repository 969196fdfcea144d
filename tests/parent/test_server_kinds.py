"""Which fork server serves which experiment: grouped by the settings fixed at import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
from conftest import CliRun

from experiment_runner.child import forkserver as server_side
from experiment_runner.core.matrix import Experiment, ExperimentConfig
from experiment_runner.core.options import RunOptions
from experiment_runner.core.protocol import Task
from experiment_runner.parent.launch.env import child_environment
from experiment_runner.parent.launch.forkserver_launcher import children_import_dynamo, server_environment, server_kind


def _task(tmp_path: Path, xla: str | None, **options: object) -> Task:
    config = ExperimentConfig(accelerator="cpu", xla=xla, xla_flags="--xla_cpu_use_thunk_runtime=false" if xla
                              else None, dynamo=None, test="eval", precision="fp32")
    return Task(Experiment("dummy", "dummy", config), RunOptions(**options), str(tmp_path))  # type: ignore[arg-type]


def test_xla_experiments_share_one_server_whatever_their_dumps_and_flags(tmp_path: Path) -> None:
    base = {"PATH": "/usr/bin", "PYTHONPATH": "/src", "OMP_NUM_THREADS": "2"}
    plain = _task(tmp_path / "a", "PJRT")
    dumping = _task(tmp_path / "b", "PJRT", dump_hlo=True, save_ir_format="hlo")
    kinds = {server_kind(t, child_environment(t, base=base, extra=extra))
             for t, extra in ((plain, None), (dumping, {"XLA_DISABLE_FUNCTIONALIZATION": "1"}),
                              (plain, {"XLA_USE_BF16": "1"}))}
    assert len(kinds) == 1
    (kind,) = kinds
    assert kind.xla and dict(kind.settings) == {"PYTHONPATH": "/src", "OMP_NUM_THREADS": "2"}


def test_import_time_settings_and_torch_xla_make_kinds_of_their_own(tmp_path: Path) -> None:
    base = {"PATH": "/usr/bin"}
    xla, eager = _task(tmp_path / "a", "PJRT"), _task(tmp_path / "b", None)
    kind = server_kind(xla, child_environment(xla, base=base))
    assert server_kind(eager, child_environment(eager, base=base)) != kind, "torch_xla is not imported for eager"
    for name in ("XLA_REGISTER_INSTALLED_PLUGINS", "TF_CPP_MIN_LOG_LEVEL", "LIBTPU_INIT_ARGS", "OMP_NUM_THREADS"):
        other = server_kind(xla, child_environment(xla, base=base, extra={name: "0"}))
        assert other != kind and (name, "0") in other.settings
        assert server_environment(other, base={"PATH": "/usr/bin", "OMP_NUM_THREADS": "8"}) == {
            "PATH": "/usr/bin", name: "0"}, "the server imports under the kind's settings, not the parent's"
    # Per experiment and read at first use: the PJRT device, dumps, compiler caches.
    assert not any(k.startswith(("PJRT", "XLA_FLAGS", "XLA_SAVE", "TORCHINDUCTOR")) for k, _ in kind.settings)


@pytest.mark.e2e
def test_servers_preload_torch_dynamo_only_for_runs_whose_children_import_it(tmp_path: Path) -> None:
    assert children_import_dynamo(None, None) and children_import_dynamo([None, "inductor"], ["eval"])
    assert children_import_dynamo([None], ["eval", "train"]) and not children_import_dynamo([None], ["eval"])
    eager = _task(tmp_path, None)
    assert not server_kind(eager, {}, dynamo=False).dynamo and server_kind(_task(tmp_path, "PJRT"), {}, False).dynamo
    probe = "import sys; [__import__(m) for m in sys.argv[1:]]; print('torch._dynamo' in sys.modules)"
    loaded = [subprocess.run([sys.executable, "-c", probe, *modules], capture_output=True, text=True,
                             check=True).stdout.strip() for modules in
              (server_side.PRELOAD, server_side.PRELOAD + server_side.DYNAMO_PRELOAD)]
    assert loaded == ["False", "True"], "the light server's preload must not pull torch._dynamo in"


@pytest.mark.e2e
@pytest.mark.parametrize(("test", "imported"), [("eval", False), ("train", True)])
def test_an_eager_child_imports_torch_dynamo_only_to_train(run_cli: Callable[..., CliRun], test: str,
                                                          imported: bool) -> None:
    """What the light server relies on: an eager inference child never imports torch._dynamo (else
    every such experiment would pay the import), and a training one does (so the preload pays off)."""
    run = run_cli("--suite-name=faulty", "--filter=^quick_00$", "--accelerator=cpu", "--dynamo=None",
                  f"--test={test}", "--repeat=1", "--launcher=subprocess", "--no-progress-bar",
                  env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert run.returncode == 0, run.stderr
    (record,) = [json.loads(line) for line in run.results_path.read_text().splitlines()]
    assert record["status"] == "ok", record["error"]
    log = (run.output_dir / record["artifacts"]["log"]).read_text()
    assert "| torch\n" in log, "the import profile is in the child's log"
    assert ("| torch._dynamo\n" in log) is imported
