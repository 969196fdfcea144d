"""End to end: `python -m experiment_runner --verify` on test-only models reaches each of the
seven verification codes, with timings and verification in the same record; backends that
are wrong on purpose (loss ×1.5 in training, outputs ×1.01, NaN) FAIL and the identity
backend and inductor PASS.

The models and the backends come from tests/support/verifier_plugin.py through the runner's
plug-in seams, exactly as a user's own suite and backend would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from experiment_runner.core import dashboards
from verifier.run import DRAWS_RANDOM_NUMBERS

pytestmark = pytest.mark.e2e

SUPPORT = Path(__file__).parents[1] / "support"
sys.path.insert(0, str(SUPPORT))

from verifier_plugin import SUITE_NAME, VERIFIER_DATA, Dropping  # noqa: E402

Records = dict[tuple[str, str | None, str], dict[str, Any]]


def run_cli(tmp: Path, name: str, *flags: str, suite: str = SUITE_NAME) -> list[dict[str, Any]]:
    data = tmp / "verifier_data.json"
    data.write_text(json.dumps(VERIFIER_DATA))
    env = dict(os.environ,
               PYTHONPATH=os.pathsep.join(filter(None, [str(SUPPORT), os.environ.get("PYTHONPATH")])),
               EXPERIMENT_RUNNER_PLUGINS="verifier_plugin",
               EXPERIMENT_RUNNER_SUITES=f"{SUITE_NAME}=verifier_plugin:VerifierTestSuite",
               EXPERIMENT_RUNNER_VERIFIER_DATA=str(data),
               XDG_CACHE_HOME=str(tmp / "cache"), TORCHINDUCTOR_CACHE_DIR=str(tmp / "inductor"))
    out = tmp / name
    proc = subprocess.run(
        [sys.executable, "-m", "experiment_runner", f"--suite-name={suite}", "--accelerator=cpu",
         "--xla=None", "--verify", "--repeat=1", "--warmup-iterations=1", f"--output-dirname={out}", *flags],
        env=env, capture_output=True, text=True, timeout=540,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Records:
    tmp = tmp_path_factory.mktemp("verifier_e2e")
    found = run_cli(tmp, "eval", "--dynamo=eager", "--test=eval", "--exclude=^nan_at_first$")
    found += run_cli(tmp, "perturb", "--filter=^tiny_mlp$", "--dynamo=verifier_perturb")
    found += run_cli(tmp, "loose", "--filter=^tiny_mlp$", "--dynamo=verifier_perturb", "--test=eval",
                     "--tolerance=0.05")
    found += run_cli(tmp, "nan", "--filter=^(tiny_mlp|nan_at_first)$", "--dynamo=verifier_nan",
                     "--dynamo=verifier_identity", "--test=eval")
    # The acceptance command of issue 12, with a loss-scaling backend and with inductor.
    found += run_cli(tmp, "dummy", "--test=train", "--dynamo=verifier_loss_x1_5", "--dynamo=inductor",
                     suite="dummy")
    found += run_cli(tmp, "dropout", "--filter=^tiny_dropout$", "--dynamo=inductor", "--test=train")
    found += run_cli(tmp, "noise", "--filter=^tiny_noise$", "--dynamo=inductor", "--test=eval")
    by_key: Records = {}
    for record in found:
        tolerance = (record["verification"] or {}).get("tolerance")
        key = (record["model"]["model_name"], record["experiment"]["dynamo"], record["experiment"]["test"])
        by_key[key if tolerance != 0.05 else (*key[:2], "eval --tolerance=0.05")] = record
    return by_key


@pytest.mark.parametrize("key, code", [
    (("tiny_mlp", "eager", "eval"), "PASS"),
    (("tiny_dict", "eager", "eval"), "PASS"),
    (("jitter_listed", "eager", "eval"), "PASS"),
    (("tiny_mlp", "verifier_perturb", "eval"), "FAIL"),
    (("tiny_mlp", "verifier_perturb", "train"), "FAIL"),
    (("tiny_mlp", "verifier_perturb", "eval --tolerance=0.05"), "PASS"),
    (("tiny_mlp", "verifier_identity", "eval"), "PASS"),
    (("nan_at_first", "verifier_identity", "eval"), "PASS"),
    (("tiny_mlp", "verifier_nan", "eval"), "FAIL"),
    (("nan_at_first", "verifier_nan", "eval"), "PASS"),
    (("dummy", "verifier_loss_x1_5", "train"), "FAIL"),
    (("dummy", "inductor", "train"), "PASS"),
    (("tiny_dropout", "inductor", "train"), "PASS"),
    (("tiny_noise", "inductor", "eval"), "PASS"),
    (("eager_broken", "eager", "eval"), "EAGER_FAILED"),
    (("opaque_output", "eager", "eval"), "EXCEPTION_RAISED"),
    (("jitter", "eager", "eval"), "NONDETERMINISTIC_EAGER_RUN"),
    (("skipped_by_data", "eager", "eval"), "VERIFIER_SKIPPED"),
    (("dies_in_fp64", "eager", "eval"), "VERIFIER_DIDNT_RUN"),
])
def test_each_code_is_reached(records: Records, key: tuple[str, str, str], code: str):
    record = records[key]
    assert record["verification_code"] == code, record["verification"] or record["error"]


def test_all_seven_codes_are_covered(records: Records):
    from experiment_runner.core.results import VERIFICATION_CODES

    assert {r["verification_code"] for r in records.values()} == set(VERIFICATION_CODES)


def test_timing_and_verification_share_one_record(records: Records):
    """A verification failure does not stop the timing: both land in the same record."""
    for key in [("tiny_mlp", "verifier_perturb", "eval"), ("tiny_mlp", "eager", "eval"),
                ("eager_broken", "eager", "eval")]:
        record = records[key]
        assert record["status"] == "ok" and len(record["metrics"]["per_iter_time"]) == 1
        assert record["verification"]["code"] == record["verification_code"]


def test_fail_record_names_the_check_and_the_figures(records: Records):
    verification = records[("tiny_mlp", "verifier_perturb", "eval")]["verification"]
    details = verification["details"]
    assert verification["method"] == "rmse" and verification["tolerance"] == 1e-4
    assert details["path"] == "<output>" and details["rmse_result"] > details["threshold"]
    assert details["max_abs_error"] > 0 and details["cosine"] > 0.99  # a 1% scale keeps the direction
    train = records[("tiny_mlp", "verifier_perturb", "train")]["verification"]["details"]
    assert train["path"].split(".")[0] in ("loss", "output", "grads", "params")


def test_loose_tolerance_comes_from_the_command_line(records: Records):
    verification = records[("tiny_mlp", "verifier_perturb", "eval --tolerance=0.05")]["verification"]
    assert verification["method"] == "allclose"
    assert verification["details"]["tolerance_source"] == "--tolerance"


def test_codes_that_explain_themselves(records: Records):
    eager_failed = records[("eager_broken", "eager", "eval")]["verification"]["details"]["error"]
    assert "broken in eager mode" in eager_failed["message"]
    raised = records[("opaque_output", "eager", "eval")]["verification"]["details"]["error"]
    assert raised["type"] == "UnsupportedOutput" and "UnsupportedOutput" in raised["traceback_tail"]
    nondeterministic = records[("jitter", "eager", "eval")]["verification"]
    assert nondeterministic["method"] == "exact" and nondeterministic["details"]["max_abs_error"] > 0
    assert records[("jitter_listed", "eager", "eval")]["verification"]["details"]["eager_deterministic"] is False
    skipped = records[("skipped_by_data", "eager", "eval")]["verification"]["details"]
    assert skipped["reason"] == "listed to skip for the test"
    # A death in the float64 run keeps the timings: the experiment ran, only its verdict is missing.
    died = records[("dies_in_fp64", "eager", "eval")]
    assert died["status"] == "ok" and died["metrics"]["per_iter_time"]
    assert died["verification_code"] == "VERIFIER_DIDNT_RUN" and died["error"]["phase"] == "verification"
    assert "died during verification" in died["verification"]["details"]["reason"]


def test_loss_scaling_fail_names_the_loss_leaf(records: Records):
    details = records[("dummy", "verifier_loss_x1_5", "train")]["verification"]["details"]
    assert "loss" in details["failed_paths"]
    assert {p.split(".")[0] for p in details["failed_paths"]} <= {"loss", "output", "grads", "params"}
    assert details["tolerance_rule"] == {"from": "default", "tolerance": 1e-4}


def test_inductor_training_compares_loss_gradients_and_parameters(records: Records):
    details = records[("dummy", "inductor", "train")]["verification"]["details"]
    assert details["reference"] == "float64" and details["failed_paths"] == []
    assert details["leaves"] == 2 + 2 * 6  # loss, output, 6 gradients, 6 updated parameters


def test_a_train_mode_dropout_compiled_afresh_draws_eagers_masks(records: Records):
    """The verifier compiles its fresh copy anew, as PyTorch's accuracy runs compile, with random
    ops falling back to aten's: the compiled step's dropout draws eager's masks from the same seed."""
    details = records[("tiny_dropout", "inductor", "train")]["verification"]["details"]
    assert details["compiled_run"] == "fresh copy" and details["failed_paths"] == []
    assert details["inductor_config"] == dashboards.accuracy_inductor_config() == {"fallback_random": True}
    reused = records[("tiny_mlp", "verifier_identity", "eval")]["verification"]["details"]
    assert reused["compiled_run"] == "timed step" and "inductor_config" not in reused


def test_a_timed_step_that_draws_random_numbers_is_set_aside_for_a_fresh_compile(records: Records):
    """An inference step that samples noise was timed as inductor compiles it (its own generator):
    run once more, it moves the seeded generator, so the verifier judges a fresh copy compiled
    under the accuracy runs' settings instead, whose noise is eager's."""
    details = records[("tiny_noise", "inductor", "eval")]["verification"]["details"]
    assert details["compiled_run"] == "fresh copy" and details["fresh_copy_reason"] == DRAWS_RANDOM_NUMBERS
    assert details["inductor_config"] == {"fallback_random": True}


def test_the_dropout_model_tells_the_two_ways_of_drawing_apart():
    """The PASS above rests on the setting: inductor's own random lowering draws other masks than
    eager's from the same seed (in this process, as the child would without it). The masks are
    compared, not the bits: compiled matmuls may round differently on another processor."""
    module, dropout = Dropping().train(), Dropping().layers[2]
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))

    def drawn(fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        torch.manual_seed(0)
        return fn(x)

    def compiled(fn: Callable[[torch.Tensor], torch.Tensor], **config: Any) -> torch.Tensor:
        torch._dynamo.reset()
        with torch._inductor.config.patch(config):
            try:
                return drawn(torch.compile(fn, backend="inductor"))
            finally:
                torch._dynamo.reset()

    fallback = dashboards.accuracy_inductor_config()
    assert torch.equal(compiled(dropout, **fallback) == 0, drawn(dropout) == 0)
    assert not torch.equal(compiled(dropout) == 0, drawn(dropout) == 0)
    eager = drawn(module)
    torch.testing.assert_close(compiled(module, **fallback), eager, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(compiled(module), eager, rtol=1e-2, atol=1e-3)


def test_nan_where_eager_has_none_fails_and_says_so(records: Records):
    details = records[("tiny_mlp", "verifier_nan", "eval")]["verification"]["details"]
    assert "NaN positions differ: 1 NaN only in the result" in details["reason"]
