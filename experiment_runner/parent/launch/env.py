"""The environment an experiment's child starts with, set by the parent before launch."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from experiment_runner.core.compiler_caches import share_precompiled_headers
from experiment_runner.core.environment import PJRT_DEVICE
from experiment_runner.core.process_groups import ATTEMPT_TOKEN_ENV, RUN_TOKEN_ENV
from experiment_runner.core.protocol import AOT_PACKAGE, Task
from experiment_runner.core.xla_dumps import artifact_environment
from experiment_runner.parent.launch.reaper import RUN_TOKEN

# Variables a parent shell may carry that would silently change an experiment.
INHERITED_XLA_VARS = ("XLA_FLAGS", "PJRT_DEVICE", "XLA_USE_BF16", "XLA_USE_FP16", "XLA_DOWNCAST_BF16",
                       "XLA_SAVE_TENSORS_FMT", "XLA_SAVE_TENSORS_FILE", "XLA_DISABLE_FUNCTIONALIZATION")


def child_environment(task: Task, base: dict[str, str] | None = None,
                      extra: dict[str, str] | None = None) -> dict[str, str]:
    """The experiment's environment: inherited XLA settings cleaned, then set per experiment.

    Compiler caches and temporary files go to the experiment's own scratch folder, so
    every experiment compiles cold and leaves nothing behind in the user's home (except
    inductor's precompiled headers, shared machine-wide: core/compiler_caches.py). The run's
    and the attempt's tokens let the runner and its reaper find every process the
    experiment started (core.process_groups).
    """
    env = dict(os.environ if base is None else base)
    for name in INHERITED_XLA_VARS:
        env.pop(name, None)
    config = task.experiment.config
    scratch = scratch_folder(task.artifacts_dir)
    env.update({
        "PYTHONUNBUFFERED": "1",
        "PYTHONFAULTHANDLER": "1",  # a segfault leaves the Python stack in the log
        "TORCHINDUCTOR_CACHE_DIR": str(scratch / "inductor"),
        "TRITON_CACHE_DIR": str(scratch / "triton"),
        "TMPDIR": str(scratch / "tmp"),
        RUN_TOKEN_ENV: RUN_TOKEN,
        ATTEMPT_TOKEN_ENV: task.attempt_id,
    })
    if config.xla_flags:
        env["XLA_FLAGS"] = config.xla_flags  # every experiment that has them, as in the reference
    if config.xla is not None:
        env["PJRT_DEVICE"] = PJRT_DEVICE[config.accelerator]
        if not config.enable_functionalization:
            env["XLA_DISABLE_FUNCTIONALIZATION"] = "1"
        env.update(artifact_environment(task.options, task.artifacts_dir, env.get("XLA_FLAGS")))
    env.update(extra or {})
    return env


def scratch_folder(artifacts_dir: str | Path) -> Path:
    return Path(artifacts_dir) / "scratch"


def make_scratch(artifacts_dir: str | Path) -> None:
    """The experiment's TMPDIR, its precompiled-header folder linked to the machine's."""
    tmp = scratch_folder(artifacts_dir) / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    share_precompiled_headers(tmp, tempfile.gettempdir())


def remove_leftovers(artifacts_dir: Path) -> None:
    """Drop what an attempt wrote that is not evidence, once it is over (recorded, or dead with
    its runner): its scratch folder (compiler caches; TMPDIR, where AOT Inductor unpacks its
    packages; the link to the shared headers goes, the headers stay) and its AOT Inductor
    package (as large as the weights). Its log, results and dumps stay."""
    shutil.rmtree(scratch_folder(artifacts_dir), ignore_errors=True)
    (Path(artifacts_dir) / AOT_PACKAGE).unlink(missing_ok=True)
