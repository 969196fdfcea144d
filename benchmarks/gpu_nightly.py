"""A GPU nightly that fits one device command, written up as records and a markdown summary.

A lent GPU comes for one command of at most 10 minutes, 15 minutes of device time in all, on a bare
machine each time: nothing this script writes survives into a later lease, so every step must fit
this one command. It runs the steps in order, each a process of its own with its own timeout,
under one deadline (--budget, 540 s: the command's 600 s less a minute for start-up and the
transfer back), and one failing or timed-out step never stops the next. After every step the
summary is written again, so a command cut short still leaves the steps it ran and the ones it
did not reach. Timeouts come from the figures of the H200 lease (docs/benchmarks/cuda_check.md: a
cold inductor training compile of llama 45 s, one timm inference compile 23.6 s), with margin.

First, the three checks the CUDA review asks for:
- check-determinism: one huggingface model in PyTorch's inductor job, training, verified: its eager
  pair must agree bit for bit under the harness's determinism settings (not NONDETERMINISTIC_EAGER_RUN);
- check-cudagraph-outputs: the dummy model's inductor training on CUDA (CUDA graphs on) with
  --repeat=3: the kept losses must be read before a later replay overwrote them (status ok);
- check-aot-load: AOT Inductor's package built and loaded on the device's torch; a loader crash
  must stay a `crashed` record with the native message.
Then:
- environment: torch, its CUDA and the device;
- oom: a deliberate CUDA out-of-memory (a batch no device holds), which must be recorded `oom`;
- forkserver: eager and inductor experiments forked from the fork server on CUDA;
- mission: `--suite-name=torchbench --accelerator=cuda --filter=llama`;
- inductor-timm: one timm model in PyTorch's `inductor` job, inference and training, verified, with
  the harness's columns its warm-ups give on CUDA (device memory not 0; calls_captured dynamo's count);
- expected-huggingface, expected-timm: `check-expected --pytorch` on check-determinism's and
  inductor-timm's records;
- harness: one model's speedup beside PyTorch's own harness (benchmarks/paired_vs_harness.py),
  where a dynamobench folder can be had (--harness, $DYNAMOBENCH_DIR, or a pytorch/benchmark
  checkout at ./torchbench or ../benchmark), and only if the budget still holds its timeout.

Nothing needs installing from a fresh copy of the tree: every command runs with the tree on
PYTHONPATH and the device's own torch.

    PYTHONPATH=. python benchmarks/gpu_nightly.py OUT [--budget 540] [--harness PATH] [--dry-run]

Writes OUT/summary.md, OUT/summary.json, each step's records (OUT/<step>/results.jsonl) and output
(OUT/logs/). Exit status 0 when every step holds, 1 otherwise, 2 without CUDA; --dry-run prints the
budget, the steps with their timeouts, checks the runner's flags of each, and runs nothing.
`--rows-out OUT/row.jsonl` keeps the run's outcomes as one row; copied under
docs/benchmarks/data/cuda_check/, it is what `--standing` (the head of docs/benchmarks/cuda_check.md)
reads: each step's last result on a GPU, or that it never ran on one.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import kept_rows

STUDY = "cuda_check"
ROOT = Path(__file__).resolve().parents[1]
# One model per suite that PyTorch's inductor inference and training files both list; four (two
# models, two tests) do not fit beside the checks.
HUGGINGFACE_MODEL = "DistilBertForMaskedLM"
TIMM_MODEL = "mobilenetv3_large_100"
HARNESS_MODEL = "mobilenetv3_large_100"
# A batch no device holds: the dummy model's input alone is terabytes.
OOM_BATCH = 2**40
# Below this many seconds left a step is not started: it could not finish.
MIN_STEP_S = 5
# How long a step past its timeout has to stop after SIGTERM before it is killed.
STOP_GRACE_S = 5
# One device command's limit, and what the start-up and the transfer back take of it.
DEVICE_COMMAND_S = 600
TRANSFER_S = 60
BUDGET_S = DEVICE_COMMAND_S - TRANSFER_S


@dataclass(frozen=True)
class Step:
    """One command of the nightly, what it shows, and the most time it may take."""

    name: str
    what: str
    argv: tuple[str, ...]  # after the interpreter
    timeout_s: int
    records: bool = True  # a run of the runner, writing OUT/<name>/results.jsonl


@dataclass(frozen=True)
class Outcome:
    name: str
    returncode: int | None  # None: timed out, or not started
    seconds: float
    holds: bool
    verdict: str


def runner(*flags: str) -> tuple[str, ...]:
    return ("-m", "experiment_runner", *flags)


def harness_folder(given: Path | None) -> Path | None:
    """A dynamobench folder (PyTorch's benchmarks/dynamo harness), where one can be had here."""
    from_env = os.environ.get("DYNAMOBENCH_DIR")
    candidates = [given, Path(from_env) if from_env else None,
                  *(ROOT / base / "userbenchmark/dynamo/dynamobench" for base in ("torchbench", "../benchmark"))]
    return next((c.resolve() for c in candidates if c is not None and (c / "common.py").is_file()), None)


def plan(out: Path, harness: Path | None) -> list[Step]:
    """The steps in order: the three checks the review asks for first, then the cheap ones that
    prove a path, the mission, one dashboard model, the harness last."""
    def run(name: str, *flags: str) -> tuple[str, ...]:
        return runner(*flags, f"--output-dirname={out / name}")

    steps = [
        Step("environment", "torch, CUDA and the device", (
            "-c", "import json, torch; print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, "
                  "'device': torch.cuda.get_device_name() if torch.cuda.is_available() else None}))"), 15, False),
        Step("check-determinism", f"{HUGGINGFACE_MODEL} training in PyTorch's inductor job: the eager pair "
             "agrees under the harness's determinism", run(
                 "check-determinism", "--suite-name=huggingface", "--dashboard=inductor", "--test=train",
                 f"--filter=^{HUGGINGFACE_MODEL}$", "--repeat=3"), 90),
        Step("check-cudagraph-outputs", "the dummy model's inductor training under CUDA graphs, --repeat=3: "
             "kept losses read before a replay overwrote them", run(
                 "check-cudagraph-outputs", "--suite-name=dummy", "--accelerator=cuda", "--dynamo=inductor",
                 "--test=train", "--repeat=3", "--verify"), 50),
        Step("check-aot-load", "AOT Inductor's package built and loaded on this torch (a crash: a crashed "
             "record with the native message)", run(
                 "check-aot-load", "--suite-name=dummy", "--accelerator=cuda", "--dynamo=inductor", "--test=eval",
                 "--compile-options=aot-inductor", "--repeat=3", "--verify"), 50),
        Step("oom", "a deliberate CUDA OOM is recorded as one", run(
            "oom", "--suite-name=dummy", "--accelerator=cuda", "--dynamo=None", "--test=eval",
            f"--batch-size={OOM_BATCH}", "--repeat=1"), 25),
        Step("forkserver", "eager and inductor forked from the fork server on CUDA", run(
            "forkserver", "--suite-name=dummy", "--accelerator=cuda", "--dynamo=None", "--dynamo=inductor",
            "--test=eval", "--launcher=forkserver", "--repeat=3"), 40),
        Step("mission", "the mission command", run(
            "mission", "--suite-name=torchbench", "--accelerator=cuda", "--filter=llama"), 90),
        Step("inductor-timm", f"PyTorch's inductor job on {TIMM_MODEL}: inference and training, verified", run(
            "inductor-timm", "--suite-name=timm", "--dashboard=inductor", f"--filter=^{TIMM_MODEL}$", "--repeat=3"),
            90),
    ]
    steps += [Step(f"expected-{suite}", f"check-expected --pytorch on {source}", runner(
        "check-expected", str(out / source / "results.jsonl"), "--pytorch"), 12, False)
        for suite, source in (("huggingface", "check-determinism"), ("timm", "inductor-timm"))]
    if harness is not None:
        steps.append(Step("harness", f"{HARNESS_MODEL}: our speedup beside PyTorch's harness", (
            str(ROOT / "benchmarks" / "paired_vs_harness.py"), "--device=cuda", f"--harness={harness}",
            f"--model={HARNESS_MODEL}", "--rounds=1", f"--keep={out / 'harness'}"), 120, False))
    return steps


def records(folder: Path) -> list[dict[str, Any]]:
    results = folder / "results.jsonl"
    if not results.exists():
        return []
    return [json.loads(line) for line in results.read_text().splitlines() if line.strip()]


def harness_columns(record: dict[str, Any]) -> tuple[bool, str]:
    """The harness's CUDA columns from a dashboard record's warm-ups (measurements.harness_warmup):
    both memory figures read from the device (not 0), and, in inference, calls_captured dynamo's
    own count of the calls in its graphs."""
    measured = record.get("measurements") or {}
    eager, compiled = ((measured["harness_warmup"].get(side) or {}) for side in ("eager", "compiled"))
    memory = [eager.get("peak_memory_bytes") or 0, compiled.get("peak_memory_bytes") or 0]
    calls = (compiled.get("dynamo_stats") or {}).get("calls_captured")
    counted = (measured.get("graph_breaks") or {}).get("calls_captured")
    inference = record["experiment"]["test"] == "eval"
    holds = min(memory) > 0 and (not inference or (calls is not None and calls == counted))
    return holds, (f"{record['experiment']['test']}: memory {memory[0] / 1e9:.2f}/{memory[1] / 1e9:.2f} GB, "
                   f"calls_captured {calls}" + (f" (dynamo's {counted})" if inference else ""))


def judge(step: Step, out: Path, returncode: int | None, stdout: str) -> tuple[bool, str]:
    """Whether the step holds, and its result in a few words."""
    if not step.records:
        tail = [line for line in stdout.splitlines() if line.strip()][-3:]
        return returncode == 0, " / ".join(tail) or "no output"
    found = records(out / step.name)
    statuses = sorted({r["status"] for r in found})
    counts = ", ".join(f"{s} {sum(r['status'] == s for r in found)}" for s in statuses)
    said = f"{len(found)} record(s): {counts or 'none'}"
    if step.name == "oom":
        return statuses == ["oom"], said
    if step.name == "forkserver":
        launchers = sorted({(r.get("placement") or {}).get("launcher") for r in found}, key=str)
        return bool(found) and statuses == ["ok"] and launchers == ["forkserver"], f"{said}; launchers {launchers}"
    if step.name == "check-aot-load":
        # The loader crash seen on the H200's torch is a finding, not the runner's fault: it must stay a
        # crashed record that carries the native message.
        crashed = [r for r in found if r["status"] == "crashed"]
        messages = [((r.get("error") or {}).get("message") or "").splitlines()[:1] for r in crashed]
        native = "; ".join(m[0][:160] for m in messages if m)
        if crashed:
            return len(native) > 0 and len(found) == 1, f"{said}; the loader crashed: {native or 'no message'}"
    if step.name == "check-determinism":
        codes = [r.get("verification_code") for r in found]
        return returncode == 0 and codes == ["PASS"], f"{said}; verification {codes}"
    verified = [r["verification_code"] for r in found if r.get("verification_code") is not None]
    passed = f"; verified {verified.count('PASS')} of {len(verified)} PASS" if verified else ""
    # A dashboard record's harness columns (issue 68's CUDA half): device memory and dynamo's counters.
    columns = [harness_columns(r) for r in found if (r.get("measurements") or {}).get("harness_warmup")]
    passed += "".join(f"; {said_}" for _, said_ in columns)
    return returncode == 0 and bool(found) and statuses == ["ok"] and all(h for h, _ in columns), said + passed


def run_step(step: Step, out: Path, deadline: float) -> Outcome:
    """Run one step in a session of its own, so its timeout ends the runner's children too."""
    timeout = min(step.timeout_s, deadline - time.monotonic() - STOP_GRACE_S)
    if timeout < MIN_STEP_S:
        return Outcome(step.name, None, 0.0, False, "not started: the budget was spent")
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))))
    start = time.monotonic()
    with open(logs / f"{step.name}.out", "w") as stdout, open(logs / f"{step.name}.err", "w") as stderr:
        proc = subprocess.Popen([sys.executable, *step.argv], cwd=ROOT, env=env, stdout=stdout, stderr=stderr,
                                start_new_session=True)
        try:
            returncode: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # SIGTERM first: the runner stops its experiment and its reaper ends what that left behind.
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            returncode = None
    seconds = time.monotonic() - start
    holds, verdict = judge(step, out, returncode, (logs / f"{step.name}.out").read_text(errors="replace"))
    if returncode is None:
        holds, verdict = False, f"timed out after {timeout:.0f} s; {verdict}"
    elif not holds:
        err = [line for line in (logs / f"{step.name}.err").read_text(errors="replace").splitlines() if line.strip()]
        verdict += f"; stderr: {err[-1][:200]}" if err else ""
    return Outcome(step.name, returncode, round(seconds, 1), holds, verdict)


def experiment_rows(out: Path, steps: list[Step]) -> list[str]:
    """One markdown row per record: what ran, how it ended, its median and speedup."""
    rows = []
    for step in (s for s in steps if s.records):
        for r in records(out / step.name):
            e, m = r["experiment"], {**r.get("metrics", {}), **r.get("measurements", {})}
            median = f"{1e3 * statistics.median(m['per_iter_time']):.3f}" if m.get("per_iter_time") else "-"
            speedup = (m.get("paired") or {}).get("speedup")
            rows.append(f"| {step.name} | {r['model']['model_name']} | {e.get('dashboard') or e.get('dynamo')} "
                        f"| {e['test']} {e['precision']} | {r['status']} | {r.get('verification_code') or '-'} "
                        f"| {median} | {f'{speedup:.2f}x' if speedup else '-'} |")
    return rows


def summary(out: Path, steps: list[Step], outcomes: list[Outcome], budget: float, started: str) -> str:
    by_name = {o.name: o for o in outcomes}
    lines = [f"# GPU nightly, {started}", "",
             f"Budget {budget:.0f} s; steps took {sum(o.seconds for o in outcomes):.0f} s. "
             f"Environment: {by_name['environment'].verdict if 'environment' in by_name else 'not run'}.", "",
             "| step | what | exit | seconds | holds | result |", "| --- | --- | --- | --- | --- | --- |"]
    for step in steps:
        o = by_name.get(step.name)
        if o is None:
            lines.append(f"| {step.name} | {step.what} | - | - | no | not reached: this summary was written before it |")
            continue
        lines.append(f"| {step.name} | {step.what} | {o.returncode if o.returncode is not None else '-'} "
                     f"| {o.seconds} | {'yes' if o.holds else 'no'} | {o.verdict.replace('|', '/')} |")
    if not any(s.name == "harness" for s in steps):
        lines += ["", "Beside PyTorch's harness: not run, no dynamobench folder here (give --harness, "
                      "$DYNAMOBENCH_DIR, or a pytorch/benchmark checkout at ./torchbench or ../benchmark)."]
    lines += ["", "| step | model | configuration | test | status | verification | median ms | speedup |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |", *experiment_rows(out, steps), "",
              "Commands (each with the tree on PYTHONPATH):", "",
              *(f"- {s.name}: `python {' '.join(s.argv)}`" for s in steps)]
    return "\n".join(lines) + "\n"


def environment(out: Path) -> dict[str, Any] | None:
    """What the environment step printed (torch, its CUDA, the device), None if it printed no JSON."""
    printed = out / "logs" / "environment.out"
    lines = printed.read_text().splitlines() if printed.exists() else []
    try:
        return json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return None


def check_flags(steps: list[Step]) -> list[str]:
    """The runner's own validation of each run step's flags: a step that would be refused now."""
    from experiment_runner.cli import parse_config
    from experiment_runner.errors import UsageError

    refused = []
    for step in (s for s in steps if s.records):
        try:
            parse_config([*step.argv[2:], "--dry-run"])
        except UsageError as exc:
            refused.append(f"{step.name}: {exc}")
    return refused


def standing(rows: list[dict[str, Any]] | None = None) -> list[str]:
    """The page's present tense: every step of the nightly (the harness step included) with its
    newest kept result on a GPU, or that no kept run reached it."""
    kept = kept_rows.read(STUDY) if rows is None else rows
    last: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for row in kept:
        for outcome in row["outcomes"]:
            last[outcome["name"]] = (row, outcome)
    cells = []
    for step in plan(Path("OUT"), Path("HARNESS")):
        if step.name not in last:
            cells.append([step.name, step.what, "-", "never run on a GPU"])
            continue
        row, outcome = last[step.name]
        device = (row.get("environment") or {}).get("device") or "device unknown"
        cells.append([step.name, step.what, "yes" if outcome["holds"] else "no",
                      f"{row['host']['date']}, {device}: {outcome['verdict']}".replace("|", "/")])
    said = (f"{len(kept)} run(s) kept, the newest {kept_rows.where(kept[-1])}." if kept else
            "No run of this nightly is kept: it has not run on a GPU yet. The device figures so far are "
            "cuda_check.py's, in the dated sections below.")
    return [*kept_rows.table(["step", "what it confirms", "holds", "last result on a GPU"], cells), "", said]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder for records, logs and the summary")
    parser.add_argument("--budget", type=float, default=float(BUDGET_S),
                        help=f"seconds for all steps together (default: one device command's {DEVICE_COMMAND_S} s "
                             f"less {TRANSFER_S} s for start-up and the transfer back)")
    parser.add_argument("--harness", type=Path, help="PyTorch's dynamobench folder (benchmarks/dynamo)")
    parser.add_argument("--dry-run", action="store_true", help="print the steps, check their flags, run nothing")
    kept_rows.add_arguments(parser, STUDY, standing)
    args = parser.parse_args(argv)
    out = args.out.resolve()
    steps = plan(out, harness_folder(args.harness))
    if args.dry_run:
        print(f"budget {args.budget:.0f} s: one device command runs at most {DEVICE_COMMAND_S} s, less {TRANSFER_S} s "
              "for start-up and the transfer back. A later lease starts on a bare machine: nothing of OUT carries "
              "over, so every step must fit this one command.")
        print("the three checks the CUDA review asks for, first after the environment: "
              + ", ".join(s.name for s in steps if s.name.startswith("check-")))
        for step in steps:
            print(f"{step.name} ({step.timeout_s} s): {step.what}\n  python {' '.join(step.argv)}")
        total = sum(s.timeout_s for s in steps)
        print(f"{len(steps)} step(s), at most {total} s, {'within' if total <= args.budget else 'cut at'} the budget"
              + ("" if any(s.name == "harness" for s in steps) else "; no dynamobench folder: no harness step"))
        refused = check_flags(steps)
        for line in refused:
            print(f"refused: {line}", file=sys.stderr)
        return 1 if refused else 0
    import torch

    if not torch.cuda.is_available():
        print("gpu_nightly: CUDA is not available here; --dry-run shows the steps", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    where = kept_rows.host()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    deadline = time.monotonic() + args.budget
    outcomes: list[Outcome] = []
    for step in steps:
        outcomes.append(run_step(step, out, deadline))
        print(f"{step.name}: {'holds' if outcomes[-1].holds else 'does not hold'}: {outcomes[-1].verdict}", flush=True)
        # Written after every step: a device command ended early still leaves what ran and what did not.
        (out / "summary.md").write_text(summary(out, steps, outcomes, args.budget, started))
        (out / "summary.json").write_text(json.dumps([asdict(o) for o in outcomes], indent=2) + "\n")
    kept_rows.append(args.rows_out, {"host": where, "budget_s": args.budget, "environment": environment(out),
                                     "outcomes": [asdict(o) for o in outcomes]})
    return 0 if all(o.holds for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
