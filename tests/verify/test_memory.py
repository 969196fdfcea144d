"""Verification within the memory the host has: planned from the eager run, never an OOM kill."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from experiment_runner.child.devices import DeviceRuntime
from experiment_runner.child.driver import ExperimentDriver
from experiment_runner.core.matrix import Experiment, ExperimentConfig
from experiment_runner.core.options import RunOptions
from verifier import memory, verify_experiment


def harness(tmp_path: Path, test: str = "eval") -> ExperimentDriver:
    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo="eager", test=test,
                              precision="fp32", batch_size=4)
    return ExperimentDriver(Experiment("dummy", "dummy", config), RunOptions(verify=True), DeviceRuntime(config),
                             tmp_path)


def test_the_estimate_widens_the_eager_run_to_float64_and_keeps_three_outputs():
    output = {"logits": torch.zeros(1000, 1000), "ids": torch.zeros(10, dtype=torch.long)}
    assert memory.float_elements(output) == 1_000_000
    run = 64 * 2**20
    fp32, bf16 = memory.plan(output, run, "fp32"), memory.plan(output, run, "bf16")
    assert fp32.with_reference > fp32.without_reference >= run
    assert fp32.with_reference >= 8_000_000 * (1 + memory.COMPARE_TEMPORARIES)  # float64 output and comparison
    assert bf16.with_reference >= 4 * run  # bfloat16 data takes four times the bytes in float64
    assert memory.MemoryPlan(10, 5, None).fits(10**12)  # a host that cannot tell is not refused


def test_a_training_result_is_held_beside_the_float64_run():
    """A training step's compared output holds every gradient and parameter: the float64 run
    needs its own widened run on top of the compiled result it runs beside."""
    layers, per_layer = 100, 100_000  # ten million parameters in a hundred tensors
    output = {"loss": torch.zeros(()), "grads": {str(i): torch.zeros(per_layer) for i in range(layers)},
              "params": {str(i): torch.zeros(per_layer) for i in range(layers)}}
    parameters = layers * per_layer
    run = 3 * 4 * parameters  # the model, its gradients and about as much again in activations
    fp32 = memory.plan(output, run, "fp32")
    assert fp32.with_reference >= 2 * 4 * parameters + 2 * run
    # one leaf at a time is compared: its temporaries are the largest leaf's, not the output's
    assert fp32.without_reference < run + 2 * 4 * parameters


@pytest.mark.parametrize("available, code, reference", [
    (None, "PASS", "float64"),
    (150, "PASS", None),  # the reference alone does not fit: left out, said why
    (10, "VERIFIER_SKIPPED", None),  # nothing fits: skipped with the estimate
])
def test_what_does_not_fit_is_left_out_and_said(tmp_path, monkeypatch, available, code, reference):
    """In training, whose loss needs the float64 reference (the scalar rule)."""
    monkeypatch.setattr(memory, "plan", lambda *args: memory.MemoryPlan(200, 100, available, "MemAvailable (/proc/meminfo)"))
    verification = verify_experiment(harness(tmp_path, "train"))
    details = verification["details"]
    assert verification["code"] == code, verification
    assert details["memory"]["available_gib"] == (None if available is None else round(available / memory.GIB, 2))
    assert details.get("reference") == reference
    if available == 150:
        assert "float64 reference would need" in details["reference_skipped"]
    if code == "VERIFIER_SKIPPED":
        assert "would not fit in the memory available (MemAvailable" in details["reason"]


@pytest.mark.parametrize("peaks, measured", [({"timed_peak_rss_bytes": 1000 + 4096}, 4096), ({}, 0)])
def test_the_eager_run_is_its_growth_of_the_resident_high_water_mark(tmp_path, monkeypatch, peaks, measured):
    seen = []
    real_plan = memory.plan
    h = harness(tmp_path)
    monkeypatch.setattr(memory, "resident_bytes", lambda: 1000)
    monkeypatch.setattr(h.device, "peak_memory", lambda: peaks)  # {}: a kernel that cannot reset the mark
    monkeypatch.setattr(memory, "plan", lambda output, run_bytes, precision, device: seen.append(run_bytes) or
                        real_plan(output, run_bytes, precision, device))
    assert verify_experiment(h)["code"] == "PASS"
    assert seen == [measured]


# --- what this process can still take: a fake /proc and /sys tree, as the kernel lays them out ---

UNLIMITED_V1 = "9223372036854771712"  # v1's "no limit", a page-rounded LLONG_MAX
GB = 10**9


def fake_host(root: Path, cgroup: str, files: dict[str, str], mem_available_kb: int = 100 * 2**20,
              vm_size_kb: int = 2**20) -> Path:
    """A root holding proc/self/cgroup (`cgroup`), proc/meminfo, proc/self/status and `files`
    (paths under sys/fs/cgroup, the folders the kernel makes for every cgroup included)."""
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/cgroup").write_text(cgroup)
    (root / "proc/meminfo").write_text(f"MemTotal:       {2 * mem_available_kb} kB\n"
                                       f"MemFree:        {mem_available_kb // 2} kB\n"
                                       f"MemAvailable:   {mem_available_kb} kB\n")
    (root / "proc/self/status").write_text(f"Name:\tpython\nVmPeak:\t{vm_size_kb} kB\nVmSize:\t{vm_size_kb} kB\n"
                                           "VmRSS:\t1024 kB\n")
    for name, text in files.items():
        path = root / "sys/fs/cgroup" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return root


V1_CGROUP = ("12:pids:/\n9:name=systemd:/\n4:memory:/process_api/job\n3:cpuset:/\n1:cpu,cpuacct:/\n0::/\n")


def v1_host(root: Path) -> Path:
    """A cgroup v1 host (hybrid: an empty v2 `unified` mount too) whose job is limited to 2.5 GB,
    1 GB of it used; its parent and the root have no limit."""
    return fake_host(root, V1_CGROUP, {
        "memory/memory.limit_in_bytes": UNLIMITED_V1, "memory/memory.usage_in_bytes": str(30 * GB),
        "memory/process_api/memory.limit_in_bytes": UNLIMITED_V1,
        "memory/process_api/memory.usage_in_bytes": str(GB),
        "memory/process_api/job/memory.limit_in_bytes": str(2_500_000_000),
        "memory/process_api/job/memory.usage_in_bytes": str(GB),
        "memory/process_api/job/memory.stat": "cache 0\nrss 1000000000\ntotal_inactive_file 0",
        "unified/cgroup.controllers": ""})


def test_a_cgroup_v1_limit_of_the_process_own_nested_cgroup_is_the_one_it_meets(tmp_path):
    """Issue 53: only v2's /sys/fs/cgroup/memory.max was read; under a v1 limit of 2.5 GB a
    64M-element output went to the float64 run and the child was OOM-killed (VERIFIER_DIDNT_RUN)."""
    limit = memory.available(v1_host(tmp_path), None)
    assert limit == memory.Available(1_500_000_000, "cgroup v1 limit "
                                                    "(/sys/fs/cgroup/memory/process_api/job/memory.limit_in_bytes)")


def test_the_plan_under_a_v1_limit_leaves_out_what_would_be_oom_killed(tmp_path, monkeypatch):
    host = v1_host(tmp_path)
    monkeypatch.setattr(memory, "available_bytes", lambda: memory.available(host, None))
    output = torch.empty(64 * 2**20, device="meta")  # 64M float32 elements, no memory taken
    plan = memory.plan(output, 256 * 2**20, "fp32")
    assert not plan.fits(plan.with_reference), plan  # the float64 output alone is 512 MiB, x5 with the comparison
    assert plan.describe()["available_from"].startswith("cgroup v1 limit (/sys/fs/cgroup/memory/process_api/job/")


def test_a_v2_limit_is_read_through_the_nesting_and_its_page_cache_counts_as_free(tmp_path):
    """v2: the job's own memory.max is "max"; its parent's 3 GB applies, of which 2 GB are used,
    0.5 GB of that reclaimable page cache."""
    host = fake_host(tmp_path, "0::/user.slice/job.scope\n", {
        "cgroup.controllers": "cpu memory pids",
        "user.slice/memory.max": str(3 * GB), "user.slice/memory.current": str(2 * GB),
        "user.slice/memory.stat": f"anon 1500000000\nfile 500000000\ninactive_file {GB // 2}\nactive_file 0",
        "user.slice/job.scope/memory.max": "max", "user.slice/job.scope/memory.current": str(GB)})
    assert memory.available(host, None) == memory.Available(
        int(1.5 * GB), "cgroup v2 limit (/sys/fs/cgroup/user.slice/memory.max)")


def test_a_container_whose_cgroup_path_is_not_mounted_reads_the_mount_root(tmp_path):
    """A container without a cgroup namespace: /proc/self/cgroup names /docker/ID, whose folder
    is not there; the mount's root is the container's own cgroup, and its limit applies."""
    host = fake_host(tmp_path, "5:memory:/docker/0123abcd\n", {
        "memory/memory.limit_in_bytes": str(2 * GB), "memory/memory.usage_in_bytes": str(GB // 4)})
    assert memory.available(host, None).bytes == 2 * GB - GB // 4


def test_without_any_limit_the_host_says_and_rlimit_as_counts_the_mapped_address_space(tmp_path):
    host = fake_host(tmp_path, "0::/\n", {"cgroup.controllers": "memory"}, mem_available_kb=8 * 2**20,
                     vm_size_kb=3 * 2**20)
    assert memory.available(host, None) == memory.Available(8 * 2**30, "MemAvailable (/proc/meminfo)")
    assert memory.available(host, 4 * 2**30) == memory.Available(2**30, "RLIMIT_AS (ulimit -v)")
    assert memory.available(tmp_path / "nothing", None) is None


@pytest.mark.e2e
def test_a_process_started_under_a_lowered_rlimit_as_plans_within_it(tmp_path):
    """A real child whose address space is limited to 512 MiB (`ulimit -v`): the verifier's
    figure is that limit less what the child maps, not the host's gigabytes."""
    import resource
    import subprocess
    import sys

    limit = 512 * 2**20
    probe = ("from verifier import memory; a = memory.available_bytes(); "
             "print(a.bytes, a.source, memory.address_space_limit(), sep='|')")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    assert proc.returncode == 0, proc.stderr
    figure, source, seen_limit = proc.stdout.strip().split("|")
    assert (source, int(seen_limit)) == ("RLIMIT_AS (ulimit -v)", limit)
    assert 0 < int(figure) < limit


def test_a_model_too_large_for_a_nested_v1_limit_is_sized_against_that_limit(tmp_path, monkeypatch):
    """The same v1 limit sizes the weights check (DeviceRuntime.memory_capacity), which read only
    the cgroup mounts' roots: on a v1 host its own cgroup's 2.5 GB went unseen."""
    from experiment_runner.child.devices import cpu
    from experiment_runner.core import cgroups

    host = v1_host(tmp_path)
    assert cgroups.memory_limit(host) == (
        2_500_000_000, host / "sys/fs/cgroup/memory/process_api/job/memory.limit_in_bytes")
    monkeypatch.setattr(cpu, "memory_limit", lambda: cgroups.memory_limit(host))
    monkeypatch.setattr(os, "sysconf", {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 4 * 2**30 // 4096}.__getitem__)  # 4 GiB
    config = harness(tmp_path).config
    assert cpu.DeviceRuntime(config).memory_capacity() == (2_500_000_000, "this container's memory limit")


# --- a GPU's memory: the device facts faked ---

class FakeGpuMemory:
    """torch.cuda's memory calls for one GPU whose allocations the test sets."""

    def __init__(self, free: int, total: int = 80 * GB) -> None:
        self.free, self.total, self.allocated, self.reserved, self.peak = free, total, 0, 0, 0

    def current_device(self) -> int:
        return 0

    def mem_get_info(self, device: int) -> tuple[int, int]:
        return self.free, self.total

    def memory_allocated(self, device: int) -> int:
        return self.allocated

    def memory_reserved(self, device: int) -> int:
        return self.reserved


def test_a_gpus_memory_is_its_free_memory_and_the_allocators_unused_cache():
    from experiment_runner.child.devices.cuda import CudaRuntime

    fake = FakeGpuMemory(free=10 * GB)
    fake.allocated, fake.reserved = 3 * GB, 5 * GB
    config = ExperimentConfig(accelerator="cuda", xla=None, xla_flags=None, dynamo=None, test="eval",
                              precision="fp32")
    found = CudaRuntime(config, cuda=fake).device_memory()
    assert (found.allocated, found.available) == (3 * GB, 12 * GB)
    assert found.source.startswith("GPU 0 memory (torch.cuda.mem_get_info: 9.3 of 74.5 GiB free")


class OnAGpu(DeviceRuntime):
    """The CPU runtime with a GPU's memory facts: each run allocates `run_bytes` there."""

    def __init__(self, config: ExperimentConfig, gpu: FakeGpuMemory, run_bytes: int) -> None:
        super().__init__(config)
        self.gpu, self.run_bytes = gpu, run_bytes

    def peak_memory(self) -> dict[str, int]:
        return {**super().peak_memory(), "peak_allocated_bytes": self.gpu.allocated + self.run_bytes}

    def device_memory(self) -> "memory.DeviceMemory":
        return memory.DeviceMemory(self.gpu.allocated, self.gpu.free, "GPU 0 memory (faked)")


@pytest.mark.parametrize("gpu_free, code, reference", [
    (100 * GB, "PASS", "float64"),
    (int(3 * GB / memory.HEADROOM), "PASS", None),  # eager's 2 GB again fits, float64's 4 GB does not
    (GB, "VERIFIER_SKIPPED", None),  # not even the compiled run's 2 GB
])
def test_a_gpu_runs_verification_is_planned_against_the_gpus_memory(tmp_path, gpu_free, code, reference):
    """Training, whose loss needs the float64 reference; the host has plenty, the GPU decides."""
    h = harness(tmp_path, "train")
    h.device = OnAGpu(h.config, FakeGpuMemory(free=gpu_free), run_bytes=2 * GB)
    verification = verify_experiment(h)
    details = verification["details"]
    assert verification["code"] == code, verification
    assert details["memory"]["device"]["available_from"] == "GPU 0 memory (faked)"
    assert details["memory"]["device"]["estimated_gib_without_float64_reference"] == round(2 * GB / memory.GIB, 2)
    assert details.get("reference") == reference
    if code != "PASS" or reference is None:
        assert details["memory"]["decided_by"] == "GPU 0 memory (faked)"
        said = details.get("reason") or details["reference_skipped"]
        assert "GPU 0 memory (faked)" in said, said
    else:
        assert "decided_by" not in details["memory"]


# --- the whole verification, planned before its first run from what the timed run took ---

ISSUE_OUTPUT = 64 * 2**20  # a 256 MiB float32 output, in 64 leaves: its comparison temporaries are small
ISSUE_LEAVES = (ISSUE_OUTPUT // 64,) * 64


def test_the_first_plan_counts_the_eager_pair_from_the_timed_peak():
    """Each eager run grows the resident memory as the timed run did above what stays, and copies
    its output; the second runs beside the first's output: about a run and two outputs."""
    timed = memory.TimedRun(peak_rss_bytes=int(1.09 * GB), output_leaves=ISSUE_LEAVES)
    out = ISSUE_OUTPUT * 4
    resident = 400 * 2**20
    before = memory.plan_before_eager(timed, resident, 0, "fp32")
    assert before.without_reference >= (timed.peak_rss_bytes - resident) + 2 * out
    # a result already held (the timed step served) is not counted as memory a run frees
    served = memory.plan_before_eager(timed, resident + out, out, "fp32")
    assert served.without_reference == before.without_reference
    # the rest, as planned after the eager runs, needs less than the pair: only the first plan sees it
    rest = memory.plan_leaves(list(ISSUE_LEAVES), timed.peak_rss_bytes - resident + out, "fp32")
    assert rest.without_reference < before.without_reference
    # without a timed peak a run still takes its output and its copy
    assert memory.plan_before_eager(memory.TimedRun(None, ISSUE_LEAVES), resident, 0, "fp32").without_reference \
        >= 3 * out


def runs_counted(monkeypatch) -> list[str]:
    """The precisions of the verifier's runs, in order."""
    from verifier import run as verifier_run

    seen: list[str] = []
    real = verifier_run.run_once
    monkeypatch.setattr(verifier_run, "run_once", lambda h, precision, compiled: seen.append(precision) or
                        real(h, precision, compiled))
    return seen


@pytest.mark.parametrize("timed_peak_gb, code", [(1.09, "VERIFIER_SKIPPED"), (0.1, "PASS")])
def test_the_eager_pair_does_not_start_where_a_v1_limit_cannot_hold_it(tmp_path, monkeypatch, timed_peak_gb, code):
    """Issue 69: a 256 MB output and a 1.09 GB timed peak under a 2.5 GB v1 limit (1.5 GB of it
    left): the plan came only after the eager pair, which the kernel OOM-killed
    (VERIFIER_DIDNT_RUN). Now nothing runs where the whole verification cannot fit."""
    host = v1_host(tmp_path / "host")
    monkeypatch.setattr(memory, "available_bytes", lambda: memory.available(host, None))
    monkeypatch.setattr(memory, "resident_bytes", lambda: 100 * 2**20)
    runs = runs_counted(monkeypatch)
    h = harness(tmp_path)
    h.timed_run = memory.TimedRun(peak_rss_bytes=int(timed_peak_gb * GB), output_leaves=ISSUE_LEAVES)
    verification = verify_experiment(h)
    details = verification["details"]
    assert verification["code"] == code, verification
    assert details["memory_before_eager"]["available_from"].startswith("cgroup v1 limit (/sys/fs/cgroup/memory/")
    if code == "VERIFIER_SKIPPED":
        assert runs == [] and "memory" not in details
        assert details["memory_before_eager"]["decided_by"] == details["memory_before_eager"]["available_from"]
        assert "the eager pair included" in details["reason"] and "cgroup v1 limit" in details["reason"]
    else:
        assert runs[:2] == ["fp32", "fp32"] and "decided_by" not in details["memory_before_eager"]


def test_a_gpu_that_cannot_hold_the_timed_runs_peak_again_runs_nothing(tmp_path, monkeypatch):
    runs = runs_counted(monkeypatch)
    h = harness(tmp_path, "train")
    h.device = OnAGpu(h.config, FakeGpuMemory(free=GB), run_bytes=0)
    h.timed_run = memory.TimedRun(peak_rss_bytes=None, output_leaves=(10,), peak_allocated_bytes=2 * GB)
    verification = verify_experiment(h)
    assert verification["code"] == "VERIFIER_SKIPPED", verification
    assert verification["details"]["memory_before_eager"]["decided_by"] == "GPU 0 memory (faked)" and runs == []


@pytest.mark.e2e
def test_the_child_hands_the_verifier_what_the_timed_run_took(tmp_path, monkeypatch):
    """run_task records the timed output's size (the dummy model's: 32 x 10) and peak for the first plan."""
    from experiment_runner.child.main import run_task
    from experiment_runner.core.protocol import Task

    seen = []
    real = memory.plan_before_eager
    monkeypatch.setattr(memory, "plan_before_eager", lambda timed, *args: seen.append(timed) or real(timed, *args))
    config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo=None, test="eval",
                              precision="fp32")
    result = run_task(Task(Experiment("dummy", "dummy", config),
                           RunOptions(verify=True, repeat=1, iterations_per_run=1, warmup_iterations=1),
                           str(tmp_path)))
    assert result.verification["code"] == "PASS", result.verification
    assert "memory_before_eager" in result.verification["details"]
    [timed] = seen
    assert timed.output_leaves == (320,) and timed.peak_rss_bytes == result.metrics["timed_peak_rss_bytes"] > 0


BIG_OUTPUT_CHILD = """
import json, resource, sys
from pathlib import Path
import torch
from experiment_runner.child.devices import DeviceRuntime
from experiment_runner.child.driver import ExperimentDriver
from experiment_runner.core.matrix import Experiment, ExperimentConfig
from experiment_runner.core.options import RunOptions
from verifier import memory, verify_experiment

ELEMENTS = int(sys.argv[1])


class BigOutput(ExperimentDriver):
    # the dummy model whose step returns ELEMENTS float32 values: each run allocates its output
    # and the verifier's copy of it
    def make_step(self, model, compiled=True, precision=None, full_output=None, checking=False):
        return lambda: torch.full((ELEMENTS,), 1.0)


config = ExperimentConfig(accelerator="cpu", xla=None, xla_flags=None, dynamo=None, test="eval", precision="fp32")
h = BigOutput(Experiment("dummy", "dummy", config), RunOptions(verify=True), DeviceRuntime(config), Path(sys.argv[2]))
out = ELEMENTS * 4
if sys.argv[3] == "planned":
    # the timed run grew the resident memory by its output, above what is resident now
    h.timed_run = memory.TimedRun(peak_rss_bytes=memory.resident_bytes() + out, output_leaves=(ELEMENTS,))
torch.full((1024,), 1.0).sum()  # the allocator and thread pool, before the limit
mapped = int(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmSize:"))) * 1024
limit = mapped + out * 5 // 2  # one run and its copy fit; a second beside the first's output does not
resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
verification = verify_experiment(h)
error = verification["details"].get("error", {})
print(json.dumps({"code": verification["code"], "error": f"{error.get('type')}: {error.get('message', '')[:300]}",
                  "reason": verification["details"].get("reason")}))
"""


@pytest.mark.e2e
@pytest.mark.parametrize("plan", ["unplanned", "planned"])
def test_a_real_child_under_rlimit_as_is_not_started_into_a_memory_error(tmp_path, plan):
    """A real address-space limit: unplanned, the second eager run fails to allocate (the
    MemoryError an OOM kill is under a cgroup); planned from the timed run, nothing runs and the
    record says why."""
    import json
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", BIG_OUTPUT_CHILD, str(32 * 2**20), str(tmp_path), plan],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        stdout, stderr = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, 9)
            proc.wait()
    assert proc.returncode == 0, stderr[-3000:]
    said = json.loads(stdout.strip().splitlines()[-1])
    if plan == "unplanned":
        assert said["code"] == "EAGER_FAILED" and "allocate" in said["error"], said
    else:
        assert said["code"] == "VERIFIER_SKIPPED" and "RLIMIT_AS" in said["reason"], said
