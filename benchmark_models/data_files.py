"""The suites' shipped data (model lists, batch sizes, rules), read from benchmark_models/data.

A module of its own so that every other suite module can read data without importing
the suite base classes (training.py does, and base.py refers to the model type).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any


def read_data(filename: str) -> Any:
    """Read a JSON data file shipped in benchmark_models/data."""
    text = resources.files("benchmark_models").joinpath("data", filename).read_text()
    return json.loads(text)
