"""docs/adding-a-suite.md's worked plugin suite is code: run it through the real command line."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "adding-a-suite.md"


def plugin_source() -> str:
    """The fenced python block right after the page's `docs:plugin-suite` marker."""
    match = re.search(r"<!-- docs:plugin-suite -->\n```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert match, "docs/adding-a-suite.md lost its marked plugin example"
    return match.group(1)


@pytest.mark.e2e
def test_the_documented_plugin_suite_runs_through_the_cli(tmp_path, run_cli):
    source = plugin_source()
    # The documented plugin API: what a user's plugin written against these docs imports.
    assert "from benchmark_models.base import LoadRequest" in source
    assert "from benchmark_models.model import BenchmarkModel" in source
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "my_suite.py").write_text(source)
    env = {"EXPERIMENT_RUNNER_SUITES": "my_suite=my_suite:MySuite",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(plugins), os.environ.get("PYTHONPATH")]))}

    dry = run_cli("--suite-name=my_suite", "--dry-run", "--accelerator=cpu", "--dynamo=None", env=env)
    assert dry.returncode == 0, dry.stderr
    assert "tiny_mlp" in dry.stdout and "tiny_conv" in dry.stdout

    run = run_cli("--suite-name=my_suite", "--accelerator=cpu", "--dynamo=None", "--test=eval", "--repeat=1",
                  "--warmup-iterations=1", env=env)
    assert run.returncode == 0, run.stderr
    records = run.records()
    assert sorted(r["model"]["model_name"] for r in records) == ["tiny_conv", "tiny_mlp"]
    for record in records:
        assert record["status"] == "ok", record["error"]
        assert record["model"] == {"suite_name": "my_suite", "model_name": record["model"]["model_name"],
                                   "source": "plugin"}
        assert record["experiment"]["batch_size"] == {"tiny_mlp": 16, "tiny_conv": 4}[record["model"]["model_name"]]
