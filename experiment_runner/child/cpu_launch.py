"""CPU hygiene inside the child: the thread count, `--cpu-launcher=run_cpu`, and what the
record says about the processor's kernels.

`run_cpu` applies what PyTorch's own CPU launcher (`python -m torch.backends.xeon.run_cpu`)
computes, through its `_Launcher`: the physical cores to pin to (intersected with our
affinity mask), OMP_NUM_THREADS, and a tcmalloc/jemalloc (and Intel OpenMP) preload where
those libraries are installed. A preload only takes effect in a new program, so the child
then re-executes itself (same pid, process group, log and result path, so the parent's
bookkeeping is untouched). run_cpu's own process starter is not used: it would put a
process tree of its own between the parent and the experiment, hiding how it died.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from experiment_runner.core.cpus import affinity_cpus, cpu_identity, default_threads, physical_cores
from experiment_runner.core.options import RunOptions

# Set in the re-executed child: what run_cpu applied, as JSON (also tells it not to do it again).
RUN_CPU_ENV = "EXPERIMENT_RUNNER_RUN_CPU"


def wants_run_cpu(options: RunOptions, accelerator: str) -> bool:
    return options.cpu_launcher == "run_cpu" and accelerator == "cpu" and RUN_CPU_ENV not in os.environ


def reexec_under_run_cpu(options: RunOptions, argv: list[str]) -> None:
    """Pin, set threads and preload the allocator as run_cpu would, then exec the child again."""
    from torch.backends.xeon.run_cpu import _Launcher

    launcher = _Launcher()
    allowed = set(affinity_cpus())
    cores = [c for c in sorted(launcher.cpuinfo.get_all_physical_cores()) if c in allowed] or sorted(allowed)
    cores = cores[:options.threads or len(cores)]
    os.environ["OMP_NUM_THREADS"] = str(len(cores))
    before = os.environ.get("LD_PRELOAD", "")
    launcher.set_multi_thread_and_allocator(len(cores), set_kmp_affinity=True)
    os.environ[RUN_CPU_ENV] = json.dumps({
        "cores": cores,
        "ld_preload_added": [p for p in os.environ.get("LD_PRELOAD", "").split(":") if p and p not in before],
    })
    os.sched_setaffinity(0, cores)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "experiment_runner.child", *argv])


def set_threads(options: RunOptions) -> dict[str, Any]:
    """torch's intra-op threads for this experiment, explicitly; returns what the record says."""
    import torch

    cpus = affinity_cpus()
    threads = options.threads or default_threads()
    torch.set_num_threads(threads)
    applied = json.loads(os.environ[RUN_CPU_ENV]) if RUN_CPU_ENV in os.environ else None
    return {
        "threads": torch.get_num_threads(),
        "threads_source": "--threads" if options.threads else "physical cores in the affinity mask",
        "affinity_cpus": len(cpus),
        "affinity_physical_cores": physical_cores(cpus),
        "cpu_launcher": options.cpu_launcher if applied is not None else "none",
        "run_cpu": applied,
        "ld_preload": os.environ.get("LD_PRELOAD") or None,
        "malloc_env": malloc_env(),
    }


def malloc_env() -> dict[str, str] | None:
    """glibc malloc's settings from the environment (GLIBC_TUNABLES, MALLOC_*), or None: they move a
    CPU training step as much as a preloaded allocator does (a fixed mmap threshold took a tenth
    off DistilBert's, docs/timing.md), so two records that differ in them are not one population."""
    found = {k: v for k, v in sorted(os.environ.items()) if k == "GLIBC_TUNABLES" or k.startswith("MALLOC_")}
    return found or None


def describe_cpu() -> dict[str, Any]:
    """The processor and the kernels torch takes on it: /proc/cpuinfo's identity and ISA flags,
    ATen's vector capability (DEFAULT, AVX2, AVX512, ...), and whether oneDNN runs bf16 matrix
    products (without it autocast's bf16 takes the scalar reference gemm): on two hosts that both
    say "AMD EPYC" one bf16 matrix product took 23.6 s and 0.062 s (docs/benchmarks/dashboard.md)."""
    import torch

    try:
        mkldnn_bf16: bool | None = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        mkldnn_bf16 = None
    return {**cpu_identity(), "aten_capability": torch.backends.cpu.get_cpu_capability(),
            "mkldnn_bf16": mkldnn_bf16}
