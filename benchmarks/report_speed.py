"""How long `report` and `compare` take on a large results file (issue 7: "in seconds").

Writes a synthetic file of --records full-size records (environment, metrics, stats, as
the runner writes them) spread over --runs runs in a temporary folder, then times each
command in this process, output discarded:

    python benchmarks/report_speed.py --records 100000 --runs 10
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Callable

from experiment_runner.cli import main as cli_main
from experiment_runner.core.stats import summarize

CONFIGS = [("cpu", None, None), ("cpu", None, "inductor"), ("cpu", "PJRT", "openxla"),
           ("cuda", None, None), ("cuda", None, "inductor")]
TESTS = ("eval", "train")
ENVIRONMENT = {"hostname": "bench-host", "python": "3.12.3", "torch": "2.13.0", "torch_xla": None,
               "transformers": "4.50.0", "timm": "1.0.15", "device driver": "550.54.15"}


def write_results(path: Path, records: int, runs: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    per_run = records // runs
    models = max(1, per_run // (len(CONFIGS) * len(TESTS)))
    with open(path, "w") as handle:
        for run in range(runs):
            run_id = f"2025010{run % 10}T000000Z-{run:06x}"
            written = 0
            for m in range(models):
                for accelerator, xla, dynamo in CONFIGS:
                    for test in TESTS:
                        if written == per_run:
                            break
                        base = 0.001 * (1 + m % 50) / (1.4 if dynamo else 1.0)
                        samples = [base * (1 + rng.uniform(-0.03, 0.03)) for _ in range(10)]
                        metrics = {"total_time": samples, "per_iter_time": samples,
                                   "warmup_time": [base * 20 + 1.5, base * 1.1], "peak_rss_bytes": 10**9}
                        if accelerator == "cuda":
                            metrics.update(peak_allocated_bytes=5 * 10**8, peak_reserved_bytes=6 * 10**8)
                        key = f"{accelerator}-{xla}-{dynamo}-{test}-fp32-bsdefault"
                        handle.write(json.dumps({
                            "schema_version": 1, "run_id": run_id, "experiment_id": f"torchbench/model{m}/{key}",
                            "model": {"suite_name": "torchbench", "model_name": f"model{m}", "source": "builtin"},
                            "experiment": {"accelerator": accelerator, "accelerator_model": "Bench Device",
                                           "xla": xla, "xla_flags": None, "dynamo": dynamo, "torch_xla2": None,
                                           "keep_model_data_on_cuda": False, "test": test, "batch_size": 8,
                                           "precision": "fp32"},
                            "repeat": 10, "iterations_per_run": 1, "metrics": metrics,
                            "stats": {"per_iter_time": summarize(samples)}, "status": "ok", "error": None,
                            "verification_code": "PASS", "verification": None,
                            "artifacts": {"dir": f"{run_id}/model{m}-{key}", "log": "child.log"},
                            "timings": {"import_s": 1.2, "wall_s": 9.5}, "environment": ENVIRONMENT,
                            "timestamp": 1.7e9 + run * 86400 + written,
                        }) + "\n")
                        written += 1


def timed(label: str, action: Callable[[], object]) -> None:
    """Wall and CPU time: on a shared machine the CPU time is the figure that carries over."""
    start, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        action()
    print(f"{label:<44} {time.perf_counter() - start:6.2f} s wall {time.process_time() - cpu:6.2f} s CPU")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--plot", action="store_true", help="also time --plot (needs matplotlib)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "results.jsonl"
        start = time.perf_counter()
        write_results(path, args.records, args.runs)
        size = path.stat().st_size
        print(f"wrote {args.records} records, {args.runs} runs, {size / 1e6:.0f} MB "
              f"in {time.perf_counter() - start:.1f} s")
        timed("report (text, latest run)", lambda: cli_main(["report", str(path)]))
        timed("report --format json", lambda: cli_main(["report", str(path), "--format", "json"]))
        timed("report --format csv --table models", lambda: cli_main(["report", str(path), "--format", "csv",
                                                                      "--table", "models"]))
        timed("compare FILE (two latest runs, MWU each)", lambda: cli_main(["compare", str(path)]))
        from experiment_runner.analysis.loader import load_dataframe

        timed("loader.load_dataframe (every run)", lambda: load_dataframe(path))
        if args.plot:
            timed("report --plot DIR", lambda: cli_main(["report", str(path), "--plot", str(Path(tmp) / "plots")]))


if __name__ == "__main__":
    main()
