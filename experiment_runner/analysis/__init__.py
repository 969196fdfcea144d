"""Reads results files: reports, plots and regression comparisons. No torch, no runner."""
