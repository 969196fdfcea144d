"""The parent ↔ worker protocol.

The parent writes a `Task` as JSON into the experiment's folder and starts
`python -m experiment_runner.child TASK_PATH`. The worker writes its `result.json`
beside it (atomically: temporary file, then rename) and exits. The parent never parses
the child's stdout; a child that dies before writing its result is classified from its
exit status and log instead.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from experiment_runner.core.matrix import Experiment
from experiment_runner.core.options import RunOptions


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
