"""The parent ↔ worker protocol.

The parent writes a `Task` as JSON into the experiment's folder and starts
`python -m experiment_runner.child TASK_PATH`. The worker writes its result, a typed
`ChildResult`, as `result.json` beside it (atomically: temporary file, then rename) and
exits. The parent never parses the child's stdout; a child that dies before writing its
result is classified from its exit status and log instead.

Every launch is an attempt with its own id. The folder's result files are removed before
the launch and every result carries the attempt id, which the parent checks, so a retry
that dies without a result can never be recorded with an earlier attempt's result.
With --verify the worker also publishes an interim result (`final: false`) right after
timing, so that a death during verification keeps the timings.

Both files say which version of this protocol wrote them (`protocol`): a parent and a child, or a
Ray driver and a node, may run different checkouts; the child refuses a task of another version,
the Ray driver a node of another version, and the parent a result of another version (the
attempt's record is then an error naming both), each in one line, rather than misread a field.

While it works, the worker keeps a `phase` file in the folder saying what it is doing
(`PHASES`); the parent reads it only to tell a user what a running experiment is busy with.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from experiment_runner.core.matrix import Experiment
from experiment_runner.core.options import RunOptions

# What a running worker can be busy with, in order; "warm-up" holds dynamo's compilation.
PHASES: tuple[str, ...] = ("loading", "warm-up", "timing", "timing pairs", "instrumenting", "verifying",
                          "counting graph breaks as the harness")
PHASE_FILE = "phase"
# The version of task.json and result.json; raise it whenever either changes shape.
# 2: result.json carries every ChildResult field, null where the child did not get that far.
PROTOCOL_VERSION = 2


class ProtocolMismatch(ValueError):
    """A task or result written by a checkout that speaks another version of this protocol."""


def check_protocol(data: dict[str, Any], what: str) -> None:
    """Refuse what another version of the protocol wrote, naming both versions."""
    found = data.get("protocol")
    if found != PROTOCOL_VERSION:
        raise ProtocolMismatch(f"{what} was written by protocol version {found}, and this side speaks "
                               f"{PROTOCOL_VERSION}: the two run different checkouts of experiment_runner")
# The AOT Inductor package an attempt's child compiles into its folder (child.driver): as large
# as the model's weights and no evidence, so the parent removes it once the attempt is over.
AOT_PACKAGE = "aot_inductor.pt2"


@dataclass(frozen=True)
class Task:
    experiment: Experiment
    options: RunOptions
    artifacts_dir: str  # absolute; the worker writes artifacts and result.json here
    attempt_id: str = field(default_factory=lambda: secrets.token_hex(8))

    @property
    def result_path(self) -> Path:
        return Path(self.artifacts_dir) / "result.json"

    @property
    def interim_path(self) -> Path:
        return Path(self.artifacts_dir) / "result.interim.json"

    def clear_results(self) -> None:
        """Remove every result file an earlier attempt may have left in the folder."""
        for path in (self.result_path, self.interim_path, self.phase_path):
            for stale in (path, path.with_suffix(".tmp")):
                stale.unlink(missing_ok=True)

    @property
    def phase_path(self) -> Path:
        return Path(self.artifacts_dir) / PHASE_FILE

    @property
    def task_path(self) -> Path:
        return Path(self.artifacts_dir) / "task.json"

    def to_dict(self) -> dict:
        return {"protocol": PROTOCOL_VERSION, "experiment": self.experiment.to_dict(),
                "options": asdict(self.options), "artifacts_dir": self.artifacts_dir, "attempt_id": self.attempt_id}

    @classmethod
    def from_dict(cls, data: dict) -> "Task":
        """The task `data` describes; ProtocolMismatch when another version of the protocol wrote it."""
        check_protocol(data, "the task")
        return cls(Experiment.from_dict(data["experiment"]), RunOptions.from_dict(data["options"]),
                   data["artifacts_dir"], data["attempt_id"])

    def write(self) -> Path:
        """Write task.json; an OSError always names the file (a failed write alone does not)."""
        path = self.task_path
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.write_text(json.dumps(self.to_dict()))
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        return path

    @classmethod
    def read(cls, path: Path) -> "Task":
        return cls.from_dict(json.loads(Path(path).read_text()))


@dataclass
class ChildResult:
    """What the worker found, as result.json carries it (less the stamps `publish_result` adds).

    Built up by `run_task` as the experiment gets further, so it is mutable; a field the
    child never reached stays at its default, which the parent reads as "not measured".
    """

    status: str  # ok, skipped, oom or error: how the experiment ended inside the child
    batch_size: int | None  # the batch the model ran with (the config's, None for the suite's, until it loaded)
    precision: str  # the precision the config asked for
    environment: dict[str, Any] = field(default_factory=dict)  # host, libraries, model provenance: the child's view
    timings: dict[str, float] = field(default_factory=dict)  # seconds per phase of its life (record.TIMING_PHASES)
    error: dict[str, Any] | None = None  # type, message, traceback tail (and phase) of a failure
    metrics: dict[str, Any] = field(default_factory=dict)  # the timed runs' figures and the instrumentation's
    source: str | None = None  # where the model came from (suite, builtin), once it loaded
    accelerator_model: str | None = None  # the device's product name, once the runtime is up
    verification: dict[str, Any] | None = None  # the verifier's verdict with --verify
    verification_code: str | None = None  # the verdict's one word, set once the outcome is known
    artifacts: dict[str, str] = field(default_factory=dict)  # name -> path under the attempt's folder
    loss: str | None = None  # train only: how the step computes its loss
    optimizer: str | None = None  # train only: the optimizer that steps
    iterations_per_run: int | None = None  # the count the timed runs used; None until they ran
    iterations_per_run_calibrated: bool | None = None  # whether that count was calibrated; None until then

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values, shallowly: metrics may hold what only `default=str` writes."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ChildResult":
        """The result `data` holds; keys that are not fields (the stamps) are left out."""
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class PublishedResult:
    """One result file of an attempt, as the parent reads it: the child's result, and whether it is
    the final one or the interim one published after timing, before verification."""

    result: ChildResult
    final: bool = True

    @classmethod
    def from_file(cls, data: dict[str, Any]) -> "PublishedResult":
        """A result.json's content, its protocol and attempt already checked."""
        return cls(ChildResult.from_dict(data), bool(data.get("final", True)))


def write_result(path: Path, result: dict[str, Any]) -> None:
    """Atomically publish a result file: the parent sees all of it or none."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, default=str))
    os.replace(tmp, path)


def stamped(task: Task, result: ChildResult, final: bool = True) -> dict[str, Any]:
    """The result as result.json carries it: its fields, this protocol's version and the attempt."""
    return {**result.to_dict(), "protocol": PROTOCOL_VERSION, "attempt_id": task.attempt_id, "final": final}


def publish_result(task: Task, result: ChildResult, final: bool = True) -> None:
    """The worker's result for this attempt: the interim one after timing, the final one at the end."""
    write_result(task.result_path if final else task.interim_path, stamped(task, result, final))


def write_phase(task: Task, phase: str) -> None:
    """Say what the worker is doing now (atomically, like a result)."""
    tmp = task.phase_path.with_suffix(".tmp")
    tmp.write_text(phase)
    os.replace(tmp, task.phase_path)


def read_phase(artifacts_dir: Path) -> tuple[str, float] | None:
    """What the worker in this folder said it is doing, and since when (the file's mtime)."""
    path = Path(artifacts_dir) / PHASE_FILE
    try:
        return path.read_text().strip(), path.stat().st_mtime
    except OSError:
        return None


def read_result(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_attempt_result(task: Task) -> PublishedResult | None:
    """The newest result written by this attempt (final, else interim), or None.

    A result file with another attempt's id is ignored: it describes another attempt. One this
    attempt's child wrote in another version of the protocol (a child of another checkout, found
    first on its PYTHONPATH) is not read field by field, where a renamed field would read as "not
    measured": the attempt is an error that names both versions.
    """
    for path in (task.result_path, task.interim_path):
        result = read_result(path)
        if isinstance(result, dict) and result.get("attempt_id") == task.attempt_id:
            try:
                check_protocol(result, f"the child's {path.name}")
                return PublishedResult.from_file(result)
            except (ProtocolMismatch, TypeError) as exc:
                message = str(exc) if isinstance(exc, ProtocolMismatch) else (
                    f"the child's {path.name} does not hold a result of protocol version {PROTOCOL_VERSION}: {exc}")
                return PublishedResult(ChildResult(status="error", batch_size=None,
                                                   precision=task.experiment.config.precision,
                                                   error={"type": "ProtocolMismatch", "message": message}))
    return None
