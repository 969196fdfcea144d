"""The fork server refuses to fork once the CUDA driver is initialized, not merely loaded.

Some torch builds (2.11+cu130) load libcuda at import; on a GPU host the server used to refuse
every time and the run fell back to plain subprocesses. A stand-in driver, compiled here and
preloaded as libcuda.so.1, answers cuDeviceGetCount as the real one does: NOT_INITIALIZED
until cuInit has run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

FAKE_DRIVER = r"""
static int initialized;
int cuInit(unsigned int flags) { initialized = 1; return 0; }
int cuDeviceGetCount(int *count) { if (!initialized) return 3; *count = 1; return 0; }
"""

CHECK = "from experiment_runner.child.forkserver import _cuda_driver_initialized as f; print(f())"
INIT = "import ctypes; ctypes.CDLL('libcuda.so.1').cuInit(0)"


@pytest.fixture
def fake_driver(tmp_path: Path) -> Path:
    (tmp_path / "driver.c").write_text(FAKE_DRIVER)
    library = tmp_path / "libcuda.so.1"
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(library),
                    str(tmp_path / "driver.c")], check=True)
    return library


def probe(script: str, preload: Path | None = None) -> list[str]:
    env = dict(os.environ, **({"LD_PRELOAD": str(preload)} if preload else {}))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False)
    return proc.stdout.split() if proc.returncode == 0 else [proc.stderr]


def test_a_loaded_driver_counts_only_once_initialized(fake_driver: Path) -> None:
    assert probe(f"{CHECK}; {INIT}; {CHECK}", fake_driver) == ["False", "True"]


def test_without_a_driver_nothing_is_initialized() -> None:
    assert probe(CHECK) == ["False"]
