"""The analysis recipes of docs/analysis.md are code too: run them against the golden results file.

Also checks that README.md keeps the two fresh-machine commands and the marker `.ci/run` reads
the test command after.
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from experiment_runner.core import dashboards

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
ANALYSIS = (REPO / "docs" / "analysis.md").read_text()
GOLDEN = REPO / "tests" / "golden" / "results.jsonl"


def fenced_blocks(heading: str, language: str, text: str = ANALYSIS) -> list[str]:
    """The code blocks of one section (a heading of level 2 or more, up to the next such heading;
    a line starting with a single '#' is a comment in the recipes, never a heading)."""
    parts = re.split(rf"^##+ {re.escape(heading)}\n", text, maxsplit=1, flags=re.M)
    assert len(parts) == 2, f"no section {heading!r}"
    section = re.split(r"^##+ ", parts[1], maxsplit=1, flags=re.M)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


def test_pandas_recipes_run_on_a_real_results_file(tmp_path, monkeypatch):
    (code,) = fenced_blocks("pandas recipes", "python")
    shutil.copy(GOLDEN, tmp_path / "results.jsonl")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code.replace("output/results.jsonl", "results.jsonl"), "docs/analysis.md pandas recipes", "exec"),
         namespace)
    assert len(namespace["df"]) > 0 and "speedup" in namespace["runs"]
    assert namespace["runs"]["speedup"].notna().any()
    assert "per_iter_time" in namespace["samples"]


@pytest.mark.e2e
def test_jq_recipes_run_on_a_real_results_file(tmp_path):
    (code,) = fenced_blocks("jq recipes", "bash")
    shutil.copy(GOLDEN, tmp_path / "results.jsonl")
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.split() == ["6", "20250101T000000Z-aaaaaa"] for line in lines)
    failures = [line for line in lines if line.startswith("{")]
    # the golden file retries a failed nanogpt experiment: only its last record counts
    assert sorted(f.split('"status":"')[1].split('"')[0] for f in failures) == ["crashed", "timeout"]
    # compile time comes from measurements: llama's recorded 12.5 s in the second run
    assert any(line.split("\t")[:2] == ["torchbench/llama/cpu-None-inductor-eval-fp32-bsdefault", "12.5"]
               for line in lines)


def test_the_two_fresh_machine_commands_are_there_and_ci_runs_the_test_one():
    assert "experiment_runner --suite-name=torchbench --accelerator=cpu --filter=llama" in README
    ci = (REPO / ".ci" / "run").read_text()
    assert "<!-- ci:test-command -->" in README and "ci:test-command" in ci


@pytest.mark.e2e
def test_ci_extracts_the_readme_test_command():
    """The awk program of .ci/run finds exactly the fenced block after the marker."""
    ci = (REPO / ".ci" / "run").read_text()
    program = re.search(r"awk '(.*?)' README\.md", ci, flags=re.S)
    assert program, ".ci/run no longer extracts the test command with awk"
    proc = subprocess.run(["awk", program.group(1), "README.md"], cwd=REPO, capture_output=True, text=True,
                          check=True)
    command = proc.stdout.strip()
    assert command.startswith("python3 -m venv .venv") and command.endswith("python -m pytest"), command
    assert len(command.splitlines()) == 1


def test_the_cron_recipe_alerts_once_on_the_night_after_a_step(tmp_path, capsys):
    """The history command of the docs' crontab line, run night by night over synthetic nights
    with a 20% step at night K on one experiment: exit 0 before K; at K the step is shown as
    suspected (exit 0: one night is not yet a change); exit 1 at K+1, the night it is found;
    exit 0 after, though the regression is still listed."""
    import json
    import shlex

    from benchmarks.nightly_history import HistorySpec, night_folder, write_history
    from experiment_runner.cli import main as cli_main

    (crontab,) = [line for block in fenced_blocks("history: nights, not pairs", "bash")
                  for line in block.splitlines() if line.startswith("0 2 * * *")]
    command = shlex.split(crontab.rsplit("; ", 1)[1])
    assert command[:3] == ["experiment_runner", "history", "nightly/"], command
    nights, step_night, stepped = 16, 12, "torchbench/model0001/cpu-None-inductor-eval-fp32-bsdefault"
    source = tmp_path / "generated"
    write_history(source, HistorySpec(nights=nights, models=3, seed=5, step_fraction=0.0, failure_fraction=0.0))
    for night in range(nights):  # compile times held constant: the step is the only change
        path = source / night_folder(night) / "results.jsonl"
        records = [json.loads(line) for line in path.read_text().splitlines()]
        for record in records:
            record["measurements"]["compile_time_s"] = 10.0
            if record["experiment_id"] == stepped and night >= step_night:
                record["metrics"]["per_iter_time"] = [t * 1.2 for t in record["metrics"]["per_iter_time"]]
                record.pop("stats", None)
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    codes = {}
    for tonight in range(8, nights):
        folder = tmp_path / f"upto{tonight}" / "nightly"
        for night in range(tonight + 1):
            shutil.copytree(source / night_folder(night), folder / night_folder(night))
        argv = [str(folder) if arg == "nightly/" else str(folder / "index.html") if arg == "nightly/index.html"
                else arg for arg in command[1:]]
        codes[tonight] = cli_main(argv)
        out = capsys.readouterr().out
        if tonight == step_night:
            line = next(line for line in out.splitlines() if f"time         {stepped}:" in line)
            assert line.split()[2] == "SUSPECTED" and "first bad run 20250113T020000Z-00000c," in line, line
            assert 15 < float(line.split(": +", 1)[1].split("%")[0]) < 25, line
    assert codes == {n: int(n == step_night + 1) for n in range(8, nights)}, codes


def test_the_multi_gpu_nightly_runs_what_the_runner_accepts(tmp_path):
    """docs/user-guide.md's nightly: its run command plans the dashboard's CUDA configurations with
    the flags as the runner declares them (the GPUs themselves are not needed to plan)."""
    from experiment_runner.cli import parse_config

    guide = (REPO / "docs" / "user-guide.md").read_text()
    (block,) = fenced_blocks("A nightly on a multi-GPU host", "bash", guide)
    (run,) = re.findall(r"experiment_runner (--suite-name=\$S [^>]*?)\s*>", block)
    argv = run.replace("$S", "timm").replace("$TS", "1764288000").replace("$N", str(tmp_path))
    assert r"D=$([ $(date +\%u) = 7 ] && echo cuda || echo cuda-daily)" in block  # max-autotune on Sundays
    for night in ("cuda", "cuda-daily"):
        config = parse_config([*argv.replace("$D", night).split(), "--dry-run"])
        assert config.matrix.dashboard == (night,) and config.session.max_parallel == 8
    weekly = set(dashboards.groups()["cuda"]) - set(dashboards.groups()["cuda-daily"])
    assert weekly == {"inductor_max_autotune", "inductor_with_cudagraphs_freezing_autotune"}
    for command in ("check-expected $N/$S --pytorch", "export $N/$S --format=dynamo-csv -o $N/upload-$S/",
                    "history nightly/ --html nightly/index.html --window 1"):
        assert f"experiment_runner {command}" in block
