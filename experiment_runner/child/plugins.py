"""User plugins (custom dynamo backends, suites), imported in children and probes only."""

from __future__ import annotations

import os

from experiment_runner.core.environment import PLUGINS_ENV


def import_plugins() -> None:
    """Import the modules named in EXPERIMENT_RUNNER_PLUGINS (children and probes only)."""
    import importlib

    for name in filter(None, (n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(","))):
        importlib.import_module(name)
