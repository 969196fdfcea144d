"""The parent ↔ worker protocol.

The parent writes a `Task` as JSON into the experiment's folder and starts
`python -m experiment_runner.worker TASK_PATH`. The worker writes its `result.json`
beside it (atomically: temporary file, then rename) and exits. The parent never parses
the child's stdout; a child that dies before writing its result is classified from its
exit status and log instead.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from experiment_runner.matrix import Experiment


# The IR formats --save-ir-format offers (PyTorch lazy IR text, HLO, StableHLO).
SAVE_IR_FORMATS: tuple[str, ...] = ("text", "hlo", "stablehlo")


@dataclass(frozen=True)
class RunOptions:
    """Per-experiment options from the command line that the worker needs."""

    repeat: int = 10
    iterations_per_run: int = 1
    warmup_iterations: int = 2
    seed: int = 1337
    randomize_input: bool = False
    collect_full_output: bool = False
    verify: bool = False
    verify_iterations: int = 1
    tolerance: float | None = None
    matmul_precision: str | None = None
    disable_tf32: bool = False
    collect_dynamo_counters: bool = False
    dump_dynamo_counters: bool = False
    profile_cuda_cpu: bool = False
    profile_cuda_cpu_individual_ops: bool = False
    dump_pytorch_profiles: bool = False
    cache_bench: bool = False  # cold then warm compile in fresh processes (experiment_runner.cachebench)
    dump_pytorch_xla_metrics: bool = False
    dump_hlo: bool = False
    save_ir_format: str | None = None

    @classmethod
    def from_dict(cls, data: dict) -> "RunOptions":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class Task:
    experiment: Experiment
    options: RunOptions
    artifacts_dir: str  # absolute; the worker writes artifacts and result.json here

    @property
    def result_path(self) -> Path:
        return Path(self.artifacts_dir) / "result.json"

    @property
    def task_path(self) -> Path:
        return Path(self.artifacts_dir) / "task.json"

    def to_dict(self) -> dict:
        return {"experiment": self.experiment.to_dict(), "options": asdict(self.options),
                "artifacts_dir": self.artifacts_dir}

    @classmethod
    def from_dict(cls, data: dict) -> "Task":
        return cls(Experiment.from_dict(data["experiment"]), RunOptions.from_dict(data["options"]),
                   data["artifacts_dir"])

    def write(self) -> Path:
        path = self.task_path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict()))
        return path

    @classmethod
    def read(cls, path: Path) -> "Task":
        return cls.from_dict(json.loads(Path(path).read_text()))


def write_result(path: Path, result: dict[str, Any]) -> None:
    """Atomically publish the worker's result: the parent sees all of it or none."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, default=str))
    os.replace(tmp, path)


def read_result(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
