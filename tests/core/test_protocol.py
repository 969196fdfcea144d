"""task.json and result.json say which protocol version wrote them; a side of another version is
refused in one line, whether it is a child given an older parent's task or a Ray node running an
older checkout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from experiment_runner.core.matrix import Experiment, ExperimentConfig
from experiment_runner.core.options import RunOptions
from experiment_runner.core.protocol import PROTOCOL_VERSION, ChildResult, ProtocolMismatch, Task, publish_result
from experiment_runner.parent.executors.ray import other_protocols


def task(tmp_path: Path) -> Task:
    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo=None, test="eval",
                              precision="fp32")
    return Task(Experiment("dummy", "dummy", config), RunOptions(), str(tmp_path))


def test_a_task_and_its_result_carry_the_protocol_and_a_task_of_another_is_refused(tmp_path: Path) -> None:
    written = json.loads(task(tmp_path).write().read_text())
    assert written["protocol"] == PROTOCOL_VERSION
    assert Task.from_dict(written).experiment.model_name == "dummy"
    with pytest.raises(ProtocolMismatch, match=f"protocol version 0, and this side speaks {PROTOCOL_VERSION}"):
        Task.from_dict({**written, "protocol": 0})
    with pytest.raises(ProtocolMismatch, match="protocol version None"):
        Task.from_dict({k: v for k, v in written.items() if k != "protocol"})
    publish_result(task(tmp_path), ChildResult("ok", None, "fp32"))
    assert json.loads((tmp_path / "result.json").read_text())["protocol"] == PROTOCOL_VERSION


@pytest.mark.e2e
def test_a_child_given_a_task_of_another_protocol_says_so_in_one_line(tmp_path: Path) -> None:
    path = task(tmp_path).write()
    path.write_text(json.dumps({**json.loads(path.read_text()), "protocol": PROTOCOL_VERSION + 1}))
    child = subprocess.run([sys.executable, "-m", "experiment_runner.child", str(path)], capture_output=True,
                           text=True, timeout=120)
    assert child.returncode == 2 and not (tmp_path / "result.json").exists()
    lines = child.stderr.strip().splitlines()
    assert len(lines) == 1 and "different checkouts of experiment_runner" in lines[0], child.stderr


def test_the_ray_driver_names_the_nodes_of_another_protocol() -> None:
    nodes = [{"hostname": "a", "protocol": PROTOCOL_VERSION}, {"hostname": "c", "protocol": None},
             {"hostname": "b", "protocol": None}]
    assert other_protocols(nodes) == "version None: b, c"
    assert other_protocols(nodes[:1]) == ""
