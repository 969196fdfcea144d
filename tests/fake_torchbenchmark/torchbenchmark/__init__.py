"""Fake torchbenchmark for experiment_runner's tests (see ../README.md)."""
