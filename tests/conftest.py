"""Shared fixtures: run the real command line in a subprocess, isolated from the user's files.

Every run gets its own output folder, a host-capabilities cache shared by the session but
not with the user (XDG_CACHE_HOME), tests/support on PYTHONPATH (test-only suites such as
`faulty`), and a marker in its environment so that leftover processes can be found.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import pytest

SUPPORT = Path(__file__).parent / "support"
# The study scripts under benchmarks/ import each other by file name, as they do when run; tests
# import them either way (`import paired_vs_harness`, `from benchmarks.nightly_history import`).
sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
# Every test is in exactly one tier (pyproject.toml lists them; docs/developer-guide.md says what
# each costs). A test with no tier marker is a unit test.
TIERS = ("unit", "e2e", "cluster", "browser", "xla", "slow")
MARKER_ENV = "EXPERIMENT_RUNNER_TEST_MARKER"
FAULTY_SUITE = "faulty=faulty_suite:FaultySuite"


def pytest_configure(config: pytest.Config) -> None:
    """Give SIGINT back its default when the suite was started with it ignored: a shell starts a
    background job (`bash .ci/run &`, nohup) with SIGINT ignored, every process started from here
    would inherit that, and the tests that stop a run, a bisect or a Ray task with SIGINT (Ray
    cancels through `_thread.interrupt_main`, which does nothing where SIGINT is ignored) would
    wait for a stop that never comes."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put unmarked tests in the unit tier (before `-m` selects), and refuse two tiers on one test."""
    for item in items:
        tiers = {mark.name for mark in item.iter_markers() if mark.name in TIERS}
        if not tiers:
            item.add_marker(pytest.mark.unit)
        elif len(tiers) > 1:
            raise pytest.UsageError(f"{item.nodeid} is marked with several tiers: {sorted(tiers)}")


_TIER_SECONDS: dict[str, float] = {}
# Skip reasons that say what to install (the browser tests': "...; install it: sudo apt-get ..."), with
# how many tests gave each: pytest shows a skip's reason only under -rs, and a skip nobody reads
# leaves a test unrun for good.
INSTALL_HINT = "install it: "
_INSTALL_SKIPS: dict[str, int] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add each phase's time (set-up holds module fixtures) to its test's tier; keep the skips that
    name an install line."""
    tier = next((name for name in TIERS if name in report.keywords), None)
    if tier is not None:
        _TIER_SECONDS[tier] = _TIER_SECONDS.get(tier, 0.0) + report.duration
    if report.skipped and isinstance(report.longrepr, tuple) and INSTALL_HINT in report.longrepr[2]:
        reason = report.longrepr[2].removeprefix("Skipped: ")
        _INSTALL_SKIPS[reason] = _INSTALL_SKIPS.get(reason, 0) + 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The time each tier took, for docs/developer-guide.md's table; and each install line a skip
    gave, in a plain run too (-rs lists them itself)."""
    if _TIER_SECONDS:
        spent = ", ".join(f"{tier} {seconds:.0f} s" for tier, seconds in sorted(_TIER_SECONDS.items()))
        terminalreporter.write_line(f"time per tier: {spent}")
    if not terminalreporter.hasopt("skipped"):
        for reason, count in _INSTALL_SKIPS.items():
            terminalreporter.write_line(f"{count} skipped: {reason}")


def _no_process(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("a unit test started a process: mark it e2e (or cluster, browser, xla)")


@pytest.fixture(scope="session", autouse=True)
def font_cache() -> None:
    """matplotlib runs fc-list (a process) to build its font cache the first time it is imported
    on a host; build it before any unit test forbids processes, whatever order tests run in."""
    try:
        import matplotlib.font_manager  # noqa: F401
    except ImportError:
        pass


@pytest.fixture(autouse=True)
def unit_tests_start_no_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The unit tier's promise, enforced: no real process (fixtures of wider scope set up before)."""
    if request.node.get_closest_marker("unit") is not None:
        monkeypatch.setattr(subprocess.Popen, "__init__", _no_process)


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


def dummy_driver(tmp_path: Path, test: str = "eval", dynamo: str | None = "eager",
                  compile_options: str = "default") -> Any:
    """The dummy model's experiment (fp32, batch 4, --verify) as the verifier gets it from the child."""
    from experiment_runner.child.devices import DeviceRuntime
    from experiment_runner.child.driver import ExperimentDriver
    from experiment_runner.core.matrix import Experiment, ExperimentConfig
    from experiment_runner.core.options import RunOptions

    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo=dynamo, test=test,
                              precision="fp32", batch_size=4, compile_options=compile_options)
    return ExperimentDriver(Experiment("dummy", "dummy", config), RunOptions(verify=True), DeviceRuntime(config),
                             tmp_path)


@pytest.fixture
def verifier_runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """Every fresh copy the verifier's procedure runs: (precision, compiled)."""
    from verifier import run as verifier_run

    runs: list[tuple[str, bool]] = []
    real = verifier_run.run_once

    def counted(harness: Any, precision: str, compiled: bool) -> Any:
        runs.append((precision, compiled))
        return real(harness, precision, compiled)

    monkeypatch.setattr(verifier_run, "run_once", counted)
    return runs


# The markers handed out during the current test: `end_marked_processes` ends what carries them.
_MARKERS: list[str] = []
# A marker is matched against every command line on the machine, and what matches is killed:
# a word such as "x" or "second" would match (and kill) the CI's own processes.
_UNIQUE_MARKER = re.compile(r"(?:[a-z][a-z-]*-)?[0-9a-f]{32}")


def new_marker(label: str = "run") -> str:
    """A marker no process outside this test can carry: `label-<uuid>`."""
    return f"{label}-{uuid.uuid4().hex}"


def unique_marker(marker: str) -> str:
    if not _UNIQUE_MARKER.fullmatch(marker):
        raise ValueError(f"test marker {marker!r} is not unique (use new_marker()): it could match other processes")
    return marker


def cli_env(cache_dir: Path, marker: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a CLI run whose processes carry `marker` (and are ended after the test)."""
    _MARKERS.append(unique_marker(marker))
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
    """Live processes whose environment or command line carries `marker`, as "PID COMMAND LINE".

    The whole command line: tests look for words in it, and a long interpreter path (a clone
    or a virtual environment deep in the file system) must not push them out of view."""
    import psutil

    unique_marker(marker)
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if marker in " ".join(proc.info["cmdline"] or []) or proc.environ().get(MARKER_ENV) == marker:
                found.append(f"{proc.pid} {' '.join(proc.info['cmdline'] or [])}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def assert_no_process_left(marker: str, within_s: float = 5.0) -> None:
    deadline = time.monotonic() + within_s
    while (left := marked_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"processes left behind: {[line[:200] for line in left]}"


def kill_marked(marker: str) -> list[str]:
    """SIGKILL every live process carrying `marker`; what was killed, as marked_processes says it."""
    import psutil

    left = marked_processes(marker)
    for line in left:
        try:
            psutil.Process(int(line.split()[0])).kill()
        except psutil.NoSuchProcess:
            continue
    return left


@pytest.fixture(autouse=True)
def end_marked_processes() -> Iterator[None]:
    """After every test, end the processes it started through the CLI helpers, passed or failed.

    A failed process test would otherwise leave its runner, fork server, reaper and models
    running, loading the machine for every test after it. Tests that care assert that nothing
    was left (assert_no_process_left) before this runs."""
    _MARKERS.clear()
    yield
    for marker in _MARKERS:
        for _ in range(5):  # a runner killed mid-launch may have started one more child meanwhile
            if not kill_marked(marker):
                break
    _MARKERS.clear()


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


# --- every record our runner wrote during the session follows the record schema ----------

@pytest.fixture(scope="session", autouse=True)
def records_follow_the_schema(tmp_path_factory: pytest.TempPathFactory):
    """At the end of the session, validate every record our runner wrote under pytest's base
    temp dir against experiment_runner/core/record.schema.json; one that does not follow it
    fails the session, naming its file, line and what is wrong.

    Which lines are ours: a JSON object with `schema_version` and `timings.finished_at`, the
    stamp build_record puts on every record as it builds it. Skipped on purpose: torn or
    corrupt lines (tests write them to exercise the tolerant readers), records without
    `schema_version` (the reference runner's, which tests write as legacy input), and the
    partial records tests write by hand to feed report, compare or --resume (they carry
    `schema_version` but no `timings.finished_at`).
    """
    yield
    import warnings

    from experiment_runner.core.record_schema import record_errors
    from experiment_runner.core.results import RecordWarning, iter_records

    warnings.simplefilter("ignore", RecordWarning)  # tests write misreadable records on purpose; judged below
    failures = []
    for path in sorted(p for p in tmp_path_factory.getbasetemp().rglob("*.jsonl") if p.is_file()):
        # The runner's own bounded reader: tests write torn, overlong and deeply nested lines on purpose.
        for index, record in enumerate(iter_records(path, bad_lines=[]), start=1):
            if "schema_version" not in record:
                continue
            timings = record.get("timings")
            if not isinstance(timings, dict) or "finished_at" not in timings:
                continue
            failures.extend(f"{path} (record {index}): {error}" for error in record_errors(record))
    if failures:
        pytest.fail(f"{len(failures)} schema violation(s) in records the runner wrote "
                    "(experiment_runner/core/record.schema.json):\n" + "\n".join(failures[:50]), pytrace=False)

