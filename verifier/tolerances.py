"""Which tolerance, and whether to verify at all, for one experiment: read from data.

The numbers live in verifier/data/tolerances.json so a maintainer can change them without
touching code. Extra JSON files in the same format, named in EXPERIMENT_RUNNER_VERIFIER_DATA
(separated by os.pathsep), are layered on top: that is how a plug-in suite brings its own
tolerances, skips and nondeterministic models.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

EXTRA_DATA_ENV = "EXPERIMENT_RUNNER_VERIFIER_DATA"
_CONDITIONS = ("test", "precision", "accelerator", "dynamo", "xla")


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
    skip_reason: str | None = None
    nondeterministic: bool = False


def load_data(extra: str | None = None) -> dict[str, Any]:
    """The shipped data with any extra files layered on top (their rules take precedence)."""
    data = json.loads(resources.files("verifier").joinpath("data", "tolerances.json").read_text())
    extra = os.environ.get(EXTRA_DATA_ENV, "") if extra is None else extra
    for path in filter(None, extra.split(os.pathsep)):
        layer = json.loads(Path(path).read_text())
        data["default"] = layer.get("default", []) + data["default"]
        for name, suite in layer.get("suites", {}).items():
            base = data["suites"].setdefault(name, {"rules": [], "models": {}, "skip": [], "nondeterministic": []})
            base["rules"] = suite.get("rules", []) + base.get("rules", [])
            base.setdefault("models", {}).update(suite.get("models", {}))
            for key in ("skip", "nondeterministic"):
                base[key] = suite.get(key, []) + base.get(key, [])
    _validate(data)
    return data


def _validate(data: dict[str, Any]) -> None:
    """Unknown conditions are typos that would silently never match: refuse them."""
    entries = list(data["default"])
    for suite in data["suites"].values():
        entries += suite.get("rules", []) + suite.get("skip", []) + suite.get("nondeterministic", [])
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
    """The first matching rule of the model, then the suite, then the default."""
    data = load_data() if data is None else data
    suite = data["suites"].get(ctx.suite, {})
    layers = [(f"{ctx.suite}/{ctx.model}", suite.get("models", {}).get(ctx.model, [])),
              (ctx.suite, suite.get("rules", [])), ("default", data["default"])]
    rule, source = next(((r, name) for name, rules in layers for r in rules
                         if _matches(r.get("when", {}), ctx)), ({"tolerance": 1e-4}, "built-in"))
    tolerance, source = (override, "--tolerance") if override is not None else (float(rule["tolerance"]), source)
    skip = _listed(suite.get("skip", []), ctx)
    return Policy(
        tolerance=tolerance, cosine=bool(rule.get("cosine", False)), source=source,
        skip_reason=(skip.get("reason") or "listed to skip in the verifier data") if skip else None,
        nondeterministic=_listed(suite.get("nondeterministic", []), ctx) is not None,
    )
