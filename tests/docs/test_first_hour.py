"""The README's first hour, as a new user types it: every command of "Fresh machine" and
"Common uses" runs in this environment (the README's install), without a traceback and
without pointing at a command that does not exist.

Run commands are planned (`--dry-run`): what they would time is the job of the other tests,
and a cluster or GPU is not here. The analysis commands read real records from two quick runs
and two nights. The install itself is the README's test command, which CI runs first.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import cli_command, cli_env, new_marker

from experiment_runner.cli import SUBCOMMANDS

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()

pytestmark = pytest.mark.e2e


def section(heading: str) -> str:
    return re.split(r"^## ", README.split(f"## {heading}\n", 1)[1], maxsplit=1, flags=re.M)[0]


def readme_commands() -> list[str]:
    """The experiment_runner and jq lines of the two first sections, comments dropped; the
    fresh-machine line is cut to its experiment_runner part (the rest is the install)."""
    lines = []
    for heading in ("Fresh machine: two commands", "Common uses"):
        for block in re.findall(r"```bash\n(.*?)```", section(heading), flags=re.S):
            for line in block.splitlines():
                line = line.split("  #", 1)[0].strip()
                if "experiment_runner " in line and "&&" in line:
                    line = line.rsplit("&&", 1)[1].strip()
                if line.startswith(("experiment_runner ", "jq ")) or re.match(r"[A-Z_]+=\S+ experiment_runner ", line):
                    lines.append(line)
    return lines


def run(line: str, cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    """One README line in a shell, `experiment_runner` being this checkout's CLI."""
    words = shlex.split(line.replace("$(date +%F)", "2026-11-24").replace("$i", "0"))
    env = {}
    while re.match(r"[A-Z_]+=", words[0]):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    out = None
    if ">" in words:
        out, words = cwd / words[words.index(">") + 1], words[:words.index(">")]
    if words[0] == "jq":
        proc = subprocess.run(words, cwd=cwd, capture_output=True, text=True, timeout=120)
    else:
        args = words[1:]
        if not args or args[0] not in SUBCOMMANDS:
            args.append("--dry-run")
        command = cli_command(args, cwd / "output")[:-1]  # keep the README's own output options
        proc = subprocess.run(command, cwd=cwd, env=cli_env(cache, new_marker("first-hour"), env), capture_output=True,
                              text=True, timeout=300)
    if out is not None:
        out.write_text(proc.stdout)
    return proc


def nonexistent_commands(text: str) -> list[str]:
    """`experiment_runner WORD` where WORD is neither a subcommand nor a flag."""
    return [word for word in re.findall(r"experiment_runner ([a-z][\w-]*)", text) if word not in SUBCOMMANDS]


def test_the_readme_commands_run_here(tmp_path: Path, cli_cache: Path) -> None:
    assert shutil.which("jq"), "the README's jq line needs jq (.ci/run installs it)"
    lines = readme_commands()
    assert len(lines) >= 12, lines
    # Records for the analysis lines: two runs in output/, two nights, the shard files.
    for extra in ([], ["--no-resume"]):
        quick = subprocess.run(cli_command(["--suite-name=dummy", "--accelerator=cpu", "--dynamo=None",
                                            "--test=eval", "--repeat=2", *extra], tmp_path / "output"),
                               cwd=tmp_path, env=cli_env(cli_cache, new_marker("first-hour")), capture_output=True, text=True,
                               timeout=300)
        assert quick.returncode == 0, quick.stderr
    results = tmp_path / "output" / "results.jsonl"
    for name in ("last_night.jsonl", "tonight.jsonl", *(f"shard{i}.jsonl" for i in range(4))):
        shutil.copy(results, tmp_path / name)
    for night in ("2026-11-23", "2026-11-24"):
        (tmp_path / "output" / "nightly" / night).mkdir(parents=True)
        shutil.copy(results, tmp_path / "output" / "nightly" / night / "results.jsonl")

    for line in lines:
        proc = run(line, tmp_path, cli_cache)
        said = proc.stdout + proc.stderr
        assert "Traceback" not in said, f"{line}\n{said}"
        assert proc.returncode in (0, 1), f"{line}: exit {proc.returncode}\n{said[-2000:]}"
        assert proc.returncode == 0 or line.split()[1] in ("compare", "history"), f"{line}\n{said[-2000:]}"
        assert nonexistent_commands(said) == [], f"{line}\n{said[-2000:]}"
    # The pages land under output/ (ignored by git), not as untracked files in a checkout.
    assert (tmp_path / "output" / "report.html").read_text().lstrip().lower().startswith("<!doctype html")
    assert (tmp_path / "all.jsonl").exists() and (tmp_path / "output" / "nightly" / "index.html").exists()
    assert not (tmp_path / "report.html").exists() and not (tmp_path / "nightly").exists()
