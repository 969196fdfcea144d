"""TorchBench found where users keep it: $TORCHBENCH_DIR, or as the reference runner looks
(./torchbench, ../benchmark, ... up to three parents), and the run says which it used."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiment_runner.core.requirements import install_command
from benchmark_models.torchbench import TorchBenchSuite

FAKE_CHECKOUT = Path(__file__).resolve().parents[1] / "fake_torchbenchmark"


@pytest.mark.e2e
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


@pytest.mark.e2e
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


def plan_for(argv: list[str], models: list[str], caps) -> dict[tuple, str | None]:
    """(model, accelerator, xla, dynamo, test, precision) → skip reason, for a simulated host."""
    from experiment_runner.cli import parse_config
    from experiment_runner.parent.session import build_plan
    from experiment_runner.parent.suites import suite_catalog

    config = parse_config(["--suite-name=torchbench", *argv])
    plan = build_plan(config.matrix, suite_catalog("torchbench"), models, caps)
    return {(p.experiment.model_name, p.experiment.config.accelerator, p.experiment.config.xla,
             p.experiment.config.dynamo, p.experiment.config.test, p.experiment.config.precision): p.skip_reason
            for p in plan.planned}


@pytest.mark.e2e
def test_the_references_rules_apply_to_a_checkout_and_only_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchbench.yaml's skips (everywhere, per device, per test), PyTorch/XLA's deny list, and the
    fp16/AMP inference lists (AMP only on GPUs and TPUs), as data; the built-in set keeps its own rules."""
    from experiment_runner.core.matrix import HostCapabilities

    cuda = HostCapabilities(cuda=True, cuda_device_count=1, torch_xla=True,
                            xla_accelerators=frozenset({"cpu", "cuda"}))
    models = ["hf_Bert", "moco", "llama", "cm3leon_generate", "vision_maskrcnn", "tts_angular", "tiny_mlp"]
    argv = ["--accelerator=cpu", "--accelerator=cuda", "--xla=None", "--xla=PJRT", "--dynamo=None"]
    monkeypatch.setenv("TORCHBENCH_DIR", str(FAKE_CHECKOUT))
    plan = plan_for(argv, models, cuda)
    skipped = {key: reason for key, reason in plan.items() if reason}
    assert {key[0] for key in skipped} == {"hf_Bert", "moco", "llama", "cm3leon_generate"}
    assert all("skip.all" in reason for key, reason in skipped.items() if key[0] == "hf_Bert")
    assert {key[1] for key in skipped if key[0] == "moco"} == {"cpu"}  # skip.device.cpu
    assert {key[4] for key in skipped if key[0] == "llama"} == {"train"}  # skip.test.training
    assert {(k[1], k[2], k[3]) for k in skipped if k[0] == "cm3leon_generate" and k[1] == "cuda" and k[4] == "eval"
            } == {("cuda", "PJRT", None)}  # the deny list: its lazy tensor eval times out
    precisions = {(k[0], k[1], k[4]): k[5] for k in plan}
    assert precisions[("vision_maskrcnn", "cuda", "eval")] == "fp16"
    assert precisions[("tts_angular", "cuda", "eval")] == "amp"
    assert precisions[("tiny_mlp", "cuda", "eval")] == "bf16"
    assert precisions[("vision_maskrcnn", "cpu", "eval")] == "fp16", "the reference's fp16 list holds on a CPU"
    assert precisions[("tts_angular", "cpu", "eval")] == "bf16", "no AMP on a CPU: the bf16 default"
    assert precisions[("tiny_mlp", "cpu", "eval")] == "bf16"
    assert precisions[("tiny_mlp", "cpu", "train")] == "fp32"
    explicit = plan_for([*argv, "--precision=bf16"], ["vision_maskrcnn"], cuda)
    assert {k[5] for k in explicit} == {"bf16"}

    monkeypatch.delenv("TORCHBENCH_DIR")
    builtin = plan_for(argv, ["llama"], cuda)
    assert not any(builtin.values()), "torchbench.yaml's lists are not for the built-in models"


def test_a_checkouts_listing_is_every_folder_and_its_models_those_with_code(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference slices torchbenchmark._list_model_paths (every folder under models/, sorted
    as strings) into shards; only folders holding a model can run."""
    models = tmp_path / "checkout" / "torchbenchmark" / "models"
    for name in ("alexnet", "BERT_pytorch", "__pycache__", "not_a_model"):
        (models / name).mkdir(parents=True)
    for name in ("alexnet", "BERT_pytorch"):
        (models / name / "__init__.py").write_text("")
    (models.parent / "__init__.py").write_text("")
    monkeypatch.setenv("TORCHBENCH_DIR", str(models.parent.parent))
    suite = TorchBenchSuite()
    assert suite.model_names() == ["BERT_pytorch", "alexnet"]
    assert suite.listing() == ["BERT_pytorch", "__pycache__", "alexnet", "not_a_model"]


@pytest.mark.e2e
def test_a_checkout_whose_own_dependency_is_missing_is_one_line_and_no_records(run_cli, tmp_path: Path) -> None:
    """torchbenchmark imports psutil (and more) itself: one missing package fails every model,
    so it is found once, before planning, instead of in every experiment's record."""
    import shutil

    checkout = tmp_path / "checkout"
    shutil.copytree(FAKE_CHECKOUT, checkout)
    init = checkout / "torchbenchmark" / "__init__.py"
    init.write_text("import surely_not_installed_pkg  # as psutil is, for the real torchbenchmark\n" + init.read_text())
    run = run_cli("--suite-name=torchbench", "--accelerator=cpu", "--dynamo=None", "--test=eval",
                  env={"TORCHBENCH_DIR": str(checkout)})
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().splitlines()[-1] == (
        "experiment_runner: error: --suite-name=torchbench needs surely_not_installed_pkg, not installed here; "
        f"install with: {install_command(['surely_not_installed_pkg'])}")
    assert not run.results_path.exists()


@pytest.mark.e2e
def test_a_checkout_whose_own_dependency_is_broken_is_one_line_naming_it(run_cli, tmp_path: Path) -> None:
    """psutil installed but broken (an ImportError that is not ModuleNotFoundError) fails every
    model alike: one parent-side line naming the package and how to reinstall it, exit 2."""
    import shutil

    checkout = tmp_path / "checkout"
    shutil.copytree(FAKE_CHECKOUT, checkout)
    broken = tmp_path / "site" / "broken_dep_pkg"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError(\"cannot import name '_psplatform' from partially "
                                        "initialized module 'broken_dep_pkg'\", name='broken_dep_pkg')\n")
    init = checkout / "torchbenchmark" / "__init__.py"
    init.write_text("import broken_dep_pkg  # as psutil is, for the real torchbenchmark\n" + init.read_text())
    run = run_cli("--suite-name=torchbench", "--accelerator=cpu", "--dynamo=None", "--test=eval",
                  env={"TORCHBENCH_DIR": str(checkout), "PYTHONPATH": str(tmp_path / "site")})
    assert run.returncode == 2, run.stderr
    line = run.stderr.strip().splitlines()[-1]
    assert line.startswith("experiment_runner: error: torchbenchmark (") and "broken_dep_pkg, which is installed " \
        "but fails to import (cannot import name '_psplatform'" in line, line
    assert line.endswith("-m pip install --force-reinstall broken_dep_pkg")
    assert not run.results_path.exists()
