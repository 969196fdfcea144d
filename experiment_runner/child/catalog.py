"""A suite's catalog (models, listing, skip rules, source, per-model precisions and batch sizes) as JSON, for plugin suites.

The parent never imports a plugin suite's module (it may import torch at module level),
so it asks this child instead: `python -m experiment_runner.child.catalog SUITE`.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

from experiment_runner.child.plugins import import_plugins
from benchmark_models.registry import get_suite


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    import_plugins()
    suite = get_suite(argv[0])
    print(json.dumps({"models": suite.model_names(), "skip_rules": [asdict(r) for r in suite.skip_rules()],
                      "source": suite.source, "default_precision": suite.default_precision,
                      "eval_precisions": suite.eval_precisions(), "listing": suite.listing(),
                      "batch_sizes": suite.batch_size_table()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
