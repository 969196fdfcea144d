"""Which tolerance, and whether to verify at all, for one experiment: read from data.

The numbers and per-model lists live in verifier/data/tolerances.json (facts from PyTorch's
benchmarks/dynamo harness, cited there) so a maintainer can change them without touching
code. Extra JSON files in the same format, named in EXPERIMENT_RUNNER_VERIFIER_DATA
(separated by os.pathsep), are layered on top: that is how a plug-in suite brings its own
tolerances, skips and nondeterministic models.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

EXTRA_DATA_ENV = "EXPERIMENT_RUNNER_VERIFIER_DATA"
_CONDITIONS = ("test", "precision", "accelerator", "dynamo", "xla")
_LISTS = ("skip", "nondeterministic", "larger_multiplier")


@dataclass(frozen=True)
class Context:
    """What a rule may match on."""

    suite: str
    model: str
    test: str
    precision: str
    accelerator: str
    dynamo: str | None
    xla: str | None


@dataclass(frozen=True)
class Policy:
    """How to verify one experiment."""

    tolerance: float
    cosine: bool
    source: str  # where the tolerance came from, for the record
    rule: dict[str, Any] = field(default_factory=dict)  # the rule that applied, for the record
    skip_reason: str | None = None
    nondeterministic_reason: str | None = None  # eager may differ from itself
    larger_multiplier_reason: str | None = None  # PyTorch's use_larger_multiplier_for_smaller_tensor

    @property
    def nondeterministic(self) -> bool:
        return self.nondeterministic_reason is not None

    def describe(self) -> dict[str, Any]:
        """What the record says about the rules that applied."""
        out: dict[str, Any] = {"tolerance_source": self.source, "tolerance_rule": self.rule,
                               "cosine_chosen": self.cosine}
        if self.nondeterministic_reason:
            out["nondeterministic"] = self.nondeterministic_reason
        if self.larger_multiplier_reason:
            out["larger_multiplier"] = self.larger_multiplier_reason
        return out


def load_data(extra: str | None = None) -> dict[str, Any]:
    """The shipped data with any extra files layered on top (their rules take precedence)."""
    data = json.loads(resources.files("verifier").joinpath("data", "tolerances.json").read_text())
    extra = os.environ.get(EXTRA_DATA_ENV, "") if extra is None else extra
    for path in filter(None, extra.split(os.pathsep)):
        layer = json.loads(Path(path).read_text())
        data["default"] = layer.get("default", []) + data["default"]
        for name, suite in layer.get("suites", {}).items():
            base = data["suites"].setdefault(name, {"rules": [], "models": {}})
            base["rules"] = suite.get("rules", []) + base.get("rules", [])
            models = base.setdefault("models", {})
            for model, rules in suite.get("models", {}).items():
                models[model] = rules + models.get(model, [])
            for key in _LISTS:
                base[key] = suite.get(key, []) + base.get(key, [])
    _validate(data)
    return data


def _validate(data: dict[str, Any]) -> None:
    """Unknown conditions are typos that would silently never match: refuse them."""
    entries = list(data["default"])
    for suite in data["suites"].values():
        entries += suite.get("rules", []) + [e for key in _LISTS for e in suite.get(key, [])]
        entries += [rule for rules in suite.get("models", {}).values() for rule in rules]
    for entry in entries:
        unknown = set(entry.get("when", {})) - set(_CONDITIONS)
        if unknown:
            raise ValueError(f"unknown condition(s) {sorted(unknown)} in verifier data "
                             f"(known: {', '.join(_CONDITIONS)})")


def _matches(when: dict[str, Any], ctx: Context) -> bool:
    for key, wanted in when.items():
        allowed = wanted if isinstance(wanted, list) else [wanted]
        if getattr(ctx, key) not in allowed:
            return False
    return True


def _listed(entries: list[dict[str, Any]], ctx: Context) -> dict[str, Any] | None:
    return next((e for e in entries if e["model"] == ctx.model and _matches(e.get("when", {}), ctx)), None)


def policy_for(ctx: Context, override: float | None = None, data: dict[str, Any] | None = None) -> Policy:
    """The first matching rule of the model, then the suite, then the default; the record
    keeps that rule (`rule`) even when --tolerance overrides its number."""
    data = load_data() if data is None else data
    suite = data["suites"].get(ctx.suite, {})
    layers = [(f"{ctx.suite}/{ctx.model}", suite.get("models", {}).get(ctx.model, [])),
              (ctx.suite, suite.get("rules", [])), ("default", data["default"])]
    rule, layer = next(((r, name) for name, rules in layers for r in rules
                        if _matches(r.get("when", {}), ctx)), ({"tolerance": 1e-4}, "built-in"))
    tolerance, source = (override, "--tolerance") if override is not None else (float(rule["tolerance"]), layer)
    reasons: dict[str, str | None] = {}
    for key in _LISTS:
        entry = _listed(suite.get(key, []), ctx)
        reasons[key] = (entry.get("reason") or f"listed as {key} in the verifier data") if entry else None
    return Policy(
        tolerance=tolerance, cosine=bool(rule.get("cosine", False)), source=source,
        rule={"from": layer, **rule},
        skip_reason=reasons["skip"], nondeterministic_reason=reasons["nondeterministic"],
        larger_multiplier_reason=reasons["larger_multiplier"],
    )
