"""experiment_runner: an experiment-matrix benchmark runner for PyTorch compilers and runtimes."""

__version__ = "0.1.0"
