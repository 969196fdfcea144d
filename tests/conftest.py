"""Shared fixtures: run the real command line in a subprocess, isolated from the user's files.

Every run gets its own output folder, a host-capabilities cache shared by the session but
not with the user (XDG_CACHE_HOME), tests/support on PYTHONPATH (test-only suites such as
`faulty`), and a marker in its environment so that leftover processes can be found.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest

SUPPORT = Path(__file__).parent / "support"
MARKER_ENV = "EXPERIMENT_RUNNER_TEST_MARKER"
FAULTY_SUITE = "faulty=faulty_suite:FaultySuite"


@dataclass
class CliRun:
    returncode: int
    stdout: str
    stderr: str
    output_dir: Path
    marker: str

    @property
    def results_path(self) -> Path:
        return self.output_dir / "results.jsonl"

    def records(self) -> list[dict[str, Any]]:
        return read_records(self.results_path)


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every line must be a whole JSON record: a torn or interleaved line fails the test."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def cli_env(cache_dir: Path, marker: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "XDG_CACHE_HOME": str(cache_dir),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(SUPPORT), env.get("PYTHONPATH")])),
        "EXPERIMENT_RUNNER_SUITES": FAULTY_SUITE,
        MARKER_ENV: marker,
    })
    env.update(extra or {})
    return env


def cli_command(args: Sequence[str], output_dir: Path) -> list[str]:
    return [sys.executable, "-m", "experiment_runner", *args, f"--output-dirname={output_dir}"]


@pytest.fixture(scope="session")
def cli_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One host-capabilities cache for the session: the probe runs once, not per test."""
    return tmp_path_factory.mktemp("xdg-cache")


def invoke_cli(args: Sequence[str], output_dir: Path, cache_dir: Path, env: dict[str, str] | None = None,
               timeout: float = 300, **popen: Any) -> CliRun:
    """Run `python -m experiment_runner ARGS --output-dirname=OUTPUT_DIR` to completion."""
    marker = uuid.uuid4().hex
    proc = subprocess.run(cli_command(args, output_dir), env=cli_env(cache_dir, marker, env),
                          capture_output=True, text=True, timeout=timeout, **popen)
    return CliRun(proc.returncode, proc.stdout, proc.stderr, output_dir, marker)


@pytest.fixture
def run_cli(tmp_path: Path, cli_cache: Path) -> Callable[..., CliRun]:
    """run_cli(*args, output_dir=None, env=None, timeout=300) -> CliRun."""

    def run(*args: str, output_dir: Path | None = None, **kwargs: Any) -> CliRun:
        return invoke_cli(args, output_dir or tmp_path / "output", cli_cache, **kwargs)

    return run


def marked_processes(marker: str) -> list[str]:
    """Live processes whose environment or command line carries `marker`."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if marker in " ".join(proc.info["cmdline"] or []) or proc.environ().get(MARKER_ENV) == marker:
                found.append(f"{proc.pid} {' '.join(proc.info['cmdline'] or [])[:120]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def assert_no_process_left(marker: str, within_s: float = 5.0) -> None:
    deadline = time.monotonic() + within_s
    while (left := marked_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"processes left behind: {left}"


def start_cli(args: list[str], output_dir: Path, cache: Path, env: dict[str, str] | None = None,
              prefix: tuple[str, ...] = ()) -> tuple[subprocess.Popen, str]:
    """The CLI in the background, its processes marked so a test can find (or miss) them later."""
    marker = uuid.uuid4().hex
    proc = subprocess.Popen([*prefix, *cli_command(args, output_dir)], env=cli_env(cache, marker, env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, marker


def wait_for(predicate: Callable[[], bool], timeout: float = 180, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
