"""Training verdicts as PyTorch's benchmarks/dynamo harness takes them: the tolerance its
get_tolerance_and_cosine_flag(is_training=True, ...) returns, its per-model lists, and its
skipped checks, read from verifier/data/tolerances.json.

The oracles below transcribe the harness's training branch (files and commits as the data's
`source` cites them); each case compares it with policy_for over every precision and accelerator,
so a rule in the wrong order or with the wrong `when` fails here.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from experiment_runner.core.matrix import ACCELERATORS, PRECISIONS, Experiment, ExperimentConfig
from experiment_runner.core.options import RunOptions
from verifier import Context, policy_for, verify_experiment
from verifier.tolerances import load_data

# torchbench.yaml @ 0517d552488967f906f102da731f236e27ddfd45, tolerance.*
TORCHBENCH_HIGHER = {"alexnet", "attention_is_all_you_need_pytorch", "densenet121", "vgg16", "mobilenet_v3_large",
                     "nvidia_deeprecommender"}
TORCHBENCH_EVEN_HIGHER = {"soft_actor_critic", "tacotron2", "yolov3", "squeezenet1_1", "shufflenet_v2_x1_0"}
TORCHBENCH_HIGHER_FP16 = {"doctr_reco_predictor", "drq", "phlippe_resnet"}
TORCHBENCH_HIGHER_BF16 = {"doctr_reco_predictor", "drq"}
# huggingface.yaml @ 33c040b56dbc9bbd387559563b838b8600e53aa4, tolerance.higher_training
HF_HIGHER_TRAINING = {"MT5ForConditionalGeneration", "BertForMaskedLM"}
# timm_models.py @ 0260ed17d429d7e9109a5707264f4d67d8364b5c
TIMM_HIGHER = {"inception_v3", "mobilenetv3_large_100"}
TIMM_EVEN_HIGHER = {"deit_base_distilled_patch16_224", "vit_base_patch16_siglip_256"}

UNLISTED = "resnet50"  # on none of the lists of any suite


def torchbench_training(precision: str, accelerator: str, name: str) -> float:
    """torchbench.py @ 3f641dbd: the fp16/amp branch returns before the training branch."""
    if precision in ("fp16", "amp"):
        if name in TORCHBENCH_HIGHER_FP16:
            return 1e-2
        return 8e-2 if name in TORCHBENCH_EVEN_HIGHER else 1e-3
    if precision == "bf16" and name in TORCHBENCH_HIGHER_BF16:
        return 1e-2
    if accelerator == "cuda":  # the training branch: cuda and xpu only
        return 8e-2 if name in TORCHBENCH_EVEN_HIGHER and name not in TORCHBENCH_HIGHER else 1e-3
    return 1e-4


def huggingface_training(precision: str, accelerator: str, name: str) -> float:
    """huggingface.py @ 032cbcbb: neither precision nor device matters in training."""
    return 2e-2 if name in HF_HIGHER_TRAINING else 1e-2


def timm_training(precision: str, accelerator: str, name: str) -> float:
    """timm_models.py @ 0260ed17 (REQUIRE_HIGHER_TOLERANCE_AMP is empty; fp16 on xpu is not ours)."""
    if name == "beit_base_patch16_224":
        return 16 * 1e-2
    if name in TIMM_EVEN_HIGHER:
        return 8 * 1e-2
    return 4 * 1e-2 if name in TIMM_HIGHER else 1e-2


HARNESS = {
    "torchbench": (torchbench_training, TORCHBENCH_HIGHER | TORCHBENCH_EVEN_HIGHER | TORCHBENCH_HIGHER_FP16
                   | TORCHBENCH_HIGHER_BF16),
    "huggingface": (huggingface_training, HF_HIGHER_TRAINING),
    # adv_inception_v3: REQUIRE_HIGHER_TOLERANCE_FOR_FREEZING, which the training branch overwrites
    "timm": (timm_training, TIMM_HIGHER | TIMM_EVEN_HIGHER | {"beit_base_patch16_224", "adv_inception_v3"}),
}


def ctx(suite: str, model: str, test: str = "train", precision: str = "amp", accelerator: str = "cuda") -> Context:
    return Context(suite=suite, model=model, test=test, precision=precision, accelerator=accelerator,
                   dynamo="inductor", xla=None)


@pytest.mark.parametrize("suite", sorted(HARNESS))
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("accelerator", ACCELERATORS)
def test_training_tolerance_matches_the_harness_for_listed_and_unlisted_models(suite, precision, accelerator):
    harness, listed = HARNESS[suite]
    for model in sorted(listed) + [UNLISTED]:
        policy = policy_for(ctx(suite, model, precision=precision, accelerator=accelerator))
        assert policy.tolerance == harness(precision, accelerator, model), (model, policy.rule)
        assert policy.rule.get("note"), f"{suite}/{model}: the rule that applied says why it exists"
        assert not policy.cosine  # every suite's cosine list is empty


def test_dashboard_training_of_an_even_higher_model_gets_the_amp_branch_number():
    """--training --amp on cuda: the amp branch's even_higher (3f641dbd), not the default 1e-3."""
    policy = policy_for(ctx("torchbench", "yolov3"))
    assert (policy.tolerance, policy.source) == (8e-2, "torchbench/yolov3")
    assert policy_for(ctx("torchbench", UNLISTED)).tolerance == 1e-3


def test_each_harness_suite_cites_the_commits_of_its_files():
    data = load_data("")
    for suite in HARNESS:
        source = data["suites"][suite]["source"]
        assert "benchmarks/dynamo" in source and "@ " in source, suite


@pytest.mark.parametrize("suite, model", [("torchbench", "yolov3"),
                                          ("huggingface", "GPT2ForSequenceClassification"),
                                          ("huggingface", "BertForMaskedLM"),
                                          ("timm", "inception_v3"), ("timm", "mobilenetv3_large_100"),
                                          ("timm", "vit_base_patch14_dinov2.lvd142m")])
def test_larger_multiplier_list_applies_to_training(suite, model):
    assert policy_for(ctx(suite, model)).larger_multiplier_reason
    assert policy_for(ctx(suite, model, precision="fp32", accelerator="cpu")).larger_multiplier_reason
    assert policy_for(ctx(suite, UNLISTED)).larger_multiplier_reason is None


def test_non_deterministic_list_applies_to_training():
    policy = policy_for(ctx("torchbench", "mobilenet_v3_large"))
    assert policy.nondeterministic and "nondeterministic" in policy.describe()
    assert not policy_for(ctx("torchbench", UNLISTED)).nondeterministic


def skipped(suite: str, model: str, test: str) -> dict:
    """verify_experiment's answer for a model the data lists to skip: it never loads the model."""
    config = ExperimentConfig(accelerator="cuda", xla=None, xla_flags=None, dynamo="inductor", test=test,
                              precision="amp" if test == "train" else "bf16")
    subject = SimpleNamespace(experiment=Experiment(suite, model, config), config=config,
                              options=RunOptions(verify=True))
    return verify_experiment(subject)


@pytest.mark.parametrize("suite, model, harness_list", [
    # accuracy.skip.large_models: check_accuracy returns pass_due_to_skip first
    ("torchbench", "maml", "large_models"),
    ("torchbench", "llama_v2_7b_16h", "large_models"),
    ("torchbench", "Background_Matting", "large_models"),
    ("torchbench", "Background_Matting", "eager_not_deterministic"),
    ("torchbench", "stable_diffusion_unet", "large_models"),
    ("huggingface", "DebertaV2ForMaskedLM", "large_models"),
    ("huggingface", "BlenderbotForCausalLM", "large_models"),
    # accuracy.skip.eager_not_deterministic: pass_due_to_skip after the compiled run, training only
    ("torchbench", "pytorch_unet", "eager_not_deterministic"),
])
def test_checks_the_harness_skips_in_training_are_verifier_skipped_with_the_reason(suite, model, harness_list):
    verification = skipped(suite, model, "train")
    assert verification["code"] == "VERIFIER_SKIPPED", verification
    assert harness_list in verification["details"]["reason"]


def test_eager_nondeterminism_skips_training_only():
    assert policy_for(ctx("torchbench", "pytorch_unet", test="eval", precision="bf16")).skip_reason is None
    eval_reason = skipped("torchbench", "Background_Matting", "eval")["details"]["reason"]
    assert "large_models" in eval_reason and "eager_not_deterministic" not in eval_reason


@pytest.mark.parametrize("suite", sorted(HARNESS))
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("accelerator", ACCELERATORS)
def test_models_listed_for_training_only_get_an_unlisted_models_eval_policy(suite, precision, accelerator):
    """Models listed for training only get the eval policy of a model on no list."""
    eval_lists = {"torchbench": TORCHBENCH_HIGHER_FP16 | TORCHBENCH_HIGHER_BF16,
                  "huggingface": set(), "timm": set()}[suite]
    unlisted = policy_for(ctx(suite, UNLISTED, test="eval", precision=precision, accelerator=accelerator))
    for model in sorted(HARNESS[suite][1] - eval_lists):
        policy = policy_for(ctx(suite, model, test="eval", precision=precision, accelerator=accelerator))
        assert (policy.tolerance, policy.rule) == (unlisted.tolerance, unlisted.rule), model
