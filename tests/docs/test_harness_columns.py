"""The harness's side of benchmarks/paired_vs_harness.py and harness_columns.py's CPU memory
comparison: each process's figure above the resident set it held before its model loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import harness_columns
import paired_vs_harness
import pytest

# A stand-in for the harness's checkout: its suite script calls common.main with a runner, and
# main loads the model (64 MiB kept) through the runner, as the harness's main does.
FAKE_COMMON = """
import sys
def main(runner, original_dir=None):
    runner.load_model()
"""
FAKE_SCRIPT = """
import json, sys
import psutil
from common import main
class Runner:
    def load_model(self):
        self.model = bytearray(64 * 2**20)
        for i in range(0, len(self.model), 4096):
            self.model[i] = 1
main(Runner())
print(json.dumps({"rss": psutil.Process().memory_info().rss,
                  "imported": sorted(name for name in ("timm", "transformers", "torchvision") if name in sys.modules)}))
"""


@pytest.mark.e2e
def test_the_harness_process_writes_its_base_before_the_model_and_imports_only_its_suite(tmp_path: Path) -> None:
    (tmp_path / "common.py").write_text(FAKE_COMMON)
    (tmp_path / "timm_models.py").write_text(FAKE_SCRIPT)
    base_file = tmp_path / "base.json"
    base_file.write_text(json.dumps({"base_memory_bytes": 1}))  # an earlier run's: replaced
    proc = subprocess.run([sys.executable, "-c", paired_vs_harness._HARNESS, str(tmp_path / "timm_models.py")],
                          env={**os.environ, "HARNESS_BASE_FILE": str(base_file)},
                          capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    after = json.loads(proc.stdout.splitlines()[-1])
    base = json.loads(base_file.read_text())["base_memory_bytes"]
    assert base > 100 * 2**20, "this process's level (torch imported), not the earlier run's"
    assert after["rss"] - base >= 60 * 2**20, "the base is read before the model loads"
    assert "transformers" not in after["imported"], "a timm run imports no other suite's library"


def test_memory_compares_above_each_base_and_the_ratio_rebased() -> None:
    """The harness's resnet18 row (eager 71.57, dynamo 76.50: 100 x GB) from a 0.506 GB base; ours
    42.37 and 48.18 from 0.235 GB: above the bases 20.97 against 18.87 and 25.90 against 24.68, and
    ours' ratio on the harness's base (18.87 + 50.6) / (24.68 + 50.6)."""
    theirs = {"eager_peak_mem": "71.57", "dynamo_peak_mem": "76.50", "compression_ratio": "0.935556"}
    ours = {"eager_peak_mem": "42.37", "dynamo_peak_mem": "48.18", "compression_ratio": "0.879410"}
    figures = harness_columns.above_bases(theirs, ours, (50.6, 23.5))
    assert figures["eager_peak_mem"] == ("20.970000", "18.870000")
    assert figures["dynamo_peak_mem"] == ("25.900000", "24.680000")
    assert float(figures["compression_ratio"][1]) == pytest.approx((18.87 + 50.6) / (24.68 + 50.6), rel=1e-6)
    assert harness_columns.agree("eager_peak_mem", *figures["eager_peak_mem"], above_base=True) == "-10%"
    assert harness_columns.agree("eager_peak_mem", "20.0", "10.0", above_base=True) == "-50% (beyond)"
    assert harness_columns.agree("eager_peak_mem", "20.0", "14.0") == "-30% (beyond)", "raw: 15%"
    assert harness_columns.agree("compression_ratio", *figures["compression_ratio"]) == "-1%"


def test_a_folder_without_a_kept_round_is_one_line_and_exit_2(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "argv", ["harness_columns.py", str(tmp_path)])
    assert harness_columns.main() == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and str(tmp_path) in err


def test_a_harness_folder_without_the_suites_script_is_refused_before_anything_runs(
        tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "common.py").write_text("")
    monkeypatch.setattr(sys, "argv", ["paired_vs_harness.py", "--harness", str(tmp_path), "--model",
                                      "huggingface:DistilBertForMaskedLM"])
    with pytest.raises(SystemExit) as exit_:
        paired_vs_harness.main()
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        f"--harness {tmp_path}: no huggingface.py there (a dynamobench or benchmarks/dynamo folder)")
