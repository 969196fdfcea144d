"""Instrumentation: compile time, peak memory, dynamo counters and graph breaks, the profiling
pass and its dumps, the cold/warm compile cache; in-process on real torch and end to end
through the CLI on the dummy suite. CUDA logic runs against a fake torch.cuda seam."""

import gc
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from experiment_runner.child.devices import DeviceRuntime
from experiment_runner.child.devices.cpu import resident_bytes
from experiment_runner.child.devices.cuda import CudaRuntime
from experiment_runner.child.driver import WarmupProbe, time_iterations
from experiment_runner.child.instrument import cachebench
from experiment_runner.child.instrument.dynamo import (
    compile_time_metrics,
    counters_delta,
    dynamo_compile_summary,
    dynamo_counters,
    summarize_graph_breaks,
)
from experiment_runner.child.instrument.pipeline import Instrumentation
from experiment_runner.child.instrument.profiling import event_totals, profile_pass
from experiment_runner.child.main import run_task
from experiment_runner.cli import build_parser, parse_config
from experiment_runner.core.matrix import Experiment, ExperimentConfig
from experiment_runner.core.options import RunOptions
from experiment_runner.core.protocol import PublishedResult, Task
from experiment_runner.core.record import ChildOutcome, RecordContext, build_record
from experiment_runner.core.record_schema import record_errors
from experiment_runner.core.results import encode, iter_records

# The CLI fixture compiles with inductor three times on CPU (experiment, cold and warm probes).
pytestmark = pytest.mark.timeout(1200)

FLAGS = ("--collect-dynamo-counters", "--dump-dynamo-counters", "--profile-cuda-cpu",
         "--profile-cuda-cpu-individual-ops", "--dump-pytorch-profiles", "--cache-bench")


def config(dynamo=None, accelerator="cpu"):
    return ExperimentConfig(accelerator=accelerator, xla=None, xla_flags=None, dynamo=dynamo, test="eval",
                            precision="fp32")


def task_for(tmp_path, dynamo=None, model="dummy", **options):
    return Task(Experiment("dummy", model, config(dynamo)), RunOptions(**options), str(tmp_path))


@pytest.fixture
def fresh_dynamo():
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    torch._dynamo.utils.clear_compilation_metrics()
    yield
    torch._dynamo.reset()


def linear_step():
    module, x = torch.nn.Linear(64, 64), torch.randn(8, 64)

    def step():
        with torch.no_grad():
            return module(x)

    return step


# --- compile time --------------------------------------------------------------------------------


def test_compile_time_is_first_warmup_iteration_minus_the_steady_median():
    figures = compile_time_metrics({"warmup_time": [2.5, 0.2], "per_iter_time": [0.1, 0.3, 0.2]})
    assert figures == {"first_iter_time_s": 2.5, "steady_iter_time_s": 0.2, "compile_time_s": pytest.approx(2.3)}
    assert compile_time_metrics({"warmup_time": [0.1], "per_iter_time": [0.2]})["compile_time_s"] == 0.0
    assert "compile_time_s" not in compile_time_metrics({"warmup_time": [], "per_iter_time": [0.2]})


def test_dynamo_accounting_counters_and_graph_breaks_from_a_real_compile(fresh_dynamo):
    def f(x):
        x = x * 2
        print("side effect")
        x = x + 1
        torch._dynamo.graph_break()
        return x.sum()

    compiled = torch.compile(f, backend="eager")
    before = dynamo_counters()
    compiled(torch.randn(4))
    compiled(torch.randn(4))
    counters = dynamo_counters()
    assert json.loads(json.dumps(counters)) == counters
    assert counters["stats"]["unique_graphs"] == 3

    breaks = summarize_graph_breaks(counters)
    assert breaks["total"] == 2 and breaks["unique_graphs"] == 3
    reasons = {entry["reason"]: entry for entry in breaks["reasons"]}
    assert any("graph_break()" in reason for reason in reasons), reasons
    assert any("builtin operator" in reason for reason in reasons), reasons
    assert all("\n" not in reason and entry["count"] == 1 for reason, entry in reasons.items())
    assert all(entry.get("explanation") for entry in reasons.values())

    delta = counters_delta(before, counters)
    assert delta["frames"]["ok"] >= 3 and delta["stats"]["unique_graphs"] == 3
    assert counters_delta(counters, counters) == {}

    summary = dynamo_compile_summary()
    assert summary["frames"] >= 3
    assert 0 < summary["backend_compile_time_s"] < summary["entire_frame_compile_time_s"]


def test_no_dynamo_compile_summary_when_nothing_compiled(fresh_dynamo):
    assert dynamo_compile_summary() is None
    assert summarize_graph_breaks(dynamo_counters()) == {"total": 0, "unique_graphs": 0, "calls_captured": 0,
                                                        "reasons": []}


# --- peak memory ---------------------------------------------------------------------------------


@pytest.mark.skipif(not os.access("/proc/self/clear_refs", os.W_OK), reason="kernel does not allow a VmHWM reset")
def in_a_fresh_process(body: str) -> None:
    """Run this module's function `body` in a new interpreter. A resident-set figure depends on the
    process's heap: in a test worker that earlier tests fragmented, glibc serves a 64 MiB tensor from
    a freed, still resident hole (no new page, no munmap on free), as no fresh child process does."""
    here = Path(__file__).parent
    proc = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(here)!r}); "
                           f"import test_instrumentation; test_instrumentation.{body}()"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.e2e
def test_cpu_timed_peak_covers_the_timed_runs_only():
    in_a_fresh_process("timed_peak_covers_the_timed_runs_only")


def timed_peak_covers_the_timed_runs_only():
    runtime = DeviceRuntime(config())
    big = torch.ones(48 * 2**20)  # 192 MiB, touched, then returned to the OS
    del big
    runtime.reset_peak_memory()
    held = torch.ones(16 * 2**20)  # 64 MiB inside the "timed" region
    peaks = runtime.peak_memory()
    assert set(peaks) == {"timed_peak_rss_bytes"}
    assert peaks["timed_peak_rss_bytes"] >= 64 * 2**20
    lifetime = runtime.lifetime_peak_memory()["lifetime_peak_rss_bytes"]
    assert lifetime - peaks["timed_peak_rss_bytes"] >= 100 * 2**20, (lifetime, peaks)
    del held


def test_cpu_without_reset_has_no_timed_peak_but_a_lifetime_peak():
    runtime = DeviceRuntime(config())
    assert runtime.peak_memory() == {}, "no timed peak is claimed when the high-water mark was never reset"
    assert runtime.lifetime_peak_memory()["lifetime_peak_rss_bytes"] > 50 * 2**20  # torch alone is bigger


class FakeCuda:
    """Stands in for torch.cuda: counts synchronizations, tracks a peak that resets."""

    def __init__(self):
        self.calls = []
        self.allocated = 0
        self.peak = 0

    def synchronize(self):
        self.calls.append("sync")

    def reset_peak_memory_stats(self):
        self.calls.append("reset")
        self.peak = self.allocated

    def allocate(self, nbytes):
        self.allocated += nbytes
        self.peak = max(self.peak, self.allocated)
        self.allocated -= nbytes

    def max_memory_allocated(self):
        return self.peak

    def empty_cache(self):
        self.calls.append("empty_cache")

    def max_memory_reserved(self):
        return self.peak * 2

    def get_device_name(self):
        return "Fake H200"


def test_cuda_peak_memory_is_reset_after_warmup_and_read_over_timed_runs():
    fake = FakeCuda()
    runtime = CudaRuntime(config(accelerator="cuda"), cuda=fake)
    sizes = iter([10**9, 10**9] + [5 * 10**6] * 3)  # warm-up allocates much more than the timed runs
    metrics = time_iterations(lambda: fake.allocate(next(sizes)), runtime,
                              RunOptions(repeat=3, warmup_iterations=2, iterations_per_run=1))
    assert metrics["peak_allocated_bytes"] == 5 * 10**6
    assert metrics["peak_reserved_bytes"] == 10 * 10**6
    assert fake.calls.index("reset") == 5, "reset after the two synchronized warm-up iterations, synchronized"
    assert fake.calls.count("sync") == 2 * 2 + 1 + 2 * 3, "clock start and stop synchronized on every run"
    assert runtime.accelerator_model() == "Fake H200"
    assert runtime.profiler_activities() == [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]


def test_the_harness_warmup_reads_cuda_memory_as_the_harness_does():
    """The harness's warmup() on CUDA: peak statistics reset, then the cache emptied, before the
    warm-up; max_memory_allocated() after it (its get_peak_memory), compile included."""
    fake = FakeCuda()
    runtime = CudaRuntime(config(accelerator="cuda"), cuda=fake)
    sizes = iter([3 * 10**9, 10**9, 10**9] + [5 * 10**6])  # the first (compiling) iteration takes the most
    probe = WarmupProbe(runtime, dynamo_stats=False)
    time_iterations(lambda: fake.allocate(next(sizes)), runtime,
                    RunOptions(repeat=1, warmup_iterations=3, iterations_per_run=1), warmup_probe=probe)
    assert fake.calls[:3] == ["sync", "reset", "empty_cache"]
    assert probe.block is not None
    assert (probe.block["iterations"], probe.block["peak_memory_bytes"]) == (3, 3 * 10**9)
    assert runtime.harness_memory_base() is None, "a peak from a reset rises from no process level"


@pytest.mark.e2e
def test_the_harness_warmup_reads_the_cpu_resident_set_after_it_not_a_peak():
    """On the CPU the harness reads psutil's memory_percent() x RAM after its warm-up: the resident
    set then. A step that keeps 64 MiB raises it by that much; one that frees its 64 MiB (a block
    that size is mmapped and unmapped) leaves it where it was. In a fresh process, as a child is."""
    in_a_fresh_process("warmup_reads_the_resident_set_after_it")


def warmup_reads_the_resident_set_after_it():
    kept: list[torch.Tensor] = []
    size = 64 * 2**20
    runtime = DeviceRuntime(config())
    options = RunOptions(repeat=1, warmup_iterations=1, iterations_per_run=1)

    def level_after(step) -> int:
        probe = WarmupProbe(runtime, dynamo_stats=False)
        gc.collect()
        before = resident_bytes()
        time_iterations(step, runtime, options, warmup_probe=probe)
        return probe.block["peak_memory_bytes"] - before

    assert level_after(lambda: kept.append(torch.ones(size // 4))) >= 0.95 * size
    assert level_after(lambda: torch.ones(size // 4).sum()) < 0.5 * size
    assert psutil_resident() == pytest.approx(resident_bytes(), rel=0.05)


def psutil_resident() -> int:
    """psutil's resident set, what the harness's memory_percent() divides by the RAM."""
    import psutil

    return psutil.Process().memory_info().rss


def test_calls_captured_is_dynamos_count_of_the_calls_in_its_graphs():
    """The harness's calls_captured and unique_graphs, from a compiled warm-up: the calls dynamo put
    into graphs (counted here from the graphs a backend received) and the graphs, across a break."""
    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> torch.fx.GraphModule:
        graphs.append(gm)
        return gm

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))

    def forward(x: torch.Tensor) -> torch.Tensor:
        y = module(x).relu() * 2
        torch._dynamo.graph_break()
        return (y.sum(dim=1) + x.mean()).tanh()

    torch._dynamo.reset()
    compiled = torch.compile(forward, backend=backend)
    x = torch.randn(4, 8)
    probe = WarmupProbe(DeviceRuntime(config()), dynamo_stats=True)
    time_iterations(lambda: compiled(x), DeviceRuntime(config()),
                    RunOptions(repeat=1, warmup_iterations=3, iterations_per_run=1), warmup_probe=probe)
    calls = sum(1 for gm in graphs for node in gm.graph.nodes
                if node.op in ("call_function", "call_method", "call_module"))
    stats = probe.block["dynamo_stats"]
    assert (stats["unique_graphs"], stats["graph_breaks"], stats["unique_graph_breaks"]) == (len(graphs), 1, 1) == (
        2, 1, 1)
    assert stats["calls_captured"] == calls > stats["unique_graphs"]
    assert stats["fallbacks_to_eager"] == stats["autograd_captures"] == stats["cudagraph_skips"] == 0
    torch._dynamo.reset()


class FakeEvent:
    """A CUDA event on a fake device clock that runs 1 ms per event recorded."""

    clock_ms = 0.0

    def __init__(self, enable_timing=False):
        assert enable_timing
        self.at = None

    def record(self):
        FakeEvent.clock_ms += 1.0
        self.at = FakeEvent.clock_ms

    def synchronize(self):
        assert self.at is not None

    def elapsed_time(self, end):
        return end.at - self.at


def test_pure_wall_time_reads_cuda_events_and_says_so():
    """--pure-wall-time: the samples are the events' elapsed time, not the host clock's; without
    it, or on a device without its own clock, the host clock, and the record says which."""
    fake = FakeCuda()
    fake.Event = FakeEvent
    runtime = CudaRuntime(config(accelerator="cuda"), cuda=fake)
    step = lambda: sum(range(20000))  # noqa: E731 - host time far from the fake's 1 ms
    options = RunOptions(repeat=3, warmup_iterations=1, iterations_per_run=4, pure_wall_time=True)
    metrics = time_iterations(step, runtime, options)
    assert metrics["total_time"] == [1e-3] * 3 and metrics["per_iter_time"] == [1e-3 / 4] * 3
    assert metrics["timing_clock"] == "device"
    host = time_iterations(step, runtime, replace(options, pure_wall_time=False))
    assert host["timing_clock"] == "host" and host["total_time"] != [1e-3] * 3
    cpu = time_iterations(step, DeviceRuntime(config()), options)
    assert cpu["timing_clock"] == "host"


def test_save_output_writes_each_repeats_output_on_the_cpu(tmp_path):
    task = task_for(tmp_path, repeat=2, iterations_per_run=2, warmup_iterations=1, save_output=True)
    device = DeviceRuntime(config())
    instrumentation = Instrumentation(task, device)
    outputs = iter(range(1, 100))
    time_iterations(lambda: {"y": torch.full((2,), float(next(outputs)))}, device, task.options,
                    on_repeat=instrumentation.after_repeat)
    assert set(instrumentation.artifacts) == {"output_repeat_0", "output_repeat_1"}
    saved = [torch.load(tmp_path / instrumentation.artifacts[f"output_repeat_{i}"]) for i in (0, 1)]
    # warm-up 1, then each repeat's last iteration: 3 and 5
    assert [s["y"].tolist() for s in saved] == [[3.0, 3.0], [5.0, 5.0]]


def test_cuda_oom_classification():
    runtime = CudaRuntime(config(accelerator="cuda"), cuda=FakeCuda())
    assert runtime.is_oom(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 PiB"))
    assert runtime.is_oom(RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB"))
    assert runtime.is_oom(MemoryError())
    assert not runtime.is_oom(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))


# --- profiling pass ------------------------------------------------------------------------------


def test_profile_pass_totals_per_op_and_dumps(tmp_path):
    options = RunOptions(repeat=2, iterations_per_run=3, profile_cuda_cpu=True, profile_cuda_cpu_individual_ops=True,
                         dump_pytorch_profiles=True)
    metrics, artifacts = profile_pass(linear_step(), DeviceRuntime(config()), options, tmp_path)

    assert len(metrics["total_cpu_time_s"]) == len(metrics["per_iter_cpu_time_s"]) == 2
    for total, per_iter in zip(metrics["total_cpu_time_s"], metrics["per_iter_cpu_time_s"]):
        assert 0 < total < 5 and per_iter == pytest.approx(total / 3)
    assert metrics["total_cuda_time_s"] == metrics["per_iter_cuda_time_s"] == [None, None], "no device: null"

    ops = metrics["per_op_profile"]
    assert all(name.startswith("aten::") for name in ops)
    assert all(op["self_cuda_time_s"] is None and op["total_cuda_time_s"] is None for op in ops.values())
    addmm = ops["aten::addmm"]
    assert addmm["num_of_calls"] == 2 * 3
    assert 0 < addmm["self_cpu_time_s"] <= addmm["total_cpu_time_s"] + 1e-9
    assert ops["aten::linear"]["total_cpu_time_s"] >= addmm["total_cpu_time_s"]
    assert sum(op["self_cpu_time_s"] for op in ops.values()) <= sum(metrics["total_cpu_time_s"]) + 1e-9
    assert [run["aten::addmm"]["num_of_calls"] for run in metrics["inductor_ops"]] == [3, 3]

    assert sorted(artifacts) == ["pytorch_profile_repeat_0", "pytorch_profile_repeat_1",
                                 "pytorch_trace_repeat_0", "pytorch_trace_repeat_1"]
    trace = json.loads((tmp_path / artifacts["pytorch_trace_repeat_1"]).read_text())
    names = {event.get("name") for event in trace["traceEvents"]}
    assert "aten::addmm" in names
    table = (tmp_path / artifacts["pytorch_profile_repeat_0"]).read_text()
    assert "aten::addmm" in table
    assert metrics["total_cpu_time_s"][0] == pytest.approx(table_total(table, "CPU"), rel=0.01)


def table_total(table: str, kind: str) -> float:
    """The "Self <kind> time total" at the foot of a profiler table, in seconds."""
    import re

    value, unit = re.search(rf"Self {kind} time total: ([0-9.]+)(s|ms|us)", table).groups()
    return float(value) * {"s": 1.0, "ms": 1e-3, "us": 1e-6}[unit]


def test_device_time_is_counted_once_as_the_profiler_table_counts_it():
    """A CPU op and the CUDA kernel it launched: the op's event carries the kernel's time too,
    so summing every event's self device time would count the kernel twice."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import EventList, FunctionEvent

    events = []
    for i in range(3):
        op = FunctionEvent(id=2 * i, name="aten::mm", thread=1, start_us=100 * i, end_us=100 * i + 40,
                           use_device="cuda", stack=[])
        op.append_kernel("gemm_kernel", 0, 25)
        kernel = FunctionEvent(id=2 * i + 1, name="gemm_kernel", thread=7, start_us=100 * i + 10,
                               end_us=100 * i + 35, use_device="cuda", device_type=DeviceType.CUDA, stack=[])
        events += [op, kernel]
    trace = EventList(events, use_device="cuda")
    trace._build_tree()  # what the profiler does when it parses a trace
    averages = trace.key_averages()
    cpu, cuda = event_totals(averages)
    table = averages.table(sort_by="self_cuda_time_total", row_limit=-1)
    assert cuda == pytest.approx(table_total(table, "CUDA"), rel=0.01) == pytest.approx(75e-6)
    assert cpu == pytest.approx(table_total(table, "CPU"), rel=0.01) == pytest.approx(120e-6)
    assert sum(e.self_device_time_total for e in averages) * 1e-6 == pytest.approx(2 * cuda), "the double count"


def test_per_op_filter_is_the_runtimes_choice(tmp_path):
    class OnlyAddmm(DeviceRuntime):
        def profiled_op(self, name):
            return name == "aten::addmm"

    options = RunOptions(repeat=1, profile_cuda_cpu_individual_ops=True)
    metrics, artifacts = profile_pass(linear_step(), OnlyAddmm(config()), options, tmp_path)
    assert list(metrics["per_op_profile"]) == ["aten::addmm"]
    assert metrics["inductor_ops"] == [{"aten::addmm": metrics["per_op_profile"]["aten::addmm"]}]
    assert "total_cpu_time_s" not in metrics and artifacts == {}


def test_profiler_never_runs_during_timed_iterations(tmp_path):
    seen = []

    def step():
        seen.append(torch.autograd.profiler._is_profiler_enabled)
        return torch.ones(4).sum()

    device = DeviceRuntime(config())
    task = task_for(tmp_path, repeat=3, iterations_per_run=2, warmup_iterations=1, profile_cuda_cpu=True)
    instrumentation = Instrumentation(task, device)
    metrics = time_iterations(step, device, task.options, on_repeat=instrumentation.after_repeat)
    instrumentation.finish(step, metrics)
    assert seen == [False] * (1 + 3 * 2) + [True] * (3 * 2)
    assert len(metrics["total_cpu_time_s"]) == 3 and "instrumentation_errors" not in metrics


# --- worker, in process --------------------------------------------------------------------------


@pytest.mark.e2e
def test_worker_records_counters_dumps_and_profiles(tmp_path, fresh_dynamo):
    task = task_for(tmp_path, dynamo="eager", repeat=2, iterations_per_run=2, warmup_iterations=2,
                    collect_dynamo_counters=True, dump_dynamo_counters=True, profile_cuda_cpu=True,
                    profile_cuda_cpu_individual_ops=True, dump_pytorch_profiles=True)
    result = run_task(task)
    assert result.status == "ok", result.error
    metrics = result.metrics
    assert metrics["dynamo_counters"]["frames"]["ok"] >= 1
    assert metrics["dynamo_compile"]["frames"] >= 1
    assert metrics["graph_breaks"]["total"] == 0 and metrics["graph_breaks"]["unique_graphs"] == 1
    assert metrics["first_iter_time_s"] == metrics["warmup_time"][0]
    assert metrics["first_iter_time_s"] > metrics["compile_time_s"] > 0
    assert "aten::addmm" in metrics["per_op_profile"]
    assert result.timings["instrument_s"] > 0

    artifacts = result.artifacts
    assert {f"dynamo_counters_repeat_{i}" for i in (0, 1)} <= set(artifacts)
    for name, path in artifacts.items():
        assert not Path(path).is_absolute() and (tmp_path / path).is_file(), name
    dump = json.loads((tmp_path / artifacts["dynamo_counters_repeat_1"]).read_text())
    assert dump["repeat"] == 1 and dump["counters"]["stats"]["unique_graphs"] == 1
    assert dump["changed_in_this_repeat"] == {}, "no recompilation inside the timed runs"

    ctx = RecordContext(run_id="r", fingerprint="0123456789ab", options=task.options, output_dir=tmp_path)
    record = build_record(ctx, task.experiment, ChildOutcome(PublishedResult(result), 0), artifacts_dir=tmp_path)
    assert record_errors(json.loads(encode(record))) == [], "a record of every figure follows the record schema"


@pytest.mark.e2e
def test_eager_experiment_has_compile_time_but_no_dynamo_sections(tmp_path, fresh_dynamo):
    result = run_task(task_for(tmp_path, repeat=1, collect_dynamo_counters=True))
    metrics = result.metrics
    assert result.status == "ok" and "compile_time_s" in metrics
    assert metrics["dynamo_counters"] == {}
    assert "graph_breaks" not in metrics and "dynamo_compile" not in metrics


def test_cache_bench_skips_experiments_without_a_backend(tmp_path):
    artifacts = {}
    metrics = cachebench.run_cache_bench(task_for(tmp_path, cache_bench=True), artifacts.__setitem__)
    assert "skipped" in metrics["cache_bench"] and artifacts == {}


@pytest.mark.e2e
def test_cache_bench_probe_failure_is_reported_not_fatal(tmp_path):
    task = task_for(tmp_path, dynamo="eager", model="no_such_model", cache_bench=True)
    instrumentation = Instrumentation(task, DeviceRuntime(config()))
    metrics = {"per_iter_time": [0.1], "warmup_time": [0.2]}
    instrumentation.finish(lambda: None, metrics)
    error = metrics["instrumentation_errors"]["cache_bench"]
    assert error.startswith("CacheBenchError: the cold probe exited with status 1") and "no_such_model" in error
    assert (tmp_path / instrumentation.artifacts["cachebench_cold_log"]).is_file()


def test_cache_probe_environment_points_both_caches_at_one_folder(tmp_path):
    env = cachebench.cache_environment(tmp_path, base={"TORCHINDUCTOR_CACHE_DIR": "/elsewhere", "PATH": "/bin"})
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "triton") and env["PATH"] == "/bin"


# --- command line --------------------------------------------------------------------------------


def test_flags_reach_run_options():
    options = parse_config(["--suite-name=dummy", *FLAGS]).options
    assert options == replace(RunOptions(), collect_dynamo_counters=True, dump_dynamo_counters=True,
                              profile_cuda_cpu=True, profile_cuda_cpu_individual_ops=True,
                              dump_pytorch_profiles=True, cache_bench=True)


def test_help_defines_compile_time():
    text = build_parser().format_help()
    assert "compile_time_s = first warm-up iteration minus the median" in " ".join(text.split())


@pytest.fixture(scope="module")
def inductor_record(tmp_path_factory):
    """One real inductor run through the CLI with every instrumentation flag (compiles three
    times on CPU: the experiment, then the cold and warm cache probes)."""
    out = tmp_path_factory.mktemp("out")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path_factory.mktemp("cache")))
    proc = subprocess.run(
        [sys.executable, "-m", "experiment_runner", "--suite-name=dummy", "--accelerator=cpu", "--dynamo=inductor",
         "--test=eval", "--repeat=2", f"--output-dirname={out}", *FLAGS],
        capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr
    (record,) = iter_records(out / "results.jsonl")
    assert record["status"] == "ok", record["error"]
    return out, record


@pytest.mark.e2e
def test_cli_compile_time_and_dynamo_accounting(inductor_record):
    _, record = inductor_record
    m = record["measurements"]
    assert m["first_iter_time_s"] > m["compile_time_s"] > 10 * m["steady_iter_time_s"]
    dynamo = m["dynamo_compile"]
    assert dynamo["frames"] == 1 and dynamo["inductor_fx_local_cache_miss_count"] == 1
    # Dynamo's own accounting is part of the first iteration, and most of it.
    assert 0.5 * m["first_iter_time_s"] < dynamo["entire_frame_compile_time_s"] <= m["first_iter_time_s"]
    assert dynamo["inductor_compile_time_s"] <= dynamo["backend_compile_time_s"] <= dynamo["entire_frame_compile_time_s"]
    # Dynamo's running total (the harness's accuracy compilation_latency) times the same frame compile.
    assert dynamo["total_wall_time_s"] == pytest.approx(dynamo["entire_frame_compile_time_s"], rel=0.05)
    assert m["graph_breaks"] == {"total": 0, "unique_graphs": 1, "reasons": [],
                                 "calls_captured": dummy_calls_captured()}
    assert "instrumentation_errors" not in m


def dummy_calls_captured() -> int:
    """Dynamo's own count of the calls it captures from the dummy model's forward under no_grad,
    as the harness runs it (no_grad around the compiled forward, not inside it)."""
    from torch._dynamo.utils import counters

    from benchmark_models import LoadRequest, get_suite

    model = get_suite("dummy").load(LoadRequest("dummy", "eval", "cpu", "cpu", "fp32"))
    module = model.module.eval()
    torch._dynamo.reset()
    counters.clear()
    with torch.no_grad():
        torch.compile(lambda: model.run_forward(module, model.args, model.kwargs), backend="eager")()
    found = counters["stats"]["calls_captured"]
    torch._dynamo.reset()
    return found


@pytest.mark.e2e
def test_cli_peak_memory_in_bytes(inductor_record):
    m = inductor_record[1]["measurements"]
    assert 100 * 2**20 < m["lifetime_peak_rss_bytes"] < 64 * 2**30
    assert "peak_rss_bytes" not in m, "the lifetime peak is named as such"
    if "timed_peak_rss_bytes" in m:
        assert 50 * 2**20 < m["timed_peak_rss_bytes"] <= m["lifetime_peak_rss_bytes"]


@pytest.mark.e2e
def test_cli_collect_dynamo_counters(inductor_record):
    counters = inductor_record[1]["measurements"]["dynamo_counters"]
    assert counters["frames"]["ok"] == counters["frames"]["total"] == 1
    assert counters["stats"]["unique_graphs"] == 1
    assert counters["inductor"]["fxgraph_cache_miss"] == 1


@pytest.mark.e2e
def test_cli_dump_dynamo_counters(inductor_record):
    out, record = inductor_record
    for i in range(2):
        path = out / record["artifacts"][f"dynamo_counters_repeat_{i}"]
        assert path.parent.name == f"repeat_{i}" and path.parent.parent == out / record["artifacts"]["dir"]
        dump = json.loads(path.read_text())
        assert dump["repeat"] == i and dump["counters"]["frames"]["ok"] == 1
        assert dump["changed_in_this_repeat"] == ({} if i == 1 else dump["changed_in_this_repeat"])
    first = json.loads((out / record["artifacts"]["dynamo_counters_repeat_0"]).read_text())
    assert first["changed_in_this_repeat"]["stats"]["unique_graphs"] == 1, "the warm-up compile shows in repeat 0"


@pytest.mark.e2e
def test_cli_profile_cuda_cpu(inductor_record):
    record = inductor_record[1]
    m = record["metrics"]
    assert len(m["total_cpu_time_s"]) == len(m["per_iter_cpu_time_s"]) == 2
    # Profiled CPU time is positive and physically possible: at most the child's wall time on every
    # CPU (a bound in wall-clock terms would fail on a loaded host, where the profiler's per-op
    # overhead over hundreds of calibrated iterations stretches the profiled runs).
    assert all(0 < t <= record["timings"]["child_s"] * (os.cpu_count() or 1) for t in m["total_cpu_time_s"])
    # The profiled runs have the timed runs' shape: the calibrated count of iterations each.
    n = record["iterations_per_run"]
    assert record["iterations_per_run_calibrated"] and n >= 1
    assert [t / n for t in m["total_cpu_time_s"]] == pytest.approx(m["per_iter_cpu_time_s"])
    assert m["total_cuda_time_s"] == m["per_iter_cuda_time_s"] == [None, None], "a CPU run has no CUDA time"


@pytest.mark.e2e
def test_cli_profile_individual_ops(inductor_record):
    ops = inductor_record[1]["measurements"]["per_op_profile"]
    assert ops and all(name.startswith("aten::") for name in ops)
    for stats in ops.values():
        assert set(stats) == {"self_cpu_time_s", "total_cpu_time_s", "self_cuda_time_s", "total_cuda_time_s",
                              "num_of_calls"}
        assert stats["num_of_calls"] >= 2 and 0 <= stats["self_cpu_time_s"] <= stats["total_cpu_time_s"] + 1e-9
    # The reference runner's name and shape: one op table per profiled run, summing to the totals.
    per_run = inductor_record[1]["metrics"]["inductor_ops"]
    assert len(per_run) == 2 and set(per_run[0]) <= set(ops)
    for name, stats in ops.items():
        assert sum(run.get(name, {}).get("num_of_calls", 0) for run in per_run) == stats["num_of_calls"]


@pytest.mark.e2e
def test_cli_dump_pytorch_profiles(inductor_record):
    out, record = inductor_record
    for i in range(2):
        trace = json.loads((out / record["artifacts"][f"pytorch_trace_repeat_{i}"]).read_text())
        assert any(e.get("name", "").startswith("aten::") for e in trace["traceEvents"])
        table = (out / record["artifacts"][f"pytorch_profile_repeat_{i}"]).read_text()
        assert "Self CPU time total" in table


@pytest.mark.e2e
def test_cli_cache_bench_cold_then_warm(inductor_record):
    out, record = inductor_record
    m = record["measurements"]
    bench = m["cache_bench"]
    cold, warm = bench["cold"], bench["warm"]
    assert m["cold_compile_time_s"] == cold["compile_time_s"] and m["warm_compile_time_s"] == warm["compile_time_s"]
    assert cold["dynamo_compile"]["inductor_fx_local_cache_miss_count"] == 1
    assert warm["dynamo_compile"]["inductor_fx_local_cache_hit_count"] + \
        warm["dynamo_compile"].get("aotautograd_local_cache_hit_count", 0) >= 1, "the warm probe hit the disk cache"
    assert warm["compile_time_s"] < cold["compile_time_s"] and bench["warm_speedup_pct"] > 0
    for phase in ("cold", "warm"):
        assert json.loads((out / record["artifacts"][f"cachebench_{phase}"]).read_text())["compile_time_s"] > 0
        assert (out / record["artifacts"][f"cachebench_{phase}_log"]).is_file()
    assert not (out / record["artifacts"]["dir"] / "scratch").exists(), "the caches go with the scratch folder"


@pytest.mark.e2e
def test_cli_artifact_paths_are_relative_to_the_output_folder(inductor_record):
    out, record = inductor_record
    for name, path in record["artifacts"].items():
        assert not Path(path).is_absolute() and (out / path).exists(), name
