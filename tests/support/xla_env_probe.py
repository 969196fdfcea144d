"""A test plugin: what torch_xla gives an experiment's process, written down before it runs.

Imported in every child with EXPERIMENT_RUNNER_PLUGINS=xla_env_probe and XLA_ENV_PROBE_DIR
set; it writes one JSON file per experiment (named after the experiment's folder), so a
test can compare a child forked from the XLA fork server with a fresh interpreter:
whether the PJRT runtime had started before the child's first use, the device it got,
what XLA_USE_BF16 and XLA_DISABLE_FUNCTIONALIZATION did, and the whole environment.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch_xla
import torch_xla.core.xla_model as xm


def _probe() -> dict[str, object]:
    experiment_dir = Path(os.environ["TMPDIR"]).parents[1]  # <experiment>/scratch/tmp
    runtime_started = torch_xla._XLAC._xla_runtime_is_initialized()
    device = torch_xla.device()
    # 1 + 2**-10 is 1.0 in bfloat16: XLA_USE_BF16 stores f32 tensors as bf16 on the device.
    bf16 = float((torch.ones(2, device=device) + 2 ** -10).cpu()[0]) == 1.0
    return {
        "runtime_started_before_first_use": runtime_started,
        "device": str(device),
        "device_hw": xm.xla_device_hw(device),
        "bf16_storage": bf16,
        "functionalized": torch._is_functional_tensor(torch.zeros(2, device=device)),
        "environment": {k: v.replace(str(experiment_dir), "<experiment>") for k, v in os.environ.items()},
        "experiment": experiment_dir.name,
    }


# Experiments only, not the parent's capability probe (which imports plugins too).
if os.environ.get("XLA_ENV_PROBE_DIR") and Path(os.environ.get("TMPDIR", "/")).parts[-2:] == ("scratch", "tmp"):
    probe = _probe()
    Path(os.environ["XLA_ENV_PROBE_DIR"], f"{probe['experiment']}.json").write_text(json.dumps(probe))
