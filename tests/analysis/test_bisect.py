"""`experiment_runner bisect` over real environments: one virtual environment per "build",
each with its own version of a small plugin package (on top of this environment's packages),
whose model gets 30% slower, or starts giving wrong answers, from version K on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import cli_env, new_marker

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
FIXTURE = '''
import os, random, time
import torch
from benchmark_models.base import LoadRequest, ModelNotFound, Suite
from benchmark_models.model import BenchmarkModel

VERSION = {version}
SLOW_FROM = {slow_from}
WRONG_FROM = {wrong_from}
NOISE = float(os.environ.get("BISECT_FIXTURE_NOISE", "0"))


class FixtureSuite(Suite):
    name = "bisected"
    source = "builtin"

    def model_names(self):
        return ["paced", "wrong"]

    def load(self, request: LoadRequest) -> BenchmarkModel:
        if request.model_name not in self.model_names():
            raise ModelNotFound(request.model_name)
        module = torch.nn.Linear(4, 2).to(request.device)
        inputs = torch.randn(2, 4, device=request.device)
        if request.model_name == "paced":
            # process-to-process noise: one draw per process, as a host's would be; 20 ms, long
            # beside the milliseconds a busy host's scheduler adds to a sleep
            pace = 0.02 * (1.3 if VERSION >= SLOW_FROM else 1.0) * random.Random(os.getpid()).lognormvariate(0, NOISE)
            return BenchmarkModel(module=module, args=(inputs,), batch_size=2, source="builtin",
                                  forward=lambda m, args, kwargs: (time.sleep(pace), m(*args))[1])
        wrong = VERSION >= WRONG_FROM  # a compiler bug: only the compiled model's answer is off

        def forward(m, args, kwargs):
            out = m(*args)
            return out + 1.0 if wrong and torch.compiler.is_compiling() else out
        return BenchmarkModel(module=module, args=(inputs,), batch_size=2, source="builtin", forward=forward)
'''


def make_environments(root: Path, count: int, slow_from: int, wrong_from: int, broken: int | None) -> Path:
    """`count` virtual environments on top of this one's packages; environment `broken` lacks the
    plugin. Returns the --envs file."""
    site = sysconfig.get_paths()["purelib"]
    lines = []
    for version in range(count):
        env = root / f"v{version}"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
        (env_site,) = (env / "lib").glob("python*/site-packages")
        (env_site / "base.pth").write_text(f"import site; site.addsitedir({site!r})\n{REPO}\n")
        if version != broken:
            (env_site / "bisect_fixture.py").write_text(
                FIXTURE.format(version=version, slow_from=slow_from, wrong_from=wrong_from))
        lines.append(f"v{version} {env / 'bin' / 'python'}")
    envs = root / "envs.txt"
    envs.write_text("\n".join(lines) + "\n")
    return envs


def bisect(envs: Path, output: Path, cache: Path, model: str, *extra: str, noise: float = 0.0, dynamo: str = "None"):
    env = cli_env(cache, new_marker("bisect"), {"EXPERIMENT_RUNNER_SUITES": "bisected=bisect_fixture:FixtureSuite",
                                                 "BISECT_FIXTURE_NOISE": str(noise)})
    command = [sys.executable, "-m", "experiment_runner", "bisect", "--envs", str(envs), "--output", str(output),
               "--format", "json", *extra, "--", "--suite-name=bisected", f"--filter=^{model}$", "--accelerator=cpu",
               "--xla=None", f"--dynamo={dynamo}", "--test=eval", "--precision=fp32", "--repeat=3"]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else None, proc.stderr


def test_a_noisy_slowdown_is_found_around_a_broken_build_and_resumed(tmp_path: Path, cli_cache: Path) -> None:
    """8 builds, 30% slower from v5 on, 5% process-to-process noise, v3 cannot import the plugin:
    bisect names v5 within 3 steps between the ends, names v3 as skipped, writes every step's
    records; the same command again runs nothing new."""
    envs = make_environments(tmp_path / "envs", 8, slow_from=5, wrong_from=99, broken=3)
    out = tmp_path / "bisect"
    code, result, stderr = bisect(envs, out, cli_cache, "paced", noise=0.05)
    assert code == 0, (stderr, result)  # on 1, the steps' verdicts say which stayed undecided
    assert (result["last_good"], result["first_bad"]) == ("v4", "v5"), result
    middle = [s for s in result["steps"] if s["environment"] not in ("v0", "v7")]
    assert len(middle) <= 3, result["steps"]
    assert all(s["verdict"] in ("good", "bad", "skipped") for s in result["steps"])
    for s in result["steps"]:
        if s["environment"] == "v3":
            assert s["verdict"] == "skipped" and "bisect_fixture" in s["reason"]
        else:
            records = [json.loads(line) for line in (out / s["environment"] / "results.jsonl").read_text().splitlines()]
            assert len(records) >= 5 and {r["environment"]["python"] for r in records}
    sizes = {p: p.stat().st_size for p in out.glob("*/results.jsonl")}
    code, again, stderr = bisect(envs, out, cli_cache, "paced", noise=0.05)
    assert code == 0 and (again["last_good"], again["first_bad"]) == ("v4", "v5"), stderr
    assert {p: p.stat().st_size for p in out.glob("*/results.jsonl")} == sizes, "finished steps were run again"


def test_a_pass_to_fail_change_names_the_first_failing_build(tmp_path: Path, cli_cache: Path) -> None:
    """From v2 on the compiled model (dynamo's eager backend) gives a wrong answer: FAIL."""
    envs = make_environments(tmp_path / "envs", 6, slow_from=99, wrong_from=2, broken=None)
    code, result, stderr = bisect(envs, tmp_path / "bisect", cli_cache, "wrong", "--question=verification",
                                  "--processes=2", dynamo="eager")
    assert code == 0, stderr
    assert (result["last_good"], result["first_bad"]) == ("v1", "v2"), result


def test_ends_that_do_not_differ_are_said(tmp_path: Path, cli_cache: Path) -> None:
    envs = make_environments(tmp_path / "envs", 2, slow_from=99, wrong_from=99, broken=None)
    code, result, stderr = bisect(envs, tmp_path / "bisect", cli_cache, "paced", "--processes=3")
    assert code == 1, stderr
    assert result["first_bad"] is None and result["message"].startswith("the ends differ by ")


@pytest.mark.parametrize("args, message", [
    (["--env", "only=python"], "needs at least two environments"),
    (["--env", "a=python", "--env", "a=python"], "names must be unique"),
    (["--env", "a"], "expected NAME=PATH/bin/python"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "experiment_runner", "bisect", *args, "--", "--suite-name=dummy"],
                          capture_output=True, text=True, timeout=120, env={**os.environ})
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
