"""TorchBench found where users keep it: $TORCHBENCH_DIR, or as the reference runner looks
(./torchbench, ../benchmark, ... up to three parents), and the run says which it used."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmark_models.torchbench import TorchBenchSuite

FAKE_CHECKOUT = Path(__file__).resolve().parents[1] / "fake_torchbenchmark"


@pytest.mark.parametrize("where", ["torchbench", "../benchmark", "../../torchbenchmark_checkout/.."])
def test_a_checkout_near_the_working_directory_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        where: str) -> None:
    work = tmp_path / "a" / "b" / "work"
    work.mkdir(parents=True)
    name = "torchbench" if where == "torchbench" else "benchmark"
    link_parent = work if where == "torchbench" else work.parent
    if where.startswith("../../"):
        link_parent, name = work.parent.parent, "benchmark"
    (link_parent / name).symlink_to(FAKE_CHECKOUT)
    monkeypatch.chdir(work)
    monkeypatch.delenv("TORCHBENCH_DIR", raising=False)
    suite = TorchBenchSuite()
    assert suite.source == "torchbenchmark"
    assert "tiny_mlp" in suite.model_names()
    assert suite.description.startswith("torchbenchmark at ")


def test_torchbench_dir_wins_and_nothing_found_means_builtin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TORCHBENCH_DIR", str(FAKE_CHECKOUT))
    assert TorchBenchSuite().source == "torchbenchmark"
    monkeypatch.delenv("TORCHBENCH_DIR")
    suite = TorchBenchSuite()
    assert suite.source == "builtin" and "llama" in suite.model_names()
    assert "no torchbenchmark found" in suite.description


def test_the_run_names_its_source_first(run_cli, tmp_path: Path) -> None:
    run = run_cli("--suite-name=torchbench", "--filter=^tiny_mlp$", "--accelerator=cpu", "--dynamo=None",
                  "--test=eval", "--repeat=1", env={"TORCHBENCH_DIR": str(FAKE_CHECKOUT)})
    assert run.returncode == 0, run.stderr
    assert run.stderr.startswith("experiment_runner: torchbench: torchbenchmark at ")
    (record,) = run.records()
    assert record["model"]["source"] == "torchbenchmark"
    quiet = run_cli("--suite-name=torchbench", "--filter=^tiny_mlp$", "--accelerator=cpu", "--dynamo=None",
                    "--test=eval", "--repeat=1", "--log-level=warning", "--no-resume",
                    env={"TORCHBENCH_DIR": str(FAKE_CHECKOUT)})
    assert quiet.returncode == 0 and "torchbenchmark at" not in quiet.stderr
