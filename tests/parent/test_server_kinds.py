"""Which fork server serves which experiment: grouped by the settings fixed at import."""

from __future__ import annotations

from pathlib import Path

from experiment_runner.core.matrix import Experiment, ExperimentConfig
from experiment_runner.core.options import RunOptions
from experiment_runner.core.protocol import Task
from experiment_runner.parent.launch.env import child_environment
from experiment_runner.parent.launch.forkserver import server_environment, server_kind


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
