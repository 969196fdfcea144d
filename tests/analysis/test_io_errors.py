"""A read that fails (EIO: /proc/self/mem stands in for a failing disk) is one line and exit 3
in every reader, naming the file that failed, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiment_runner.cli import main as cli_main

FAILING = "/proc/self/mem"  # a regular file whose first read fails with EIO
RESULTS = Path(__file__).parents[1] / "golden" / "results.jsonl"


@pytest.mark.parametrize(("argv", "prefix"), [
    (["report", FAILING], "experiment_runner report: error: "),
    (["report", str(RESULTS), FAILING], "experiment_runner report: error: "),
    (["compare", str(RESULTS), FAILING], "experiment_runner compare: error: "),
    (["history", FAILING], "experiment_runner history: error: "),
    (["export", FAILING, "--format=dynamo-csv", "-o", "{tmp}/csv"], "experiment_runner export: error: "),
    (["check-expected", FAILING, "--expected", "{tmp}/expected.csv"], "experiment_runner check-expected: error: "),
    (["merge", str(RESULTS), FAILING, "-o", "{tmp}/all.jsonl"], "experiment_runner merge: error: "),
])
def test_an_input_that_fails_to_read_is_exit_3_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         argv: list[str], prefix: str) -> None:
    code = cli_main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3, err
    assert err == [f"{prefix}cannot read results file {FAILING}: Input/output error"], err
    assert not any(tmp_path.iterdir()), "nothing was written"
