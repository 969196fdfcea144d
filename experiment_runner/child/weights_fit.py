"""Does a model's weights fit the device? Asked before the model is built, so that a model
too large for the host is a `skipped` record within a second rather than an OOM kill minutes
into its build.

The suite builds the model once on the meta device (shapes only, nothing allocated, a few
hundredths of a second for the dashboard's models) and its parameters are counted. Models
are built in float32 before any cast to the experiment's precision, so the weights alone
need at least 4 bytes per parameter at build time; that is the estimate. It is a lower bound
(no activations, gradients or optimizer state), so a skip is never a guess: the weights
cannot fit. `--no-skip` runs the model anyway.
"""

from __future__ import annotations

import dataclasses

from benchmark_models import LoadRequest, ModelSkipped, Suite

# Bytes per parameter while the model is built: in float32, before any cast.
BUILD_BYTES_PER_PARAMETER = 4
GIB = 1 << 30


def parameter_count(suite: Suite, request: LoadRequest) -> int | None:
    """The model's parameter count from a build on the meta device; None where the suite's
    loads may have side effects or the model cannot be built there (the real load says why)."""
    if not suite.meta_buildable:
        return None
    import torch

    try:
        with torch.device("meta"):
            built = suite.load(dataclasses.replace(request, device="meta"))
        return sum(p.numel() for p in built.module.parameters())
    except Exception:  # noqa: BLE001 - sizing is best effort; the real build reports its own errors
        return None


def check_weights_fit(suite: Suite, request: LoadRequest, capacity: tuple[int, str] | None) -> None:
    """Raise ModelSkipped when the weights alone exceed `capacity` (bytes, and what it is)."""
    if capacity is None:
        return
    count = parameter_count(suite, request)
    if count is None:
        return
    need, (have, what) = count * BUILD_BYTES_PER_PARAMETER, capacity
    if need > have:
        raise ModelSkipped(f"its weights alone need {need / GIB:.1f} GiB ({count:,} parameters built in float32), "
                           f"more than {what} ({have / GIB:.1f} GiB); --no-skip runs it anyway")
