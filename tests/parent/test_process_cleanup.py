"""The test suite's own process hygiene: it finds what it started wherever it is installed,
and a failing process test leaves nothing running."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import marked_processes, wait_for

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent

pytestmark = pytest.mark.e2e

FAILING_TEST = textwrap.dedent('''
    import sys
    from pathlib import Path

    import pytest

    sys.path.insert(0, {tests!r})
    pytest_plugins = ["conftest"]

    from conftest import marked_processes, start_cli, wait_for


    @pytest.mark.e2e
    def test_fails_with_a_stubborn_grandchild_running(tmp_path, cli_cache):
        proc, marker = start_cli(["--suite-name=faulty", "--filter=^hang$", "--accelerator=cpu", "--dynamo=None",
                                  "--test=eval", "--subprocess-timeout=600"], tmp_path / "out", cli_cache)
        Path({marker_file!r}).write_text(marker)
        wait_for(lambda: any("signal.SIG_IGN" in line for line in marked_processes(marker)),
                 what="the stubborn grandchild")
        Path({seen_file!r}).write_text("seen")
        assert False, "deliberate failure with the run still going"
''')


def deep_interpreter(tmp_path: Path) -> Path:
    """This virtual environment again, reached through a folder path of over 100 characters:
    its interpreter's path alone fills most of a command line's first 120 characters."""
    venv = tmp_path / ("d" * 90) / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text((Path(sys.prefix) / "pyvenv.cfg").read_text())
    (venv / "bin" / "python").symlink_to(getattr(sys, "_base_executable", sys.executable))
    (venv / "lib").symlink_to(Path(sys.prefix) / "lib")
    return venv / "bin" / "python"


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="needs a virtual environment to rebuild at a deep path")
def test_a_failing_process_test_from_a_deep_path_leaves_no_process(tmp_path: Path) -> None:
    python = deep_interpreter(tmp_path)
    assert len(str(python)) > 100
    marker_file, seen_file = tmp_path / "marker", tmp_path / "seen"
    test_file = tmp_path / "inner" / "test_inner.py"
    test_file.parent.mkdir()
    test_file.write_text(FAILING_TEST.format(tests=str(TESTS), marker_file=str(marker_file),
                                             seen_file=str(seen_file)))
    inner = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                            "--rootdir", str(test_file.parent), str(test_file)],
                           cwd=REPO, capture_output=True, text=True, timeout=600,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
    assert inner.returncode == 1, inner.stdout[-3000:] + inner.stderr[-3000:]
    assert "deliberate failure" in inner.stdout, inner.stdout[-3000:]
    assert seen_file.exists(), "the grandchild was not recognised from the deep interpreter path"
    marker = marker_file.read_text()
    wait_for(lambda: not marked_processes(marker), timeout=30, what="the failed test's processes to end")


def test_marked_processes_show_whole_command_lines(tmp_path: Path) -> None:
    """A word far into a long command line is still there to be found."""
    from conftest import MARKER_ENV, new_marker

    marker = new_marker("whole-line")
    code = "import time; x = '" + "p" * 300 + "'; time.sleep(600)  # signal.SIG_IGN"
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, MARKER_ENV: marker})
    try:
        wait_for(lambda: marked_processes(marker), timeout=30, what="the process")
        (line,) = marked_processes(marker)
        assert line.endswith("signal.SIG_IGN") and line.startswith(f"{proc.pid} ")
    finally:
        proc.kill()
        proc.wait()


def test_a_word_is_refused_as_a_marker(tmp_path: Path) -> None:
    """Markers are matched against every command line and what matches is killed: a word such
    as "x" would match the CI's own processes, so only new_marker()'s tokens are accepted."""
    from conftest import cli_env, new_marker

    for word in ("x", "second", "probe-1234"):
        with pytest.raises(ValueError, match="is not unique"):
            marked_processes(word)
        with pytest.raises(ValueError, match="is not unique"):
            cli_env(tmp_path, word)
    assert marked_processes(new_marker("fresh")) == []
