"""A seeded history of nightly runs with known steps: the scale benchmark and the accuracy test of `history`.

Every night is one run in its own folder (`NIGHTS/2025-01-01/results.jsonl`), as the cron
recipe in docs/analysis.md writes them. Each experiment's nightly median carries noise shaped like a real
fleet's, not like a textbook's:

- process-to-process noise: every night is a fresh process, so its level moves as a whole
  (heavy-tailed, Student t with 4 degrees of freedom), and a fifth of the experiments are
  bimodal (a process lands in one of two modes, as code layout and ASLR make them);
- host-wide drift: all experiments of a night share a small offset, and about one night in 50
  is a noisy one (a neighbour, thermal throttling) that slows every experiment by ~3%;
- within a night, the timed samples scatter around that night's level.

Together, night-to-night noise is about 1% (``--noise``). A fifth of the experiments get one step
of 5-25% (up or down) at a random night; some experiments start failing (ok -> error) or start
failing verification (PASS -> FAIL). The injected truth comes back from `write_history`, so a
detector's recall and false changes can be counted:

    python benchmarks/nightly_history.py                   # 365 nights x 2,000 experiments: time + accuracy
    python benchmarks/nightly_history.py --nights 60 --models 50 --keep /tmp/nights   # a small one, kept
    python benchmarks/nightly_history.py --browser --rows-out docs/benchmarks/data/nightly_history/DATE.jsonl
    python benchmarks/nightly_history.py --standing   # the head of docs/benchmarks/nightly_history.md
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import resource
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

import kept_rows
from experiment_runner.core.stats import summarize

STUDY = "nightly_history"

CONFIGS: tuple[tuple[str | None, str], ...] = ((None, "eval"), ("inductor", "eval"), (None, "train"), ("inductor", "train"))
FIRST_NIGHT = datetime(2025, 1, 1, 2, 0, tzinfo=timezone.utc)
CPU_MODEL = "AMD EPYC 7763 64-Core Processor"
ENVIRONMENT = {"hostname": "nightly-a100-07", "python": "3.12.3", "torch": "2.13.0", "torch_xla": None,
               "transformers": "4.50.0", "timm": "1.0.15"}
MIN_SEGMENT = 2  # nights on each side of a step: a one-night blip is noise, two nights are a change


@dataclass(frozen=True)
class HistorySpec:
    """What to generate; the defaults are the issue's scale target (365 nights x 2,000 experiments)."""

    nights: int = 365
    models: int = 500  # x len(CONFIGS) experiments
    seed: int = 0
    noise: float = 0.01  # night-to-night relative standard deviation of an experiment's median
    step_fraction: float = 0.2
    min_step: float = 0.05
    max_step: float = 0.25
    failure_fraction: float = 0.01  # experiments that start erroring, and as many that start failing verification


@dataclass(frozen=True)
class Injected:
    """One change the generator made: `night` is the index of the first night with the new value."""

    experiment_id: str
    kind: str  # "time", "status" or "verification"
    night: int
    size: float | None  # relative change of the median time, for kind "time"


def experiment_id(model: str, dynamo: str | None, test: str) -> str:
    return f"torchbench/{model}/cpu-None-{dynamo}-{test}-fp32-bsdefault"


def night_folder(night: int) -> str:
    return (FIRST_NIGHT + timedelta(days=night)).strftime("%Y-%m-%d")


def simulate(spec: HistorySpec) -> tuple[np.ndarray, list[Injected], dict[str, np.ndarray]]:
    """Nightly median times (experiments x nights), the injected changes, and per-experiment extras."""
    rng = np.random.default_rng(spec.seed)
    n_exp, nights = spec.models * len(CONFIGS), spec.nights
    eager = np.exp(rng.uniform(math.log(2e-3), math.log(0.4), size=(spec.models, 2)))  # per model, eval/train
    speedup = rng.uniform(1.05, 2.5, size=(spec.models, 2))
    base = np.array([eager[m, int(t == "train")] / (speedup[m, int(t == "train")] if dynamo else 1.0)
                     for m in range(spec.models) for dynamo, t in CONFIGS])
    host = rng.normal(0.0, 0.003, size=nights) + np.where(rng.random(nights) < 0.02, 0.03, 0.0)
    process_scale = spec.noise * 0.8 / math.sqrt(2.0)  # t(4) has variance 2
    noise = rng.standard_t(4, size=(n_exp, nights)) * process_scale
    bimodal = rng.random(n_exp) < 0.2
    modes = np.where(rng.random((n_exp, nights)) < 0.5, -1.0, 1.0) * spec.noise * 0.6
    noise[bimodal] = modes[bimodal] + rng.normal(0.0, spec.noise * 0.5, size=(int(bimodal.sum()), nights))
    level = np.zeros((n_exp, nights))
    injected: list[Injected] = []
    ids = [experiment_id(f"model{m:04d}", dynamo, test) for m in range(spec.models) for dynamo, test in CONFIGS]
    for e in np.flatnonzero(rng.random(n_exp) < spec.step_fraction):
        night = int(rng.integers(MIN_SEGMENT, nights - MIN_SEGMENT + 1))
        size = float(rng.uniform(spec.min_step, spec.max_step)) * (1 if rng.random() < 0.6 else -1)
        level[e, night:] += math.log1p(size)
        injected.append(Injected(ids[e], "time", night, size))
    medians = base[:, None] * np.exp(level + noise + host[None, :])
    error_from = np.full(n_exp, nights)
    fail_from = np.full(n_exp, nights)
    for e in rng.choice(n_exp, size=2 * int(spec.failure_fraction * n_exp), replace=False).tolist():
        night = int(rng.integers(1, nights))
        if len(injected) % 2:
            error_from[e] = night
            injected.append(Injected(ids[e], "status", night, None))
        else:
            fail_from[e] = night
            injected.append(Injected(ids[e], "verification", night, None))
    extras = {"compile_s": rng.uniform(2.0, 40.0, size=n_exp), "rss": rng.uniform(0.5e9, 8e9, size=n_exp),
              "error_from": error_from, "fail_from": fail_from}
    return medians, injected, extras


def _records(spec: HistorySpec, night: int, medians: np.ndarray, extras: dict[str, np.ndarray],
             rng: np.random.Generator) -> Iterable[str]:
    run_id = f"{night_folder(night).replace('-', '')}T020000Z-{night:06x}"
    stamp = (FIRST_NIGHT + timedelta(days=night)).timestamp()
    sample_noise = rng.normal(0.0, 0.003, size=(medians.shape[0], 10))
    compile_noise = rng.normal(0.0, 0.03, size=medians.shape[0])
    for e, (m, (dynamo, test)) in enumerate((m, c) for m in range(spec.models) for c in CONFIGS):
        model = f"model{m:04d}"
        failed = extras["error_from"][e] <= night
        samples = [round(float(v), 7) for v in medians[e, night] * np.exp(sample_noise[e])]
        ordered = sorted(samples)
        metrics: dict[str, Any] = {"total_time": samples, "per_iter_time": samples}
        measurements: dict[str, Any] = {
            "warmup_time": [round(ordered[5] + 0.05 * (1 + compile_noise[e]), 6), round(samples[0] * 1.01, 6)],
            "compile_time_s": round(float(extras["compile_s"][e] * (1 + compile_noise[e])), 4) if dynamo else None,
            "peak_rss_bytes": int(extras["rss"][e] * (1.3 if dynamo else 1.0)),
        }
        measurements["timed_peak_rss_bytes"] = int(measurements["peak_rss_bytes"] * 0.6)  # the timed runs' share
        record: dict[str, Any] = {
            "schema_version": 1, "run_id": run_id, "experiment_id": experiment_id(model, dynamo, test),
            "model": {"suite_name": "torchbench", "model_name": model, "source": "builtin"},
            "experiment": {"accelerator": "cpu", "accelerator_model": CPU_MODEL, "xla": None,
                           "xla_flags": None, "dynamo": dynamo, "torch_xla2": None, "keep_model_data_on_cuda": False,
                           "test": test, "batch_size": 8, "precision": "fp32"},
            "repeat": 10, "iterations_per_run": 1, "metrics": metrics, "measurements": measurements,
            "stats": {"per_iter_time": summarize(samples)},
            "status": "ok", "error": None,
            "verification_code": "FAIL" if extras["fail_from"][e] <= night else "PASS",
            "verification": None, "artifacts": {"dir": f"{run_id}/{model}-{dynamo}-{test}", "log": "child.log"},
            "timings": {"import_s": 1.2, "wall_s": 9.5}, "environment": ENVIRONMENT, "timestamp": stamp,
        }
        if failed:
            record.update(status="error", verification_code="VERIFIER_DIDNT_RUN", stats={"per_iter_time": None},
                          error={"type": "RuntimeError", "message": "CUDA error: an illegal memory access"},
                          metrics={"error": "RuntimeError: CUDA error: an illegal memory access"},
                          measurements={"peak_rss_bytes": measurements["peak_rss_bytes"],
                                        "timed_peak_rss_bytes": measurements["timed_peak_rss_bytes"]})
        yield json.dumps(record)


def write_history(folder: Path, spec: HistorySpec) -> list[Injected]:
    """One folder per night with its results.jsonl; returns what was injected."""
    medians, injected, extras = simulate(spec)
    rng = np.random.default_rng(spec.seed + 1)
    for night in range(spec.nights):
        target = folder / night_folder(night)
        target.mkdir(parents=True, exist_ok=True)
        with open(target / "results.jsonl", "w") as handle:
            handle.write("\n".join(_records(spec, night, medians, extras, rng)) + "\n")
    return injected


@dataclass(frozen=True)
class Score:
    injected: int
    found: int
    false_changes: int
    histories: int

    @property
    def recall(self) -> float:
        return self.found / self.injected if self.injected else 1.0

    @property
    def false_per_100(self) -> float:
        return 100.0 * self.false_changes / self.histories


def score(injected: Sequence[Injected], changes: Sequence[dict[str, Any]], histories: int,
          run_ids: Sequence[str], tolerance: int = 1) -> Score:
    """Time steps found within `tolerance` nights of where they were injected; every other
    time change found is a false one (a step suspected in the newest run is neither). `changes`
    are `history --format json` changes."""
    night_of = {run_id: i for i, run_id in enumerate(run_ids)}
    truth: dict[str, list[int]] = {}
    for item in injected:
        if item.kind == "time":
            truth.setdefault(item.experiment_id, []).append(item.night)
    matched: set[tuple[str, int]] = set()
    false_changes = 0
    for change in changes:
        if change["metric"] != "time" or change["kind"] == "suspected":  # the newest run alone: not a change yet
            continue
        night = night_of[change["first_bad_run"]]
        near = [n for n in truth.get(change["experiment_id"], []) if abs(n - night) <= tolerance]
        if near:
            matched.add((change["experiment_id"], near[0]))
        else:
            false_changes += 1
    total = sum(len(v) for v in truth.values())
    return Score(total, len(matched), false_changes, histories)


def timed(label: str, argv: Sequence[str], times: dict[str, dict[str, float]]) -> str:
    """Run `experiment_runner ARGV` in this process; its wall and CPU time go to times[label] (CPU
    time is the figure that survives a loaded machine: DuckDB reads on every core, so on an idle
    one wall time is at most CPU time)."""
    from experiment_runner.cli import main as cli_main

    out = io.StringIO()
    start, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = cli_main(list(argv))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(f"{label:<40} {wall:7.2f} s wall {cpu:7.2f} s CPU  (exit {code})", flush=True)
    times[label] = {"wall_s": wall, "cpu_s": cpu}
    return out.getvalue()


def time_page(page: Path) -> dict[str, float]:
    """How long the page takes in Debian's chromium: until its tables are built, then a model's trend."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"])
        try:
            tab = browser.new_page(viewport={"width": 1280, "height": 900})
            start = time.perf_counter()
            tab.goto(page.as_uri())
            tab.wait_for_selector("body[data-ready=yes]", timeout=120_000)
            ready = time.perf_counter() - start
            start = time.perf_counter()
            tab.locator("#models button.model-link").first.click()
            tab.wait_for_function("document.querySelectorAll('#trend .plot[data-rendered]').length > 0")
            trend = time.perf_counter() - start
            print(f"page in chromium: tables and visible plots {ready:.2f} s, a model's trend "
                  f"{trend:.2f} s after the click")
            return {"ready_s": ready, "trend_s": trend}
        finally:
            browser.close()


def standing(rows: list[dict[str, Any]] | None = None) -> list[str]:
    """The page's present tense: the newest kept row of each scale, its accuracy (seeded, so the
    same on every host) and what it took on the host it ran on."""
    newest = {(row["nights"], row["experiments"], row["seed"]): row
              for row in (kept_rows.read(STUDY) if rows is None else rows)}
    lines = []
    for (nights, experiments, seed), row in sorted(newest.items(), reverse=True):
        times = row["times"]
        page = (f"; in chromium up in {row['browser']['ready_s']:.2f} s, a model's trend in "
                f"{row['browser']['trend_s']:.2f} s" if row.get("browser") else "")
        lines += kept_rows.table(["figure", f"{nights} nights x {experiments} experiments, seed {seed}"], [
            ["steps injected, found within one night of where they were", f"{row['found']} of {row['injected']} "
             f"(recall {row['found'] / row['injected']:.1%})"],
            ["false changes", f"{row['false_changes']} over {experiments} experiment histories"],
            ["`ok → error` and `PASS → FAIL` changes found at their run",
             f"{row['status_found']} of {row['status_injected']}"],
            ["records written", f"{row['records']:,}, {row['size_mb']:.0f} MB of JSONL"],
            *([label, f"{t['wall_s']:.1f} s wall, {t['cpu_s']:.1f} s CPU"] for label, t in times.items()),
            ["page", f"{row['page_mb']:.1f} MB{page}"],
            ["peak memory of the process", f"{row['peak_rss_mb']:.0f} MB"],
            ["host (date, processor, CPUs, load before, commit)", kept_rows.where(row)]]) + [""]
    return lines[:-1]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nights", type=int, default=HistorySpec.nights)
    parser.add_argument("--models", type=int, default=HistorySpec.models,
                        help=f"models; each has {len(CONFIGS)} experiments")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="write the nights here and keep them (default: a temp folder); "
                                                  "nights already there from the same flags are reused")
    parser.add_argument("--browser", action="store_true",
                        help="also time the page in /usr/bin/chromium (playwright)")
    kept_rows.add_arguments(parser, STUDY, standing)
    args = parser.parse_args(argv)
    spec = HistorySpec(nights=args.nights, models=args.models, seed=args.seed)
    folder = args.keep or Path(tempfile.mkdtemp(prefix="nightly-history-"))
    where = kept_rows.host()
    times: dict[str, dict[str, float]] = {}
    try:
        start, cpu_start = time.perf_counter(), time.process_time()
        complete = folder.is_dir() and len(list(folder.glob("*/results.jsonl"))) == spec.nights
        injected = simulate(spec)[1] if args.keep and complete else write_history(folder, spec)
        size = sum(p.stat().st_size for p in folder.rglob("*.jsonl"))
        experiments = spec.models * len(CONFIGS)
        made = "reused" if args.keep and complete else f"wrote in {time.perf_counter() - start:.0f} s:"
        print(f"{made} {spec.nights} nights x {experiments} experiments = {spec.nights * experiments} records, "
              f"{size / 1e6:.0f} MB; load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
        if not (args.keep and complete):
            times["writing the nights"] = {"wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu_start}
        timed("`history NIGHTS` (text)", ["history", str(folder)], times)
        document = json.loads(timed("`history NIGHTS --format json`", ["history", str(folder), "--format", "json"],
                                    times))
        page = folder / "index.html"
        timed("`history NIGHTS --html index.html`", ["history", str(folder), "--html", str(page)], times)
        peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"page: {page.stat().st_size / 1e6:.1f} MB; peak RSS of this process {peak_rss_mb:.0f} MB")
        browser = time_page(page) if args.browser else None
        result = score(injected, document["changes"], experiments, [r["run_id"] for r in document["runs"]])
        print(f"steps injected {result.injected}, found {result.found}: recall {result.recall:.1%}; "
              f"false changes {result.false_changes} over {experiments} histories = "
              f"{result.false_per_100:.2f} per 100")
        reported = {(c["experiment_id"], c["metric"], c["run_index"]) for c in document["changes"]}
        want = [i for i in injected if i.kind != "time"]
        found = sum((i.experiment_id, i.kind, i.night) in reported for i in want)
        print(f"status and verification changes injected {len(want)}, found at their run {found}")
        kept_rows.append(args.rows_out, {
            "host": where, "nights": spec.nights, "experiments": experiments, "seed": spec.seed,
            "records": spec.nights * experiments, "size_mb": size / 1e6, "times": times,
            "page_mb": page.stat().st_size / 1e6, "peak_rss_mb": peak_rss_mb, "browser": browser,
            "injected": result.injected, "found": result.found, "false_changes": result.false_changes,
            "status_injected": len(want), "status_found": found})
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
