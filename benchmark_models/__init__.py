"""Model suites for experiment_runner: torchbench, huggingface, timm and dummy.

Suites register by name in `registry`; the parent only uses their catalog half, which
never imports torch.
"""

from benchmark_models.base import BenchmarkModel, LoadRequest, ModelNotFound, ModelSkipped, Suite
from benchmark_models.registry import available_suites, get_suite

__all__ = [
    "BenchmarkModel", "LoadRequest", "ModelNotFound", "ModelSkipped", "Suite",
    "available_suites", "get_suite",
]
