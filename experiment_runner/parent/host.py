"""What this host can run: the parent's capability probe.

The parent must not import torch or initialize a device (a CUDA context in the parent
would leak into every forked child and cost seconds). So capabilities are probed in
short-lived child processes and cached on disk, keyed on everything that can change
the answer (interpreter, installed torch, visible devices).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from experiment_runner.core.environment import PJRT_DEVICE, PLUGINS_ENV, dist_version
from experiment_runner.core.matrix import HostCapabilities

PROBE_TIMEOUT_S = 180

_TORCH_PROBE = r"""
import json, torch, torch._dynamo
from experiment_runner.child.plugins import import_plugins
import_plugins()
print(json.dumps({
    "cuda": torch.cuda.is_available(),
    "cuda_device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
    "dynamo_backends": sorted(torch._dynamo.list_backends(exclude_tags=())),
}))
"""

# Runs with PJRT_DEVICE set to the accelerator under test; prints the device it got.
_XLA_PROBE = r"""
import torch_xla, torch_xla.core.xla_model as xm
print(xm.xla_device())
"""

class ProbeError(RuntimeError):
    pass


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "experiment_runner"


def _cache_key() -> str:
    parts = [
        sys.executable,
        str(dist_version("torch")),
        str(dist_version("torch_xla")),
        os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"),
        os.environ.get("PJRT_DEVICE", "<unset>"),
        os.environ.get(PLUGINS_ENV, ""),
        *(str(hardware_present(acc)) for acc in ("cuda", "tpu")),
    ]
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()[:16]


def torch_xla_importable() -> bool:
    """Whether torch_xla is installed, without importing it (importing it is slow)."""
    return importlib.util.find_spec("torch_xla") is not None


def _start_probe(code: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def _probe_output(proc: subprocess.Popen) -> str:
    """The last line a probe printed; ProbeError with its last error line if it failed."""
    try:
        stdout, stderr = proc.communicate(timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        proc.communicate()
        raise ProbeError(f"device probe timed out after {PROBE_TIMEOUT_S}s") from exc
    if proc.returncode != 0:
        tail = (stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ProbeError(tail)
    return (stdout.strip().splitlines() or [""])[-1]


def hardware_present(accelerator: str) -> bool:
    """Cheap evidence of the device on this host: without it a PJRT probe can only fail,
    and each failing probe costs a torch_xla start-up (about ten seconds)."""
    if accelerator == "cuda":
        return Path("/dev/nvidiactl").exists()
    if accelerator == "tpu":
        return Path("/dev/accel0").exists() or Path("/dev/vfio").exists()
    return True


def _start_xla_probe(accelerator: str) -> subprocess.Popen:
    """Whether torch_xla finds a PJRT device for `accelerator`, asked of a child process."""
    env = dict(os.environ, PJRT_DEVICE=PJRT_DEVICE[accelerator])
    env.pop("XLA_FLAGS", None)
    return _start_probe(_XLA_PROBE, env)


def _xla_device_found(proc: subprocess.Popen) -> bool:
    try:
        return _probe_output(proc).startswith("xla")
    except ProbeError:
        return False


def probe_capabilities(use_cache: bool = True) -> HostCapabilities:
    """Probe (or read from the cache) what this host can run."""
    cache = _cache_dir() / f"capabilities-{_cache_key()}.json"
    if use_cache:
        try:
            return _capabilities_from_json(json.loads(cache.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    # The probes run at once, each in its own interpreter: a cold cache costs the slowest
    # (a torch_xla start-up), not their sum.
    torch_xla = torch_xla_importable()
    xla_probes = {acc: _start_xla_probe(acc) for acc in ("cpu", "cuda", "tpu")
                  if torch_xla and hardware_present(acc)}
    try:
        data = json.loads(_probe_output(_start_probe(_TORCH_PROBE)))
    finally:
        found = [acc for acc, proc in xla_probes.items() if _xla_device_found(proc)]
    data["torch_xla"] = torch_xla
    data["xla_accelerators"] = found
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, cache)
    except OSError:
        pass  # a read-only home only costs the probe next time
    return _capabilities_from_json(data)


def _capabilities_from_json(data: dict) -> HostCapabilities:
    return HostCapabilities(
        cuda=bool(data["cuda"]),
        cuda_device_count=int(data["cuda_device_count"]),
        torch_xla=bool(data["torch_xla"]),
        xla_accelerators=frozenset(data["xla_accelerators"]),
        dynamo_backends=frozenset(data["dynamo_backends"]),
    )
