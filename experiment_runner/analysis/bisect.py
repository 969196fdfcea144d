"""`experiment_runner bisect`: from a change between two builds to the first bad one.

Environments are Python interpreters in build order (a virtual environment per nightly, say);
the experiment runs in each through that interpreter (`PYTHON -m experiment_runner`, so the
runner must be importable there: installed, or this checkout on its path), with `--processes N`,
into `<output>/<name>/`. The two ends are measured first and must differ; then each step halves
the range. A step is judged against the ends as `compare` judges two runs: Welch's t-test on the
logs of the per-process medians, and the step belongs to the end it cannot be told apart from
while it differs from the other (status and verification questions: the step ends ok or not,
PASS or not). A step that is neither is measured once more with twice the processes, then
called undecided and skipped. An environment that cannot run the experiment is skipped and
named, as `git bisect skip` does; the answer then says on which side of it the change may lie.

Every step's records stay in its folder (their `environment` says which versions ran; the
folder's `interpreter` file says which interpreter), so `report`, `compare` and `history` read
them, and rerunning the same command reuses every finished step: the runner's own resume finds
them done. A folder holding another interpreter's records is never reused. Before the first
step, the oldest environment's runner plans the run flags (`--dry-run`): they must select one
experiment. A step that fails (any non-zero exit of the runner) or outlives --step-timeout is
skipped; SIGINT or SIGTERM end the step's whole process group and bisect with no verdict.

With `--repro PATH` a step is instead `PYTHON PATH` in a fresh process (a repro.py `--minify`
wrote, or any script), judged as the minifier judges its repro: good when it exits 0, bad when it
exits non-zero naming the symptom (the one minified.jsonl recorded for that repro, --symptom, or
else any non-zero exit), skipped when it fails otherwise or outlives --step-timeout. Each runs in
a session of its own, judged when it exits, and everything it started is ended with it. Only the
pass -> fail question applies; its output's head and tail go to `<output>/<name>/repro.log`.

Exit status: 0 a first bad environment was named; 1 it could not be (the ends do not differ, or
environments in between could not be judged: the output names the range); 2 bad input or an
end that cannot run the experiment; 3 a file cannot be read; 130 / 143 stopped by SIGINT /
SIGTERM (rerun the same command to resume).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from experiment_runner.analysis.files import file_kind, read_small
from experiment_runner.analysis.loader import Row, load_rows
from experiment_runner.analysis.stats import welch_log_ps
from experiment_runner.core.flags import declared
from experiment_runner.core.minify import SIDECAR, exception_names, read_minified, repro_environment, shows_symptom
from experiment_runner.core.process_groups import ATTEMPT_TOKEN_ENV, kill_experiment
from experiment_runner.core.run_config import CONFIGS
from experiment_runner.errors import (
    EXIT_OK,
    EXIT_RESULTS_IO,
    EXIT_USAGE,
    ReportError,
    ReportParser,
    Stopped,
    analysis_command,
    stop,
)

QUESTIONS = ("time", "status", "verification")
# Exit status when no single first bad environment could be named (a range, or no change).
EXIT_UNDETERMINED = 1
DEFAULT_PROCESSES = 5
DEFAULT_STEP_TIMEOUT_S = 3600.0
# How long a step's runner has, after SIGTERM, to record its experiments as interrupted.
STOP_GRACE_S = 10.0
MAX_ENVS_BYTES = 2**20
# What a --repro step keeps of its output: the start, and the end, where the traceback is.
REPRO_HEAD_BYTES = 64 * 2**10
REPRO_TAIL_BYTES = 2**20
# How long a repro's output may take to drain once the repro and all it started are gone.
READER_GRACE_S = 5.0
# Names a step's folder can take: no path separator, no `.` or `..` (`g` and `./g` are one folder).
NAME = re.compile(r"(?!\.\.?$)[A-Za-z0-9._+-]+")


# Run flags bisect sets for each step itself, or that would make a step measure nothing: refused
# after `--` (the runner would take bisect's --output-dirname over the user's, or plan and exit).
OWNED_FLAGS = {
    "output_dirname": "each step writes into --output/NAME",
    "output_basename": "bisect reads each step's results.jsonl",
    "processes": "give bisect's own --processes",
    "dry_run": "a step must run the experiment; to see what the flags plan, run experiment_runner FLAGS --dry-run",
    "list_models": "a step must run the experiment; to see the models, run experiment_runner FLAGS --list-models",
}


def owned_flag(flags: Sequence[str]) -> str | None:
    """Why bisect cannot pass on one of these run flags, as the runner's parser reads them (an
    unambiguous prefix, `--flag=value`, a toggle's `--no-` form); None when it can."""
    spellings: dict[str, str] = {}
    for option in declared(*CONFIGS):
        for name in option.names:
            spellings[name] = option.name
            if option.flag.kind == "toggle" and name.startswith("--"):
                spellings["--no-" + name[2:]] = option.name
    for token in flags:
        if not token.startswith("--") or token == "--":
            continue
        given = token.split("=", 1)[0]
        fields = {spellings[given]} if given in spellings else {
            field for name, field in spellings.items() if name.startswith(given)}
        if len(fields) == 1 and (field := fields.pop()) in OWNED_FLAGS:
            return f"{token} is bisect's to set, not a run flag it passes on: {OWNED_FLAGS[field]}"
    return None


@dataclass(frozen=True)
class Environment:
    name: str
    python: str


@dataclass
class Step:
    index: int
    environment: Environment
    verdict: str  # good, bad, skipped, undecided
    row: Row | None = None
    p_good: float | None = None
    p_bad: float | None = None
    reason: str = ""
    seconds: float | None = None  # --repro: how long the repro ran
    exit_code: int | None = None  # --repro: its exit status (None: it did not end by itself)


@dataclass
class Bisection:
    environments: list[Environment]
    steps: list[Step] = field(default_factory=list)
    last_good: int | None = None
    first_bad: int | None = None
    skipped_between: list[int] = field(default_factory=list)
    message: str = ""


def read_environments(pairs: Sequence[str], envs_file: Path | None) -> list[Environment]:
    """--env NAME=PYTHON (repeated) or --envs FILE (`NAME PYTHON` per line, oldest first)."""
    found = []
    for pair in pairs:
        name, sep, python = pair.partition("=")
        if not sep or not name or not python:
            raise ReportError(f"--env {pair!r}: expected NAME=PATH/bin/python")
        found.append(Environment(name, python))
    if envs_file is not None:
        data = read_small(envs_file, "an environments file (`NAME PYTHON` per line)", MAX_ENVS_BYTES)
        try:
            lines = data.decode().splitlines()
        except UnicodeDecodeError:
            raise ReportError(f"--envs {envs_file} is not UTF-8 text: expected `NAME PYTHON` per line") from None
        for number, line in enumerate(lines, 1):
            if line.strip() and not line.lstrip().startswith("#"):
                parts = line.split()
                if len(parts) != 2:
                    raise ReportError(f"{envs_file}:{number}: expected `NAME PYTHON`, got {line.strip()!r}")
                found.append(Environment(*parts))
    names = [e.name for e in found]
    bad = next((name for name in names if not NAME.fullmatch(name)), None)
    if bad is not None:
        raise ReportError(f"environment name {bad!r} is not a folder name: use letters, digits, `.`, `_`, `+`, `-` "
                          "(no `/`, not `.` or `..`); each names its step's folder under --output")
    if len(found) < 2:
        raise ReportError("bisect needs at least two environments, oldest first (--env NAME=PYTHON or --envs FILE)")
    if len(set(names)) != len(names):
        raise ReportError(f"environment names must be unique: {names}")
    return found


def call(command: list[str], timeout_s: float, cwd: Path | None = None,
         env: dict[str, str] | None = None) -> tuple[int | None, str, str]:
    """Run `command` in its own process group: its exit status (None when it outlived
    `timeout_s`), stdout and stderr. Its whole group is ended whatever ends the call (the
    timeout, SIGINT, SIGTERM, an error of ours): no step outlives bisect."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                            cwd=cwd, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        return None, "", ""
    finally:
        running = proc.poll() is None
        kill_experiment(proc.pid, None, grace_s=STOP_GRACE_S if running else 0.0)
        if running:
            proc.communicate()


class CappedOutput:
    """A stream's first `head` and last `tail` bytes: what a repro printed, kept bounded (a repro
    printing 400 MB must not hold 400 MB here, nor write it to repro.log). The symptom a step is
    judged by is in the traceback at the end; the head says how the repro started."""

    def __init__(self, head: int = REPRO_HEAD_BYTES, tail: int = REPRO_TAIL_BYTES) -> None:
        self.head_limit, self.tail_limit = head, tail
        self.head, self.tail = bytearray(), bytearray()
        self.left_out = 0

    def feed(self, chunk: bytes) -> None:
        room = self.head_limit - len(self.head)
        self.head += chunk[:room]
        self.tail += chunk[room:] if room > 0 else chunk
        if len(self.tail) > self.tail_limit:
            self.left_out += len(self.tail) - self.tail_limit
            del self.tail[:len(self.tail) - self.tail_limit]

    def drain(self, fd: int) -> None:
        """Read `fd` to its end (every writer gone)."""
        while chunk := os.read(fd, 65536):
            self.feed(chunk)

    def text(self) -> str:
        gap = f"\n[... {self.left_out} bytes of output left out ...]\n".encode() if self.left_out else b""
        return bytes(self.head + gap + self.tail).decode(errors="replace")


def run_repro(command: list[str], timeout_s: float, cwd: Path, env: dict[str, str]) -> tuple[int | None, str]:
    """Run a repro in a session of its own, its stdout and stderr together, capped: its exit
    status (None when it outlived `timeout_s`) and output. Judged when the repro exits, not when
    its pipe closes: a descendant that left its group may hold the pipe. Then its group and
    every process carrying the step's token (which every descendant inherits) are killed, and
    the pipe's reader waits only for what was already written."""
    token = secrets.token_hex(8)
    output = CappedOutput()
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            cwd=cwd, env={**env, ATTEMPT_TOKEN_ENV: token}, start_new_session=True)
    assert proc.stdout is not None
    reader = threading.Thread(target=output.drain, args=(proc.stdout.fileno(),), daemon=True)
    reader.start()
    code: int | None = None
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pass
    finally:
        kill_experiment(proc.pid, token)
        proc.wait()
        reader.join(timeout=READER_GRACE_S)
        if not reader.is_alive():
            proc.stdout.close()
    return code, output.text()


class StepRunner:
    """Runs the experiment in one environment (or reuses its finished records) and reads them."""

    def __init__(self, run_flags: list[str], output: Path, processes: int,
                 timeout_s: float = DEFAULT_STEP_TIMEOUT_S) -> None:
        self.run_flags = run_flags
        self.output = output
        self.processes = processes
        self.timeout_s = timeout_s

    def command(self, environment: Environment, processes: int) -> list[str]:
        return [environment.python, "-m", "experiment_runner", *self.run_flags, f"--processes={processes}",
                f"--output-dirname={self.output / environment.name}", "--no-progress-bar"]

    def claim(self, environment: Environment) -> None:
        """Make the step's folder this interpreter's: its `interpreter` file names it (as given,
        made absolute, not resolved: two virtual environments link the same base interpreter).
        A folder with another interpreter's records, or records of no known one, is refused."""
        folder = self.output / environment.name
        python = os.path.abspath(shutil.which(environment.python) or environment.python)
        marker = folder / "interpreter"
        try:
            owner = marker.read_text().strip() if marker.is_file() else None
            if owner is None and (folder / "results.jsonl").exists():
                owner = "an unknown interpreter"
            if owner is not None and owner != python:
                raise ReportError(f"{folder} holds the records of {owner}, not of {python}: a step reuses only its "
                                  "own interpreter's records; give another --output")
            folder.mkdir(parents=True, exist_ok=True)
            marker.write_text(python + "\n")
        except OSError as exc:
            raise ReportError(f"cannot write {marker}: {exc.strerror or exc}", EXIT_RESULTS_IO) from None

    def call(self, command: list[str]) -> tuple[int | None, str, str]:
        return call(command, self.timeout_s)

    def planned(self, environment: Environment) -> None:
        """Refuse (exit 2) run flags that select other than one experiment, as the environment's
        runner plans them (`--dry-run`); an environment that cannot plan is left to its step."""
        try:
            code, out, err = self.call([*self.command(environment, 1), "--dry-run"])
        except OSError:
            return
        count = re.match(r"(\d+) experiment\(s\)", out)
        if code == EXIT_USAGE:
            tail = (err.strip().splitlines() or ["(no output)"])[-1]
            raise ReportError(f"{environment.name} refused the run flags: {tail}")
        if code == 0 and count is not None and int(count.group(1)) != 1:
            raise ReportError(f"the run flags select {count.group(1)} experiments; bisect needs one (an anchored "
                              "--filter and one value of every dimension: the line `history` prints for a change)")

    def measure(self, environment: Environment, processes: int) -> tuple[Row | None, str]:
        """The experiment's row in this environment (its newest run), or None and why not."""
        self.claim(environment)
        try:
            code, _, err = self.call(self.command(environment, processes))
        except OSError as exc:
            return None, f"cannot start {environment.python}: {exc.strerror or exc}"
        if code is None:
            return None, f"timed out after {self.timeout_s:g} s (--step-timeout); its processes were ended"
        results = self.output / environment.name / "results.jsonl"
        if code != 0 or not results.is_file():  # 1 is the runner's own failure: no result to judge
            tail = (err.strip().splitlines() or ["(no output)"])[-1]
            return None, f"exit status {code}: {tail}"
        rows = load_rows([results])
        row = rows[-1] if rows else None
        if row is None:
            return None, "no record"
        if row.status in ("error", "crashed") and (row.error_type or "").endswith(("ImportError", "NotFoundError",
                                                                                   "MissingDependency")):
            return None, f"{row.error_type}: {(row.error_message or '').splitlines()[0][:160]}"
        return row, ""


def minified_symptom(repro: Path) -> tuple[str, Path] | None:
    """The symptom the minifier checked `repro` for, when it is one of ours: a minified.jsonl in
    a folder above it whose block names this path (blocks name it relative to that folder).
    With the sidecar it came from; None for any other script."""
    target = repro.resolve()
    for folder in target.parents:
        sidecar = folder / SIDECAR
        if not sidecar.is_file():
            continue
        for block in reversed(list(read_minified(sidecar).values())):
            if block.get("repro") and block.get("symptom") and (folder / block["repro"]).resolve() == target:
                return str(block["symptom"]), sidecar
    return None


class ReproRunner:
    """Runs a repro script in one environment, in a fresh process, and judges it as the
    minifier judges its repro (core.minify.shows_symptom): bisect --repro's steps."""

    def __init__(self, repro: Path, symptom: str | None, output: Path, timeout_s: float) -> None:
        self.repro = repro.resolve()
        self.symptom = symptom
        self.output = output
        self.timeout_s = timeout_s

    def command(self, environment: Environment) -> list[str]:
        """The step's command line; the interpreter made absolute, as the step runs in its folder."""
        return [os.path.abspath(shutil.which(environment.python) or environment.python), str(self.repro)]

    def run(self, index: int, environment: Environment) -> Step:
        """One step: the repro's verdict in `environment`, how long it ran and how it ended. It
        runs in `<output>/<name>/` (what it writes stays there), its output in repro.log."""
        folder = self.output / environment.name
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ReportError(f"cannot write {folder}: {exc.strerror or exc}", EXIT_RESULTS_IO) from None
        started = time.monotonic()
        try:
            code, output = run_repro(self.command(environment), self.timeout_s, folder,
                                     repro_environment(os.environ))
        except OSError as exc:
            return Step(index, environment, "skipped", reason=f"cannot start {environment.python}: "
                                                              f"{exc.strerror or exc}")
        seconds = time.monotonic() - started
        try:
            (folder / "repro.log").write_text(output)
        except OSError as exc:
            raise ReportError(f"cannot write {folder / 'repro.log'}: {exc.strerror or exc}", EXIT_RESULTS_IO) from None
        step = Step(index, environment, "skipped", seconds=seconds, exit_code=code)
        if code is None:
            step.reason = f"timed out after {self.timeout_s:g} s (--step-timeout); its processes were ended"
        elif code == 0:
            step.verdict = "good"
        elif self.symptom is None:
            step.verdict, step.reason = "bad", "no symptom to look for: any non-zero exit counts as bad"
        elif shows_symptom(code, output, self.symptom):
            step.verdict, step.reason = "bad", f"raised {self.symptom}"
        else:
            raised = ", ".join(dict.fromkeys(exception_names(output))) or "nothing"
            step.reason = f"exit status {code}, raising {raised}, not {self.symptom}: another failure"
        return step


def narrow(count: int, step: Callable[[int], Step]) -> tuple[int, int]:
    """Halve the range between a good oldest and a bad newest of `count` environments, running
    `step` on the untried one nearest the middle; a skipped or undecided one is passed over.
    The last good and first bad indices."""
    good, bad = 0, count - 1
    untried = set(range(1, count - 1))
    while bad - good > 1:
        candidates = sorted((i for i in untried if good < i < bad), key=lambda i: (abs(i - (good + bad) / 2), i))
        if not candidates:
            break
        index = candidates[0]
        untried.discard(index)
        verdict = step(index).verdict
        if verdict == "good":
            good = index
        elif verdict == "bad":
            bad = index
    return good, bad


def bisect_repro(environments: list[Environment], runner: ReproRunner, echo: Callable[[str], None] = print
                 ) -> Bisection:
    """The first environment in which the repro reproduces, after one in which it runs clean."""
    result = Bisection(environments)

    def step(index: int) -> Step:
        done = runner.run(index, environments[index])
        result.steps.append(done)
        echo(describe_step(len(result.steps), done))
        return done

    ends = [step(0), step(len(environments) - 1)]
    cannot = next(((label, s) for label, s in zip(("oldest", "newest"), ends) if s.verdict == "skipped"), None)
    if cannot is not None:
        result.message = f"the {cannot[0]} environment cannot run it: {cannot[1].reason}"
        return result
    verdicts = (ends[0].verdict, ends[1].verdict)
    if verdicts != ("good", "bad"):
        result.message = "the ends do not differ: " + {
            ("bad", "bad"): "the repro reproduces in the oldest environment too",
            ("good", "good"): "the repro runs clean in the newest environment too",
        }.get(verdicts, "the repro reproduces in the oldest environment and runs clean in the newest "
                        "(a fail -> pass change; bisect looks for pass -> fail)")
        return result
    result.last_good, result.first_bad = narrow(len(environments), step)
    result.skipped_between = list(range(result.last_good + 1, result.first_bad))
    return result


def judge(question: str, row: Row, good: Row, bad: Row, alpha: float) -> tuple[str, float | None, float | None]:
    """good, bad or undecided, with the p-values against each end (time only)."""
    if question == "status":
        return ("good" if row.status == good.status else "bad"), None, None
    if question == "verification":
        return ("good" if row.verification_code == good.verification_code else "bad"), None, None
    if row.status != "ok" or len(row.process_medians) < 2:
        return "undecided", None, None
    p_good, p_bad = welch_log_ps([(row.process_medians, good.process_medians),
                                  (row.process_medians, bad.process_medians)])
    if p_good >= alpha > p_bad:
        return "good", p_good, p_bad
    if p_bad >= alpha > p_good:
        return "bad", p_good, p_bad
    return "undecided", p_good, p_bad


def ends_differ(question: str, good: Row, bad: Row, alpha: float, min_change: float) -> str:
    """Why the ends do not show the change asked about, or "" when they do."""
    if question == "status":
        return "" if good.status == "ok" and bad.status != "ok" else (
            f"the ends ended {good.status} and {bad.status}: no ok -> not-ok change")
    if question == "verification":
        return "" if good.verification_code == "PASS" and bad.verification_code != "PASS" else (
            f"the ends verified {good.verification_code} and {bad.verification_code}: no PASS -> not-PASS change")
    if good.status != "ok" or bad.status != "ok":
        return f"the ends ended {good.status} and {bad.status}: no timings to bisect"
    change = bad.median_per_iter_time_s / good.median_per_iter_time_s - 1.0
    (p,) = welch_log_ps([(good.process_medians, bad.process_medians)])
    if abs(change) < min_change or p >= alpha:
        return (f"the ends differ by {change:+.1%} (p = {p:.2g}): not a change of at least {min_change:.0%} "
                f"at alpha {alpha:g}")
    return ""


def bisect(environments: list[Environment], runner: StepRunner, question: str, alpha: float,
           min_change: float, echo=print) -> Bisection:
    result = Bisection(environments)

    def step(index: int) -> Step:
        env = environments[index]
        row, why = runner.measure(env, runner.processes)
        if row is None:
            done = Step(index, env, "skipped", reason=why)
        elif index in (0, len(environments) - 1):
            done = Step(index, env, "good" if index == 0 else "bad", row)
        else:
            verdict, p_good, p_bad = judge(question, row, ends[0], ends[1], alpha)
            if verdict == "undecided" and question == "time":
                row, why = runner.measure(env, 2 * runner.processes)
                verdict, p_good, p_bad = judge(question, row, ends[0], ends[1], alpha) if row else ("skipped", None,
                                                                                                      None)
            done = Step(index, env, verdict, row, p_good, p_bad, why)
        result.steps.append(done)
        echo(describe_step(len(result.steps), done))
        return done

    runner.planned(environments[0])
    ends: list[Row] = []
    for index in (0, len(environments) - 1):
        done = step(index)
        if done.row is None:
            result.message = f"the {'oldest' if index == 0 else 'newest'} environment cannot run it: {done.reason}"
            return result
        ends.append(done.row)
    why = ends_differ(question, ends[0], ends[1], alpha, min_change)
    if why:
        result.message = why
        return result
    result.last_good, result.first_bad = narrow(len(environments), step)
    result.skipped_between = list(range(result.last_good + 1, result.first_bad))
    return result


def describe_step(number: int, step: Step) -> str:
    head = f"step {number}: {step.environment.name} ({step.environment.python}): {step.verdict}"
    if step.seconds is not None:
        ended = "no exit" if step.exit_code is None else f"exit {step.exit_code}"
        return f"{head}; {ended} in {step.seconds:.1f} s" + (f" ({step.reason})" if step.reason else "")
    if step.row is None:
        return f"{head} ({step.reason})"
    figures = [f"status {step.row.status}", f"verification {step.row.verification_code}"]
    if step.row.median_per_iter_time_s:
        figures.insert(0, f"median {step.row.median_per_iter_time_s * 1e3:.4g} ms over "
                          f"{len(step.row.process_medians)} process(es)")
    if step.p_good is not None:
        figures.append(f"p vs good end {step.p_good:.2g}, vs bad end {step.p_bad:.2g}")
    return f"{head}; {', '.join(figures)}"


def render(result: Bisection, output: Path, again: Callable[[Environment], list[str]]) -> str:
    """The answer: the first bad environment (or the range, or why nothing was bisected), and
    the command (`again`) that runs each end again."""
    envs = result.environments
    out = []
    if result.message:
        out.append(f"bisect: nothing to bisect: {result.message}")
    else:
        first_bad, last_good = envs[result.first_bad], envs[result.last_good]
        if result.skipped_between:
            names = ", ".join(envs[i].name for i in result.skipped_between)
            out.append(f"bisect: the change lies between {last_good.name} (good) and {first_bad.name} (bad); "
                       f"it may be in {names}, which could not be judged (skipped or undecided)")
        else:
            out.append(f"bisect: first bad environment: {first_bad.name}; last good: {last_good.name}")
        seconds = [s.seconds for s in result.steps if s.seconds is not None]
        out.append(f"{len(result.steps)} step(s) in {sum(seconds):.1f} s, each step's repro.log in {output}"
                   if seconds else f"{len(result.steps)} step(s), records in {output}")
        for label, env in (("good", last_good), ("bad", first_bad)):
            out.append(f"  to see the {label} end again: {shlex.join(again(env))}")
    skipped = [s for s in result.steps if s.verdict == "skipped"]
    if skipped:
        out.append("skipped: " + "; ".join(f"{s.environment.name} ({s.reason})" for s in skipped))
    return "\n".join(out) + "\n"


DESCRIPTION = __doc__.split("\n\n", 1)[0] + """

    experiment_runner bisect --envs builds.txt -- --suite-name=torchbench --filter='^llama$' \\
        --accelerator=cuda --xla=None --dynamo=inductor --test=eval --precision=bf16

The run flags after `--` must name one experiment (an anchored --filter and one value of every
dimension: the line `history` and `compare` print for a change, without its leading command).
Or bisect a script, a repro.py `--minify` wrote say, in place of the experiment:

    experiment_runner bisect --envs builds.txt --repro output/EXPERIMENT/minify/repro.py"""


def build_parser() -> argparse.ArgumentParser:
    p = ReportParser(prog="experiment_runner bisect", description=DESCRIPTION,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", action="append", default=[], metavar="NAME=PYTHON",
                   help="an environment, oldest first (repeatable): a name and its Python interpreter")
    p.add_argument("--envs", type=Path, metavar="FILE", help="environments, one `NAME PYTHON` per line, oldest first")
    p.add_argument("--repro", type=Path, metavar="PATH",
                   help="bisect a script instead of an experiment: each step runs PYTHON PATH in a fresh process; "
                        "good when it exits 0, bad when it exits non-zero naming the symptom (no run flags, "
                        "--question, --processes, --min-change or --alpha)")
    p.add_argument("--symptom", metavar="TYPE",
                   help="with --repro: the exception type a bad step names (default: the one minified.jsonl "
                        "recorded for a repro --minify wrote, else any non-zero exit is bad)")
    p.add_argument("--question", choices=QUESTIONS,
                   help="what changed: time (a step of at least --min-change; the default), status (ok -> not ok) "
                        "or verification (PASS -> not PASS)")
    p.add_argument("--processes", type=int, metavar="N",
                   help=f"fresh processes per step (default {DEFAULT_PROCESSES})")
    p.add_argument("--min-change", type=float, help="smallest time change the ends must show (default 0.05)")
    p.add_argument("--alpha", type=float, help="significance level of each judgement (default 0.01)")
    p.add_argument("--output", type=Path, default=Path("bisect"), help="where the steps' records go")
    p.add_argument("--step-timeout", type=float, default=DEFAULT_STEP_TIMEOUT_S, metavar="SECONDS",
                   help="end a step (its whole process group) after this long and skip it (default %(default)g)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("run_flags", nargs=argparse.REMAINDER, help="-- then the run flags of the one experiment")
    return p


# The flags of an experiment's bisection, which --repro refuses: a script has no run flags to pass,
# one process per step, and only the pass -> fail question.
EXPERIMENT_ONLY = ("question", "processes", "min_change", "alpha")


def repro_runner(args: argparse.Namespace, flags: Sequence[str]) -> tuple[ReproRunner, str]:
    """The runner of `bisect --repro`, and a line saying which symptom makes a step bad and why."""
    given = [f"--{name.replace('_', '-')}" for name in EXPERIMENT_ONLY if getattr(args, name) is not None]
    if flags or given:
        what = "run flags after `--` do" if flags else f"{given[0]} does"
        raise ReportError(f"--repro bisects a script, not an experiment: {what} not apply (a step runs "
                          "PYTHON PATH once; good is exit 0, bad is the symptom)")
    try:
        mode = os.stat(args.repro).st_mode
    except FileNotFoundError:
        raise ReportError(f"--repro {args.repro}: no such file") from None
    except OSError as exc:
        raise ReportError(f"--repro {args.repro}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        raise ReportError(f"--repro {args.repro} is {file_kind(mode)}, not a script: give the repro.py to run")
    if args.symptom is not None and not args.symptom.isidentifier():
        raise ReportError(f"--symptom {args.symptom!r} is not an exception type's name (AccuracyError, say): a bad "
                          "step's output names the class alone; leave --symptom out to count any non-zero exit")
    if args.symptom is not None:
        symptom, source = args.symptom, "--symptom"
    elif (found := minified_symptom(args.repro)) is not None:
        symptom, source = found[0], f"the minifier's check of this repro ({found[1]})"
    else:
        symptom, source = None, ""
    line = (f"bisect --repro: a step is bad when {args.repro} exits non-zero naming {symptom} (from {source})"
            if symptom else f"bisect --repro: a step is bad on any non-zero exit of {args.repro} (no symptom: "
                            "not a repro minified.jsonl names, and no --symptom)")
    return ReproRunner(args.repro, symptom, args.output, args.step_timeout), line


@analysis_command("bisect")
def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    flags = args.run_flags[1:] if args.run_flags[:1] == ["--"] else args.run_flags
    if not (math.isfinite(args.step_timeout) and args.step_timeout > 0):
        raise ReportError("--step-timeout must be a positive number of seconds")
    if args.repro is not None:
        repro, symptom_line = repro_runner(args, flags)
    elif args.symptom is not None:
        raise ReportError("--symptom applies to --repro only: an experiment's step is judged on its record")
    else:
        if not flags:
            raise ReportError("give the experiment's run flags after `--` (the line `history` prints for a change)")
        owned = owned_flag(flags)
        if owned is not None:
            raise ReportError(owned)
        question = args.question or "time"
        processes = DEFAULT_PROCESSES if args.processes is None else args.processes
        alpha = 0.01 if args.alpha is None else args.alpha
        min_change = 0.05 if args.min_change is None else args.min_change
        if processes < 2:
            raise ReportError("--processes must be at least 2: a step is judged on per-process medians")
        if not (0.0 < alpha < 1.0 and math.isfinite(min_change) and min_change >= 0):
            raise ReportError("--alpha must be in (0, 1) and --min-change a number >= 0")
        if question == "verification" and "--verify" not in flags:
            flags = [*flags, "--verify"]  # the question needs a verification code
        runner = StepRunner(flags, args.output, processes, args.step_timeout)
    environments = read_environments(args.env, args.envs)
    quiet = args.format == "json"
    echo: Callable[[str], None] = (lambda line: None) if quiet else print
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        if args.repro is not None:
            echo(symptom_line)
            result = bisect_repro(environments, repro, echo=echo)
        else:
            result = bisect(environments, runner, question, alpha, min_change, echo=echo)
    except KeyboardInterrupt as exc:  # the step's process group is ended already (call)
        signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
        again = "start again: a repro's steps are rerun" if args.repro is not None else "resume"
        print(f"experiment_runner bisect: stopped by {signal.Signals(signum).name}: no verdict; finished steps "
              f"are kept in {args.output} (rerun the same command to {again})", file=sys.stderr)
        return 128 + signum
    finally:
        signal.signal(signal.SIGTERM, previous)
    if args.format == "json":
        print(json.dumps({
            "environments": [e.name for e in environments],
            "last_good": None if result.last_good is None else environments[result.last_good].name,
            "first_bad": None if result.first_bad is None else environments[result.first_bad].name,
            "undetermined": [environments[i].name for i in result.skipped_between], "message": result.message,
            "symptom": repro.symptom if args.repro is not None else None,
            "steps": [{"environment": s.environment.name, "verdict": s.verdict, "reason": s.reason,
                       "median_s": s.row.median_per_iter_time_s if s.row else None,
                       "process_medians": list(s.row.process_medians) if s.row else None,
                       "status": s.row.status if s.row else None, "p_good": s.p_good, "p_bad": s.p_bad,
                       "seconds": s.seconds, "exit_code": s.exit_code}
                      for s in result.steps],
        }, indent=2))
    elif args.repro is not None:
        sys.stdout.write(render(result, args.output, repro.command))
    else:
        sys.stdout.write(render(result, args.output, lambda env: runner.command(env, runner.processes)))
    if result.message:
        return EXIT_USAGE if "cannot run" in result.message else EXIT_UNDETERMINED
    return EXIT_UNDETERMINED if result.skipped_between else EXIT_OK
