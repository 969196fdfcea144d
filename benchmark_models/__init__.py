"""Model suites for experiment_runner: torchbench, huggingface, timm and dummy.

Suites register by name in `registry`; the parent only uses their catalog half
(`registry`, `base`), which never imports torch; `model` is the child's half.
"""

from benchmark_models.base import LoadRequest, ModelNotFound, ModelSkipped, Suite
from benchmark_models.model import BenchmarkModel, map_tensors
from benchmark_models.registry import available_suites, get_suite

__all__ = [
    "BenchmarkModel", "LoadRequest", "ModelNotFound", "ModelSkipped", "Suite",
    "available_suites", "get_suite", "map_tensors",
]
