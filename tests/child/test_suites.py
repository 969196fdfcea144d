"""Model suites: catalogs without torch, real models through the real CLI, the torchbench
adapter against a fake checkout, skips as data, and a slow sweep over every listed model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest
from conftest import FAULTY_SUITE, SUPPORT

from benchmark_models.base import LoadRequest, ModelSkipped
from benchmark_models.data_files import read_data
from benchmark_models.optional import MissingDependency
from benchmark_models.registry import get_suite
from benchmark_models.torchbench import TORCHBENCH_DIR_ENV

FAKE_TORCHBENCH = Path(__file__).parents[1] / "fake_torchbenchmark"
DATA_FILES = {"torchbench": "torchbench.json", "huggingface": "huggingface.json", "timm": "timm.json"}
QUICK_RUN = ("--accelerator=cpu", "--test=eval", "--dynamo=None", "--batch-size=1", "--repeat=2",
             "--warmup-iterations=1")


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    output_dir: Path

    def records(self) -> list[dict]:
        return [json.loads(line) for line in (self.output_dir / "results.jsonl").read_text().splitlines() if line]


@pytest.fixture(scope="module")
def capabilities_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private host-capabilities cache: the probe runs once for the module, not per test."""
    return tmp_path_factory.mktemp("xdg-cache")


@pytest.fixture
def run_cli(tmp_path: Path, capabilities_cache: Path) -> Callable[..., Run]:
    """run_cli(*args, env=None) runs `python -m experiment_runner` with its own output folder."""

    def run(*args: str, env: dict[str, str] | None = None) -> Run:
        output_dir = tmp_path / "output"
        full_env = dict(os.environ, XDG_CACHE_HOME=str(capabilities_cache), **(env or {}))
        proc = subprocess.run([sys.executable, "-m", "experiment_runner", *args, f"--output-dirname={output_dir}"],
                              capture_output=True, text=True, env=full_env, timeout=600)
        return Run(proc.returncode, proc.stdout, proc.stderr, output_dir)

    return run


@pytest.fixture(autouse=True)
def offline_builtin_torchbench(monkeypatch: pytest.MonkeyPatch) -> None:
    """No downloads, ever; and the built-in torchbench set unless a test points at a checkout."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv(TORCHBENCH_DIR_ENV, raising=False)


def listed(suite: str) -> list[str]:
    return [m["name"] for m in read_data(DATA_FILES[suite])["models"]]


def ok_record(run: Run, suite: str, model: str) -> dict:
    assert run.returncode == 0, run.stderr
    records = run.records()
    assert len(records) == 1, records
    record = records[0]
    assert record["status"] == "ok", record["error"]
    assert record["model"]["suite_name"] == suite and record["model"]["model_name"] == model
    assert record["experiment"]["batch_size"] == 1
    assert record["experiment"]["precision"] == "bf16", \
        "the reference's eval precision, bf16, is the default and recorded"
    assert len(record["metrics"]["per_iter_time"]) == 2
    return record


@pytest.mark.e2e
def test_catalogs_never_import_torch():
    """The parent lists models and skips from data files (and a checkout's folders) only."""
    code = (
        "import sys\n"
        "from benchmark_models.registry import get_suite\n"
        "for name in ('torchbench', 'huggingface', 'timm'):\n"
        "    suite = get_suite(name)\n"
        "    assert suite.model_names() and suite.skip_rules() is not None and suite.source\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'timm', 'torchvision', 'torchbenchmark')\n"
        "               if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    for extra in ({}, {TORCHBENCH_DIR_ENV: str(FAKE_TORCHBENCH)}):
        env = {k: v for k, v in os.environ.items() if k != TORCHBENCH_DIR_ENV} | extra
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr


@pytest.mark.e2e
@pytest.mark.parametrize("suite", sorted(DATA_FILES))
def test_dry_run_lists_every_model_of_the_data_file(run_cli, suite):
    run = run_cli(f"--suite-name={suite}", "--dry-run", "--accelerator=cpu", "--dynamo=None", "--test=eval")
    assert run.returncode == 0, run.stderr
    shown = {line.split(". ", 1)[1].split(":", 1)[0] for line in run.stdout.splitlines() if ". " in line}
    assert shown == set(listed(suite))


@pytest.mark.e2e
def test_list_models_shows_each_models_batch_sizes_source_and_skip_rule(run_cli):
    from benchmark_models.base import harness_batch_size

    run = run_cli("--suite-name=huggingface", "--list-models", "--accelerator=cpu")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith(f"huggingface: {len(listed('huggingface'))} model(s)")
    rows = {line.split()[0]: line for line in lines[2:-1]}
    assert set(rows) == set(listed("huggingface")) and len(rows) == 55
    for entry in read_data(DATA_FILES["huggingface"])["models"]:
        expected = [str(harness_batch_size(entry, LoadRequest(entry["name"], test, "cpu", "cpu", "fp32")))
                    for test in ("eval", "train")]
        assert rows[entry["name"]].split()[1:5] == ["cpu", *expected, "transformers"], rows[entry["name"]]
    assert rows["GPTJForCausalLM"].endswith("(skip.all: fails even at batch size 1)")
    pruned = read_data(DATA_FILES["huggingface"])["rules"]["pruned"]["models"]
    assert len(pruned) == 16
    for model in pruned:
        assert rows[model].endswith("by pytorch/pytorch#164815 (2025-10-08), so its dashboard no longer runs it; "
                                    "--no-skip runs it"), rows[model]
    assert rows["BertForMaskedLM"].split()[-1] == "transformers", "nothing skips it on cpu"
    assert not (run.output_dir / "results.jsonl").exists()

    run = run_cli("--suite-name=faulty", "--list-models", "--accelerator=cpu", "--test=eval", "--filter=^quick_0[01]$",
                  env={"PYTHONPATH": os.pathsep.join(filter(None, [str(SUPPORT), os.environ.get("PYTHONPATH")])),
                       "EXPERIMENT_RUNNER_SUITES": FAULTY_SUITE})
    assert run.returncode == 0, run.stderr
    assert [line.split() for line in run.stdout.splitlines()[2:4]] == [["quick_00", "cpu", "own", "builtin"],
                                                                       ["quick_01", "cpu", "own", "builtin"]]
    run = run_cli("--suite-name=timm", "--list-models", "--accelerator=cpu", "--batch-size=3", "--test=train")
    assert run.returncode == 0, run.stderr
    assert {line.split()[2] for line in run.stdout.splitlines()[2:-1]} == {"3"}


@pytest.mark.e2e
def test_a_model_too_big_for_the_host_is_skipped_before_it_is_built(run_cli):
    """Sized on the meta device in the child: a `skipped` record with the estimate and the
    memory it exceeds, not an out-of-memory kill; --no-skip builds it for real (and fails)."""
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(SUPPORT), os.environ.get("PYTHONPATH")])),
           "EXPERIMENT_RUNNER_SUITES": "sized=faulty_suite:SizedSuite"}
    run = run_cli("--suite-name=sized", *QUICK_RUN, env=env)
    assert run.returncode == 0, run.stderr
    records = {r["model"]["model_name"]: r for r in run.records()}
    assert records["small"]["status"] == "ok"
    huge = records["huge"]
    assert huge["status"] == "skipped" and huge["error"]["type"] == "ModelSkipped", huge
    assert huge["error"]["message"].startswith(
        "its weights alone need 4096.0 GiB (1,099,511,627,776 parameters built in float32), more than ")
    assert huge["error"]["message"].endswith("; --no-skip runs it anyway")

    run = run_cli("--suite-name=sized", "--filter=^huge$", "--no-skip", *QUICK_RUN, env=env)
    (record,) = run.records()[-1:]
    assert record["status"] in ("error", "oom") and "weights alone" not in (record["error"]["message"] or "")


def test_data_files_cover_the_required_models_with_cpu_batch_sizes():
    required = {"llama", "nanogpt", "BERT_pytorch", "dlrm", "resnet50", "alexnet", "densenet121", "mnasnet1_0",
                "mobilenet_v2", "mobilenet_v3_large", "resnet18", "resnet152", "resnext50_32x4d",
                "shufflenet_v2_x1_0", "squeezenet1_1", "vgg16"}
    assert required <= set(listed("torchbench")), required - set(listed("torchbench"))
    for entry in read_data(DATA_FILES["torchbench"])["models"]:
        for table in entry["batch_size"].values():
            assert table["cpu"] >= 1 and table["cuda"] >= 1 and table["tpu"] == table["cuda"], entry["name"]
            if "torchvision" not in entry:  # our own cpu sizes, smaller than an A100's
                assert table["cpu"] <= table["cuda"], entry["name"]


def test_builtin_torchvision_models_build_with_torchbench_inputs():
    """Every torchvision entry names a torchvision constructor that takes torchbench's input
    (built on the meta device: shapes only, no weights initialised)."""
    import torch

    from benchmark_models.torchbench.models import build_torchvision

    entries = [e for e in read_data(DATA_FILES["torchbench"])["models"] if "torchvision" in e]
    assert len(entries) == 11
    for entry in entries:
        with torch.device("meta"):
            built = build_torchvision(entry["torchvision"], 2, "meta")
            assert built.module(*built.args).shape == (2, 1000), entry["name"]


def test_skip_list_is_data_and_no_skip_overrides_it():
    from experiment_runner.core.matrix import HostCapabilities, MatrixChoices, expand
    from benchmark_models import get_suite

    rules = get_suite("torchbench").skip_rules()
    caps = HostCapabilities(torch_xla=True, xla_accelerators=frozenset({"cpu"}))
    choices = MatrixChoices(accelerators=["cpu"], xla=["PJRT"], dynamo=[None])
    plan = expand("torchbench", ["dlrm", "llama"], choices, caps, rules)
    assert [(p.experiment.model_name, p.experiment.config.test, p.skip_reason) for p in plan.planned] == [
        ("dlrm", "eval", None),
        ("dlrm", "train", "dlrm trains sparse embedding gradients, which PyTorch/XLA does not support"),
        ("llama", "eval", None),
        ("llama", "train", None),
    ]
    assert all(p.skip_reason is None for p in expand("torchbench", ["dlrm"], choices, caps, rules, True).planned)


@pytest.mark.e2e
def test_huggingface_bert_runs_end_to_end(run_cli):
    run = run_cli("--suite-name=huggingface", "--filter=^BertForMaskedLM$", *QUICK_RUN)
    assert ok_record(run, "huggingface", "BertForMaskedLM")["model"]["source"] == "transformers"


@pytest.mark.e2e
def test_timm_mobilenetv2_runs_end_to_end(run_cli):
    run = run_cli("--suite-name=timm", "--filter=^mobilenetv2_100$", *QUICK_RUN)
    record = ok_record(run, "timm", "mobilenetv2_100")
    assert record["model"]["source"] == "timm"
    assert record["environment"]["timm"], "the timm version is recorded"


@pytest.mark.e2e
def test_builtin_torchbench_nanogpt_runs_end_to_end(run_cli):
    run = run_cli("--suite-name=torchbench", "--filter=^nanogpt$", *QUICK_RUN)
    assert ok_record(run, "torchbench", "nanogpt")["model"]["source"] == "builtin"


@pytest.mark.e2e
def test_builtin_torchbench_torchvision_model_runs_end_to_end(run_cli):
    run = run_cli("--suite-name=torchbench", "--filter=^squeezenet1_1$", *QUICK_RUN)
    assert ok_record(run, "torchbench", "squeezenet1_1")["model"]["source"] == "builtin"


@pytest.mark.e2e
def test_torchbench_checkout_is_listed_and_loaded_through_its_api(run_cli):
    """Default batch sizes come from the model, NotImplementedError becomes `skipped`; the
    references' rules apply (torchbench.yaml's skips and batch sizes); a missing requirement says
    how to install it; pretrained torchvision weights this host cannot download give random
    weights, said in the record; every record names the checkout."""
    run = run_cli("--suite-name=torchbench", "--accelerator=cpu", "--dynamo=None", "--repeat=1",
                  "--warmup-iterations=1", env={TORCHBENCH_DIR_ENV: str(FAKE_TORCHBENCH)})
    assert run.returncode == 0, run.stderr
    records = {(r["model"]["model_name"], r["experiment"]["test"]): r for r in run.records()}
    models = ("dlrm", "eval_only", "hf_Bert", "needs_extra", "pretrained_vision", "tiny_mlp")
    assert set(records) == {(m, t) for m in models for t in ("eval", "train")}
    assert {r["model"]["source"] for r in records.values()} == {"torchbenchmark"}
    for key, batch_size in ((("tiny_mlp", "eval"), 3), (("tiny_mlp", "train"), 6), (("eval_only", "eval"), 2),
                            (("dlrm", "eval"), 8), (("dlrm", "train"), 1024)):
        assert records[key]["status"] == "ok", records[key]["error"]
        assert records[key]["experiment"]["batch_size"] == batch_size
        assert records[key]["environment"]["torchbenchmark_path"] == str(FAKE_TORCHBENCH.resolve())
    skipped = records[("eval_only", "train")]
    assert skipped["status"] == "skipped"
    assert "DEFAULT_TRAIN_BSIZE is not implemented" in skipped["error"]["message"]
    for test in ("eval", "train"):
        assert records[("hf_Bert", test)]["status"] == "skipped"
        assert "torchbench.yaml (skip.all)" in records[("hf_Bert", test)]["error"]["message"]
        failed = records[("needs_extra", test)]
        assert failed["status"] == "error"
        requirements = FAKE_TORCHBENCH.resolve() / "torchbenchmark" / "models" / "needs_extra" / "requirements.txt"
        assert f"pip install -r {requirements}" in failed["error"]["message"]
        offline = records[("pretrained_vision", test)]
        assert offline["status"] == "ok", offline["error"]
        assert offline["environment"]["pretrained_weights"] == "random"
        assert offline["environment"]["weights_unreachable"] == "http://127.0.0.1:9/tiny_weights-00000000.pth"
        assert "Connection refused" in offline["environment"]["weights_error"]


@pytest.fixture
def forget_the_checkout(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Loading in-process puts the checkout on sys.path and torchbenchmark in sys.modules; later
    tests must find the built-in set again, as a fresh process would."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    for name in [m for m in sys.modules if m == "torchbenchmark" or m.startswith("torchbenchmark.")]:
        del sys.modules[name]


@pytest.mark.e2e
def test_torchbench_checkout_honours_a_batch_size_override(monkeypatch, forget_the_checkout):
    monkeypatch.setenv(TORCHBENCH_DIR_ENV, str(FAKE_TORCHBENCH))
    suite = get_suite("torchbench")
    assert suite.model_names() == ["dlrm", "eval_only", "hf_Bert", "needs_extra", "pretrained_vision", "tiny_mlp"]
    assert suite.source == "torchbenchmark"
    model = suite.load(LoadRequest("tiny_mlp", "train", "cpu", "cpu", "fp32", batch_size=5))
    assert model.batch_size == 5 and model.args[0].shape == (5, 16)
    with pytest.raises(ModelSkipped, match="does not implement train"):
        suite.load(LoadRequest("eval_only", "train", "cpu", "cpu", "fp32"))


NEEDS_INPUTS_MODEL = '''
from pathlib import Path

import torch

from ...util.model import BenchmarkModel

DATA = Path(__file__).parents[2] / "data" / ".data" / "{tarball}"


class Model(BenchmarkModel):
    DEFAULT_EVAL_BSIZE = 2

    def __init__(self, test, device, batch_size=None, extra_args=[]):
        super().__init__(test=test, device=device, batch_size=batch_size, extra_args=extra_args)
        if {needs} and not DATA.is_dir():
            raise RuntimeError("Failed to download data from manifold: No module named 'fb'")
        self.model = torch.nn.Linear(4, 4)

    def get_module(self):
        return self.model, (torch.randn(self.batch_size, 4),)
'''


def add_model(checkout: Path, name: str, source: str, install: str) -> None:
    folder = checkout / "torchbenchmark" / "models" / name
    folder.mkdir()
    (folder / "__init__.py").write_text(source)
    (folder / "install.py").write_text(install)


def test_the_s3_input_tarballs_are_read_from_install_py_without_running_it(tmp_path):
    from benchmark_models.torchbench.offline import input_tarballs

    (tmp_path / "install.py").write_text(
        "from utils import s3_utils\n"
        "from utils.s3_utils import checkout_s3_data\n"
        "raise SystemExit('never run')\n"
        "if __name__ == '__main__':\n"
        "    s3_utils.checkout_s3_data('INPUT_TARBALLS', 'coco128.tar.gz', decompress=True)\n"
        "    checkout_s3_data('INPUT_TARBALLS', 'frames.tar.gz')\n"
        "    s3_utils.checkout_s3_data('MODEL_PKLS', 'drq/obs.pkl')\n"
        "    s3_utils.checkout_s3_data('INPUT_TARBALLS', NAME)\n")
    assert input_tarballs(tmp_path) == ["coco128.tar.gz", "frames.tar.gz"]
    assert input_tarballs(tmp_path / "no_such_model") == []


@pytest.mark.e2e
def test_a_build_without_its_s3_input_data_fails_with_one_line_saying_how_to_get_it(
        monkeypatch, tmp_path, forget_the_checkout):
    """A model that fails while its install.py's input data is not unpacked names the tarball, its
    URL and the command; one whose install.py names data it does not use builds (LearningToPaint)."""
    from benchmark_models.torchbench.offline import DownloadUnreachable

    checkout = tmp_path / "benchmark"
    shutil.copytree(FAKE_TORCHBENCH, checkout)
    install = "from utils import s3_utils\ns3_utils.checkout_s3_data('INPUT_TARBALLS', 'frames_inputs.tar.gz')\n"
    add_model(checkout, "needs_frames", NEEDS_INPUTS_MODEL.format(tarball="frames_inputs", needs=True), install)
    add_model(checkout, "names_unused", NEEDS_INPUTS_MODEL.format(tarball="frames_inputs", needs=False), install)
    monkeypatch.setenv(TORCHBENCH_DIR_ENV, str(checkout))
    suite = get_suite("torchbench")
    with pytest.raises(DownloadUnreachable) as failure:
        suite.load(LoadRequest("needs_frames", "eval", "cpu", "cpu", "fp32"))
    package = checkout.resolve() / "torchbenchmark"
    assert str(failure.value) == (
        f"torchbenchmark model needs_frames needs its input data, not unpacked in {package}/data/.data "
        "(RuntimeError: Failed to download data from manifold: No module named 'fb'); `python install.py "
        "needs_frames` in the checkout downloads https://ossci-datasets.s3.amazonaws.com/torchbench/data/"
        "frames_inputs.tar.gz; offline, put that file in torchbenchmark/data/ first (install.py then only unpacks it)")
    assert "\n" not in str(failure.value)
    assert suite.load(LoadRequest("names_unused", "eval", "cpu", "cpu", "fp32")).batch_size == 2

    (package / "data" / ".data" / "frames_inputs").mkdir(parents=True)
    assert suite.load(LoadRequest("needs_frames", "eval", "cpu", "cpu", "fp32")).batch_size == 2


SLOMO_MODEL = '''
import os

import torch

from ...util.model import BenchmarkModel


class SuperSloMo(torch.utils.data.Dataset):
    def __init__(self, root, transform=None, train=True):
        if not os.path.exists(root):
            raise RuntimeError("Failed to download data from manifold")


class Interpolate(torch.nn.Module):
    def forward(self, index, I0, I1, IFrame):
        return (I0 + I1) / 2 - IFrame


class Model(BenchmarkModel):
    DEFAULT_EVAL_BSIZE = 6

    def __init__(self, test, device, batch_size=None, extra_args=[]):
        super().__init__(test=test, device=device, batch_size=batch_size, extra_args=extra_args)
        root = os.path.join(os.path.dirname(__file__), "..", "..", "data", ".data", "Super_SloMo_inputs", "train")
        loader = torch.utils.data.DataLoader(SuperSloMo(root, train=True), batch_size=self.batch_size)
        data, index = next(iter(loader))
        self.example_inputs = index, *data

    def get_module(self):
        return Interpolate(), self.example_inputs
'''


@pytest.mark.e2e
def test_super_slomo_without_its_frames_runs_on_random_ones_and_says_so(monkeypatch, tmp_path, forget_the_checkout):
    import torch

    checkout = tmp_path / "benchmark"
    shutil.copytree(FAKE_TORCHBENCH, checkout)
    add_model(checkout, "Super_SloMo", SLOMO_MODEL,
              "from utils import s3_utils\ns3_utils.checkout_s3_data('INPUT_TARBALLS', 'Super_SloMo_inputs.tar.gz')\n")
    monkeypatch.setenv(TORCHBENCH_DIR_ENV, str(checkout))
    model = get_suite("torchbench").load(LoadRequest("Super_SloMo", "eval", "cpu", "cpu", "fp32", batch_size=2))
    index, *frames = model.args
    assert index.tolist() == [0, 1] and [tuple(f.shape) for f in frames] == [(2, 3, 352, 352)] * 3
    assert all(0 <= f.min() and f.max() < 1 for f in frames) and not torch.equal(frames[0], frames[1])
    assert model.provenance["input_data"] == "random"
    assert model.provenance["input_data_unreachable"] == (
        "https://ossci-datasets.s3.amazonaws.com/torchbench/data/Super_SloMo_inputs.tar.gz")


def test_a_missing_package_of_a_model_whose_install_py_does_more_names_install_py(tmp_path):
    """fastNLP_Bert's install.py patches fastNLP after its requirements: `pip install -r` is not enough.
    A function install.py defines but never calls (yolov3's setup_data_dir) is no step."""
    from benchmark_models.torchbench import missing_requirement_hint

    model = tmp_path / "torchbenchmark" / "models" / "patched"
    model.mkdir(parents=True)
    (model / "requirements.txt").write_text("fastNLP==0.6.0\n")
    (model / "install.py").write_text(
        "from utils.python_utils import pip_install_requirements\n"
        "def patch_fastnlp():\n    pass\n"
        "def setup_data_dir():\n    pass\n"
        "if __name__ == '__main__':\n    pip_install_requirements()\n    patch_fastnlp()\n")
    missing = ModuleNotFoundError("No module named 'fastNLP'", name="fastNLP")
    assert missing_requirement_hint(tmp_path / "torchbenchmark", "patched", missing).endswith(
        f"install it: python install.py patched (in {tmp_path}; besides its requirements it runs patch_fastnlp)")
    (model / "install.py").write_text(
        "from utils.python_utils import pip_install_requirements\n"
        "def setup_data_dir():\n    pass\n"
        "if __name__ == '__main__':\n    pip_install_requirements()\n")
    assert missing_requirement_hint(tmp_path / "torchbenchmark", "patched", missing).endswith(
        f"install it: pip install -r {model / 'requirements.txt'}")


def test_a_missing_module_no_requirements_file_names_says_what_provides_it():
    from benchmark_models.torchbench import missing_requirement_hint

    hint = missing_requirement_hint(FAKE_TORCHBENCH / "torchbenchmark", "needs_extra",
                                    ModuleNotFoundError("No module named 'pkg_resources'", name="pkg_resources"))
    assert hint.endswith("install it: pip install 'setuptools<82' (setuptools 82 removed pkg_resources)")


def test_a_bad_torchbench_dir_warns_and_falls_back_to_the_builtin_set(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(TORCHBENCH_DIR_ENV, str(tmp_path))
    suite = get_suite("torchbench")
    assert suite.source == "builtin" and "nanogpt" in suite.model_names()
    assert "holds no torchbenchmark/ package" in capsys.readouterr().err


def test_missing_transformers_is_one_clear_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(MissingDependency, match=r"^transformers is needed .*pip install 'transformers>=4.40' 'torch=="):
        get_suite("huggingface").load(LoadRequest("BertForMaskedLM", "eval", "cpu", "cpu", "fp32", 1))


@pytest.mark.e2e
def test_import_timm_works_and_the_torchvision_patch_is_applied_only_when_needed():
    """Where torchvision's compiled ops cannot load, plain `import timm` fails and
    require('timm') patches; where they load, require('timm') leaves torchvision alone."""
    plain = subprocess.run([sys.executable, "-c", "import timm"], capture_output=True, text=True, timeout=300)
    code = ("import benchmark_models.optional as o\n"
            "timm = o.require('timm')\n"
            "timm.create_model('resnet18', pretrained=False)\n"
            "print(o._torchvision_stub_library is not None)\n")
    guarded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert guarded.returncode == 0, guarded.stderr
    patched = guarded.stdout.strip().splitlines()[-1] == "True"
    assert patched == (plain.returncode != 0), plain.stderr[-500:]
    if patched:
        assert "torchvision::nms" in plain.stderr


def cpu_rule(suite: str, model: str, test: str) -> str | None:
    """The reason a suite's rules skip this model on CPU, as a run would record it."""
    from experiment_runner.core.matrix import Experiment, ExperimentConfig

    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo=None, test=test, precision="fp32")
    return next((r.reason for r in get_suite(suite).skip_rules() if r.matches(Experiment(suite, model, config))), None)


def sweep_cases() -> list[tuple[str, str]]:
    return [(suite, model) for suite in sorted(DATA_FILES) for model in listed(suite)]


@pytest.mark.slow
@pytest.mark.parametrize("suite,model", sweep_cases(), ids=[f"{s}-{m}" for s, m in sweep_cases()])
def test_every_listed_model_runs_one_eval_and_one_train_iteration(suite, model):
    """Load at batch size 1 on CPU; one eval forward and one training step with the suite's
    loss. The step is plain SGD so memory stays at weights + gradients (DebertaV2 has 0.9B
    parameters; Adam's state would double that). What the suite's rules skip on CPU (the harness's
    skip lists) is skipped here too. Run with `pytest tests/child/test_suites.py -m slow`."""
    import torch

    if cpu_rule(suite, model, "eval"):
        pytest.skip(cpu_rule(suite, model, "eval"))
    started = time.perf_counter()
    for test in ("eval", "train"):
        if cpu_rule(suite, model, test):
            continue
        torch.manual_seed(0)
        loaded = get_suite(suite).load(LoadRequest(model, test, "cpu", "cpu", "fp32", batch_size=1))
        assert loaded.batch_size == 1
        if test == "eval":
            loaded.module.eval()
            with torch.no_grad():
                output = loaded.run_forward(loaded.module, loaded.args, loaded.kwargs)
            assert output is not None
            continue
        loaded.module.train()
        optimizer = torch.optim.SGD(loaded.module.parameters(), lr=1e-3)
        loss = loaded.compute_loss(loaded.run_forward(loaded.module, loaded.args, loaded.kwargs))
        assert loss.dim() == 0 and torch.isfinite(loss), loss
        loss.backward()
        assert any(p.grad is not None for p in loaded.module.parameters())
        optimizer.step()
        del loaded, optimizer, loss
    print(json.dumps({"suite": suite, "model": model, "seconds": round(time.perf_counter() - started, 1)}))


PRUNED_CHEAP = {"DistilBertForQuestionAnswering", "BlenderbotSmallForCausalLM"}  # a 5 s and a 10 s step on 2 cores


@pytest.mark.parametrize("model", [
    pytest.param(m, marks=() if m in PRUNED_CHEAP else pytest.mark.slow)
    for m in read_data(DATA_FILES["huggingface"])["rules"]["pruned"]["models"]])
def test_a_model_pruned_from_pytorchs_list_loads_offline_and_trains_one_step(model):
    """The 16 models pytorch/pytorch#164815 took off the huggingface list still build from the
    shipped data (no download) and run one eager forward and backward at batch size 1, at the
    harness's sequence length; the two cheapest run by default, the rest with -m slow."""
    import torch

    torch.manual_seed(0)
    loaded = get_suite("huggingface").load(LoadRequest(model, "train", "cpu", "cpu", "fp32", batch_size=1))
    loaded.module.train()
    loss = loaded.compute_loss(loaded.run_forward(loaded.module, loaded.args, loaded.kwargs))
    assert loss.dim() == 0 and torch.isfinite(loss), loss
    loss.backward()
    assert any(p.grad is not None for p in loaded.module.parameters())


def test_only_a_download_this_host_cannot_reach_counts_as_offline():
    import urllib.error

    from benchmark_models.torchbench.offline import unreachable

    refused = urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
    try:
        try:
            raise refused
        except urllib.error.URLError as exc:
            raise RuntimeError("loading the weights failed") from exc
    except RuntimeError as wrapped:
        assert unreachable(wrapped) is refused
    assert unreachable(ValueError("a model's own bug")) is None
