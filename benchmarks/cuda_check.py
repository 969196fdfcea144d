"""Prove the CUDA parts of the instrumentation on a GPU host; print the figures as JSON.

Unit tests drive CudaRuntime through a fake torch.cuda; this script runs the same code on a
real device: synchronization, peak memory reset after warm-up, CUDA-OOM classification (a
deliberately impossible allocation, in process and through the worker), the profiler's CUDA
time (equal to its table's "Self CUDA time total" within 1%), an inductor speedup on a small model, one
experiment end to end through the CLI, and PyTorch's CUDA accuracy jobs (inductor, dynamic_inductor,
aot_inductor, ...: --dashboard=cuda-accuracy) end to end, on the dummy model and optionally a real one.

    PYTHONPATH=. python benchmarks/cuda_check.py [--skip-cli] [--real-model timm/mobilenetv3_large_100]

Exit status 0 when every check holds, 1 otherwise, 2 without CUDA.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from time import perf_counter
from typing import Any, Callable

import torch

from experiment_runner.child.devices.cuda import CudaRuntime
from experiment_runner.child.driver import time_iterations
from experiment_runner.child.instrument.profiling import profile_pass
from experiment_runner.child.main import run_task
from experiment_runner.core.matrix import Experiment, ExperimentConfig
from experiment_runner.core.options import RunOptions
from experiment_runner.core.protocol import Task

MiB = 2**20


def cuda_config(dynamo: str | None = None, batch_size: int | None = None) -> ExperimentConfig:
    return ExperimentConfig(accelerator="cuda", xla=None, xla_flags=None, dynamo=dynamo, test="eval",
                            precision="fp32", batch_size=batch_size)


def check_synchronize(runtime: CudaRuntime) -> dict[str, Any]:
    """Without a sync the clock sees only the launch; with it, the work."""
    a = torch.randn(8192, 8192, device="cuda")
    runtime.synchronize()
    start = perf_counter()
    for _ in range(20):
        a @ a
    queued = perf_counter() - start
    runtime.synchronize()
    start = perf_counter()
    for _ in range(20):
        a @ a
    runtime.synchronize()
    synced = perf_counter() - start
    return {"queued_s": queued, "synchronized_s": synced, "ok": synced > 3 * queued}


def check_peak_memory(runtime: CudaRuntime) -> dict[str, Any]:
    """Warm-up allocates 1 GiB, timed runs 64 MiB: the peak must be the timed runs'."""
    calls = {"n": 0}

    def step() -> None:
        calls["n"] += 1
        size = 1024 * MiB if calls["n"] <= 2 else 64 * MiB
        torch.empty(size, dtype=torch.uint8, device="cuda").fill_(1)

    torch.cuda.empty_cache()
    metrics = time_iterations(step, runtime, RunOptions(repeat=3, warmup_iterations=2))
    allocated, reserved = metrics["peak_allocated_bytes"], metrics["peak_reserved_bytes"]
    return {"peak_allocated_bytes": allocated, "peak_reserved_bytes": reserved,
            "ok": 64 * MiB <= allocated < 1024 * MiB and reserved >= allocated}


def check_oom(runtime: CudaRuntime, workdir: Path) -> dict[str, Any]:
    """An impossible allocation is classified as OOM in process and by the worker."""
    error_type = None
    try:
        torch.empty(2**50, dtype=torch.uint8, device="cuda")
        in_process = False
    except Exception as exc:  # noqa: BLE001 - the point is to classify whatever is raised
        in_process = runtime.is_oom(exc)
        error_type = type(exc).__name__
    task = Task(Experiment("dummy", "dummy", cuda_config(batch_size=2**40)), RunOptions(repeat=1),
                str(workdir / "oom"))
    Path(task.artifacts_dir).mkdir(parents=True)
    result = run_task(task)
    return {"in_process_is_oom": in_process, "exception_type": error_type, "worker_status": result["status"],
            "ok": in_process and result["status"] == "oom"}


def table_total(table: str, kind: str) -> float:
    """The "Self <kind> time total" at the foot of a profiler table, in seconds."""
    value, unit = re.search(rf"Self {kind} time total: ([0-9.]+)(s|ms|us)", table).groups()
    return float(value) * {"s": 1.0, "ms": 1e-3, "us": 1e-6}[unit]


def check_profiler(runtime: CudaRuntime, workdir: Path) -> dict[str, Any]:
    """The profiler figures equal the profiler table's own totals (within 1%): device time
    counted once, not once for the kernel and again for the CPU op that launched it."""
    a = torch.randn(4096, 4096, device="cuda")
    options = RunOptions(repeat=2, iterations_per_run=5, profile_cuda_cpu=True, profile_cuda_cpu_individual_ops=True,
                         dump_pytorch_profiles=True)
    metrics, artifacts = profile_pass(lambda: a @ a, runtime, options, workdir / "profile")
    mm = metrics["per_op_profile"].get("aten::mm", {})
    tables = [(workdir / "profile" / artifacts[f"pytorch_profile_repeat_{i}"]).read_text() for i in range(2)]
    table_cuda = [table_total(t, "CUDA") for t in tables]
    table_cpu = [table_total(t, "CPU") for t in tables]
    agree = all(abs(ours - theirs) <= 0.01 * theirs
                for ours, theirs in zip(metrics["total_cuda_time_s"] + metrics["total_cpu_time_s"],
                                        table_cuda + table_cpu))
    return {"total_cuda_time_s": metrics["total_cuda_time_s"], "table_self_cuda_time_total_s": table_cuda,
            "per_iter_cuda_time_s": metrics["per_iter_cuda_time_s"],
            "total_cpu_time_s": metrics["total_cpu_time_s"], "table_self_cpu_time_total_s": table_cpu,
            "aten::mm": mm, "artifacts": sorted(artifacts),
            "ok": agree and all(t > 0 for t in metrics["total_cuda_time_s"]) and mm.get("self_cuda_time_s", 0) > 0}


def median_time(fn: Callable[[], Any], runtime: CudaRuntime, n: int = 30) -> float:
    times = []
    for _ in range(n):
        runtime.synchronize()
        start = perf_counter()
        fn()
        runtime.synchronize()
        times.append(perf_counter() - start)
    return statistics.median(times)


def check_inductor_speedup(runtime: CudaRuntime) -> dict[str, Any]:
    """Pointwise-heavy blocks: inductor fuses what eager launches one kernel at a time."""
    width = 2048
    blocks = [torch.nn.Sequential(torch.nn.LayerNorm(width), torch.nn.Linear(width, width), torch.nn.GELU())
              for _ in range(8)]
    model = torch.nn.Sequential(*blocks).cuda().eval()
    x = torch.randn(512, width, device="cuda")
    compiled = torch.compile(model, backend="inductor")
    with torch.no_grad():
        start = perf_counter()
        compiled(x)
        runtime.synchronize()
        first = perf_counter() - start
        eager = median_time(lambda: model(x), runtime)
        inductor = median_time(lambda: compiled(x), runtime)
    return {"eager_s": eager, "inductor_s": inductor, "speedup": eager / inductor,
            "inductor_first_iter_s": first, "ok": eager / inductor > 1.0}


def run_cli(args: list[str], out: Path, workdir: Path, timeout: float) -> tuple[int | None, str, list]:
    """The runner's exit status (None past `timeout`), its stderr, and the records it wrote."""
    try:
        proc = subprocess.run([sys.executable, "-m", "experiment_runner", *args, f"--output-dirname={out}"],
                              capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, XDG_CACHE_HOME=str(workdir / "xdg")))
        code, stderr = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, stderr = None, (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
    results = out / "results.jsonl"
    records = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    return code, stderr, records


def check_cli(workdir: Path) -> dict[str, Any]:
    """One inductor experiment end to end with the instrumentation flags."""
    code, stderr, records = run_cli(
        ["--suite-name=dummy", "--accelerator=cuda", "--dynamo=inductor", "--test=eval", "--precision=fp32",
         "--repeat=3", "--collect-dynamo-counters", "--profile-cuda-cpu", "--profile-cuda-cpu-individual-ops",
         "--dump-pytorch-profiles", "--cache-bench"], workdir / "cli", workdir, timeout=300)
    if code != 0 or not records:
        return {"ok": False, "stderr": stderr[-2000:]}
    record = records[-1]
    m = {**record["metrics"], **record["measurements"]}
    keys = ("compile_time_s", "first_iter_time_s", "steady_iter_time_s", "peak_allocated_bytes",
            "peak_reserved_bytes", "total_cuda_time_s", "per_iter_cuda_time_s", "cold_compile_time_s",
            "warm_compile_time_s", "instrumentation_errors")
    figures = {k: m.get(k) for k in keys}
    ok = (record["status"] == "ok" and not m.get("instrumentation_errors")
          and m.get("peak_allocated_bytes", 0) > 0 and all(t > 0 for t in m.get("total_cuda_time_s", [0]))
          and m.get("warm_compile_time_s", 1e9) < m.get("cold_compile_time_s", 0))
    return {"status": record["status"], "accelerator_model": record["experiment"]["accelerator_model"],
            **figures, "ok": ok}


def check_dashboards(workdir: Path, suite: str, model: str) -> dict[str, Any]:
    """PyTorch's CUDA accuracy jobs (--dashboard=cuda-accuracy) end to end on one model: each
    verified, recorded under its name, with CUDA graphs where the harness uses them (inductor and
    dynamic_inductor, not AOT Inductor) and the harness-style graph-break count."""
    code, stderr, records = run_cli([f"--suite-name={suite}", f"--filter=^{re.escape(model)}$",
                                     "--dashboard=cuda-accuracy", "--verify", "--repeat=5", "--speedup=harness"],
                                    workdir / f"dash-{suite}", workdir, timeout=300)
    rows = {}
    for r in records:
        m, e = {**r["metrics"], **r["measurements"]}, r["experiment"]
        rows[e["dashboard"] or f"eager-{e['precision']}"] = {
            "status": r["status"], "verification": r["verification_code"], "cuda_graphs": e["cuda_graphs"],
            "compile_options": e["compile_options"], "compile_time_s": m.get("compile_time_s"),
            "median_ms": 1e3 * statistics.median(m["per_iter_time"]) if m.get("per_iter_time") else None,
            "speedup_harness": (m.get("paired") or {}).get("speedup"),
            "harness_graph_breaks": (m.get("graph_breaks") or {}).get("harness_count"),
            "error": (r.get("error") or {}).get("message", "")[:300]}
    wanted = {"inductor": True, "dynamic_inductor": True, "aot_inductor": False}
    ok = code == 0 and all(
        name in rows and rows[name]["status"] == "ok" and rows[name]["verification"] == "PASS"
        and rows[name]["cuda_graphs"] == graphs for name, graphs in wanted.items())
    return {"model": f"{suite}/{model}", "returncode": code, "experiments": rows,
            "stderr_tail": stderr[-1500:] if not ok else "", "ok": ok}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-cli", action="store_true", help="skip the end-to-end CLI experiments")
    parser.add_argument("--real-model", metavar="SUITE/MODEL",
                        help="also run PyTorch's CUDA dashboard configurations on this model "
                             "(timm/mobilenetv3_large_100)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print(json.dumps({"error": "CUDA is not available"}))
        return 2
    runtime = CudaRuntime(cuda_config())
    report: dict[str, Any] = {"device": runtime.accelerator_model(), "torch": torch.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        report["synchronize"] = check_synchronize(runtime)
        report["peak_memory"] = check_peak_memory(runtime)
        report["oom"] = check_oom(runtime, workdir)
        report["profiler"] = check_profiler(runtime, workdir)
        report["inductor_speedup"] = check_inductor_speedup(runtime)
        if not args.skip_cli:
            report["cli"] = check_cli(workdir)
            report["dashboards_dummy"] = check_dashboards(workdir, "dummy", "dummy")
            if args.real_model:
                suite, _, model = args.real_model.partition("/")
                report["dashboards_real"] = check_dashboards(workdir, suite, model)
    report["all_ok"] = all(v["ok"] for v in report.values() if isinstance(v, dict))
    print(json.dumps(report, indent=2, default=str))
    return 0 if report["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
