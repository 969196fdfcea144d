"""The host's CPUs: how many threads an experiment gets, and how busy everyone else was.

Pure Python over Linux's /proc and /sys, so the parent (thread environment) and the child
(torch.set_num_threads, load sampling around the timed runs) agree on the same figures.
Where those files do not exist, the figures are None rather than guessed.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

_SYS_CPU = Path("/sys/devices/system/cpu")

# /proc/cpuinfo flags that decide which CPU kernels PyTorch takes: ATen's vector code (AVX2,
# AVX-512), oneDNN's bf16/int8/fp16 paths (AVX-512 BF16/VNNI/FP16, AVX-NE-CONVERT, AMX) and their
# Arm counterparts. Without AVX-512 BW/VL/DQ or AVX-NE-CONVERT (torch's mkldnn_bf16_device_check)
# a bf16 matrix product runs in PyTorch's scalar reference gemm, some 80 times slower than float32
# (docs/benchmarks/dashboard.md), so a record must say.
KERNEL_ISA_FLAGS: tuple[str, ...] = (
    "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16",
    "avx512_fp16", "avx_vnni", "avx_ne_convert", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
    "asimd", "asimddp", "sve", "sve2", "bf16", "i8mm",
)


def affinity_cpus() -> list[int]:
    """The logical CPUs this process may run on (its affinity mask)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def physical_cores(cpus: list[int]) -> int | None:
    """How many distinct physical cores the given logical CPUs sit on (hyper-threads
    counted once), from /sys's topology; None where the topology is not readable."""
    cores: set[tuple[str, str]] = set()
    for cpu in cpus:
        topology = _SYS_CPU / f"cpu{cpu}" / "topology"
        try:
            cores.add(((topology / "physical_package_id").read_text().strip(),
                       (topology / "core_id").read_text().strip()))
        except OSError:
            return None
    return len(cores) or None


def cpu_identity(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, object]:
    """The processor, from the first entry of /proc/cpuinfo: its name, its vendor, family,
    model and stepping (a virtual machine often names every generation alike, "AMD EPYC"),
    and which of KERNEL_ISA_FLAGS it has. None for what the file does not say."""
    try:
        first = cpuinfo.read_text().split("\n\n", 1)[0]
    except OSError:
        first = ""
    fields = {key.strip(): value.strip() for key, _, value in
              (line.partition(":") for line in first.splitlines()) if key.strip()}
    cpuid = [fields.get(k) for k in ("vendor_id", "cpu family", "model", "stepping")]
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    return {
        "model_name": fields.get("model name"),
        "cpuid": ("{} family {} model {} stepping {}".format(*cpuid) if all(cpuid) else None),
        "isa": [flag for flag in KERNEL_ISA_FLAGS if flag in flags] if flags else None,
    }


def default_threads() -> int:
    """Threads for an experiment when --threads is not given: the physical cores in the
    affinity mask where known, else its logical CPUs. More threads than cores makes
    OpenMP's spinning threads fight each other (and any neighbour) for the same core."""
    cpus = affinity_cpus()
    return physical_cores(cpus) or len(cpus)


def _busy_jiffies() -> int | None:
    """Busy time of all CPUs since boot, in clock ticks (the first line of /proc/stat)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice, already in user/nice]
    values = [int(v) for v in fields[1:9]]
    return values[0] + values[1] + values[2] + values[5] + values[6] + values[7]


def _own_cpu_s() -> float:
    """CPU time of this process and its waited-for children (compile workers), in seconds."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def load_average() -> list[float] | None:
    try:
        return [float(v) for v in Path("/proc/loadavg").read_text().split()[:3]]
    except (OSError, ValueError):
        return None


@dataclass
class HostLoadSample:
    """Host load around a stretch of this process's work (its timed runs).

    `others_cpu_share`: CPU time every other process used during the stretch, as a share
    of all the host's CPUs over that wall time (0: idle neighbours; 1: every CPU busy with
    someone else's work). Sampled from /proc/stat and our own rusage, so it needs no
    privileges and sees every process, including other users'; known within
    `others_cpu_resolution_s`, which `judge_noisy` allows for.
    """

    wall_start: float
    busy_start: int | None
    own_start: float
    load_start: list[float] | None

    @classmethod
    def start(cls) -> "HostLoadSample":
        return cls(time.monotonic(), _busy_jiffies(), _own_cpu_s(), load_average())

    def finish(self, noisy_share: float) -> dict[str, object]:
        """The figures for the record: load averages before and after, other processes'
        CPU seconds and share, and `noisy_host` against the `noisy_share` threshold."""
        wall = time.monotonic() - self.wall_start
        busy_end, own = _busy_jiffies(), _own_cpu_s() - self.own_start
        host_cpus = os.cpu_count() or 1
        figures: dict[str, object] = {
            "load_average_before": self.load_start, "load_average_after": load_average(),
            "host_cpus": host_cpus, "wall_s": wall, "own_cpu_s": own,
            "others_cpu_s": None, "others_cpu_share": None,
            "noisy_host": None, "noisy_host_share": noisy_share,
        }
        if self.busy_start is None or busy_end is None or wall <= 0:
            return figures
        ticks_per_s = os.sysconf("SC_CLK_TCK")
        busy_s = (busy_end - self.busy_start) / ticks_per_s
        # /proc/stat and rusage tick at different granularities: clamp into what is possible.
        others = min(max(0.0, busy_s - own), wall * host_cpus)
        resolution = 2 * host_cpus / ticks_per_s
        figures.update(others_cpu_s=others, others_cpu_share=others / (wall * host_cpus),
                       others_cpu_resolution_s=resolution,
                       noisy_host=judge_noisy(others, wall, host_cpus, noisy_share, resolution))
        return figures


def judge_noisy(others_s: float, wall_s: float, host_cpus: int, noisy_share: float,
                resolution_s: float) -> bool | None:
    """Whether others used more than `noisy_share` of the host for sure, or None when the
    stretch is too short to tell.

    /proc/stat counts CPU time in clock ticks (10 ms each, per CPU), sampled at every tick,
    so over a stretch of a few ticks a neighbour's one tick reads as a 25% share: timed runs of
    20 ms were flagged noisy on a quiet host (the A/A runs of benchmarks/aa_false_alarms.py).
    Others' time is known within `resolution_s` (two ticks per CPU, one at each end), so a host
    is noisy when others' time minus that is still above the share, and cannot be judged when
    even every CPU busy with others would not show above it.
    """
    capacity = wall_s * host_cpus
    if capacity * (1.0 - noisy_share) <= resolution_s:
        return None
    return others_s - resolution_s > noisy_share * capacity
