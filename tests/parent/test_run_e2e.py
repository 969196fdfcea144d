"""End to end through the real CLI on the dummy suite: records, timings, logs, resume."""

import json
import math
import os
import subprocess
import sys

import pytest

from experiment_runner.core.compiler_caches import PRECOMPILED_HEADERS, inductor_tmp_folder
from experiment_runner.core.cpus import cpu_identity
from experiment_runner.core.results import iter_records

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A cache folder and a machine TMPDIR of the module's own (inductor's shared headers go there)."""
    return dict(os.environ, XDG_CACHE_HOME=str(tmp_path_factory.mktemp("cache")),
                TMPDIR=str(tmp_path_factory.mktemp("machine-tmp")))


def cli(env, *args):
    return subprocess.run([sys.executable, "-m", "experiment_runner", *args], capture_output=True,
                          text=True, env=env, timeout=900)


@pytest.fixture(scope="module")
def full_run(env, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    proc = cli(env, "--suite-name=dummy", "--accelerator=cpu", "--repeat=3", "--iterations-per-run=2",
               f"--output-dirname={out}")
    return out, proc


def test_every_experiment_of_the_matrix_leaves_one_ok_record(full_run):
    out, proc = full_run
    assert proc.returncode == 0, proc.stderr
    records = list(iter_records(out / "results.jsonl"))
    configs = [(r["experiment"]["dynamo"], r["experiment"]["test"]) for r in records]
    assert configs == [(None, "eval"), (None, "train"), ("inductor", "eval"), ("inductor", "train")]
    assert len({r["run_id"] for r in records}) == 1
    for r in records:
        assert r["status"] == "ok", r["error"]
        assert r["model"] == {"suite_name": "dummy", "model_name": "dummy", "source": "builtin"}
        assert r["verification_code"] == "VERIFIER_SKIPPED"
        assert r["experiment"]["batch_size"] == 32 and r["experiment"]["precision"] == "fp32"
        metrics = r["metrics"]
        assert len(metrics["total_time"]) == len(metrics["per_iter_time"]) == r["repeat"] == 3
        assert all(t == pytest.approx(p * 2) for t, p in zip(metrics["total_time"], metrics["per_iter_time"]))
        assert len(r["measurements"]["warmup_time"]) == 2
        assert r["stats"]["per_iter_time"]["n"] == 3
        assert r["environment"]["torch"] and r["environment"]["python"]
        assert (out / r["artifacts"]["log"]).is_file()
        assert not (out / r["artifacts"]["dir"] / "scratch").exists(), "compile caches are removed"


def test_inductor_warm_up_holds_the_compilation(full_run):
    out, _ = full_run
    for r in iter_records(out / "results.jsonl"):
        if r["experiment"]["dynamo"] == "inductor":
            assert r["measurements"]["warmup_time"][0] > 10 * r["stats"]["per_iter_time"]["median"]


def test_inductor_precompiled_headers_are_built_once_for_the_machine_and_said_in_the_record(env, full_run):
    """Inductor's precompiled headers depend on torch and the compiler, not the model: they go
    to the machine's TMPDIR (where torch and the reference runner keep them), survive the
    experiment's scratch folder, and each is counted in the record of the experiment that built it."""
    out, _ = full_run
    shared = inductor_tmp_folder(env["TMPDIR"]) / PRECOMPILED_HEADERS
    headers = sorted(shared.glob("*.gch"))
    assert headers, f"no precompiled header in {shared}"
    built = [r["measurements"]["dynamo_compile"]["precompiled_headers_built"]
             for r in iter_records(out / "results.jsonl") if r["experiment"]["dynamo"] == "inductor"]
    assert built[0] >= 1 and sum(built) == len(headers)


def test_summary_table_names_the_results_file(full_run):
    out, proc = full_run
    assert "median ms/iter" in proc.stdout and "dummy" in proc.stdout
    assert f"4 record(s) appended to {out / 'results.jsonl'}" in proc.stdout


def test_a_rerun_runs_nothing_and_no_resume_starts_a_new_run_keeping_old_records(env, full_run):
    out, _ = full_run
    before = (out / "results.jsonl").read_bytes()
    run_id = json.loads(before.splitlines()[-1])["run_id"]
    for resume in ([], ["--resume"]):  # resuming is the default, as in the reference runner
        # The same command (what it plans); how it measures (--repeat) may differ.
        again = cli(env, "--suite-name=dummy", "--accelerator=cpu", "--repeat=1", f"--output-dirname={out}", *resume)
        assert again.returncode == 0, again.stderr
        assert again.stdout == (f"experiment_runner: nothing to run: all 4 experiment(s) already have a record in "
                                f"run {run_id} of {out / 'results.jsonl'}; this command measures otherwise "
                                "(--repeat 1 (the run's: 3), --iterations-per-run default (the run's: 2)), which "
                                "does not make another run (--no-resume runs everything again as a new run)\n")
    assert (out / "results.jsonl").read_bytes() == before
    fresh = cli(env, "--suite-name=dummy", "--accelerator=cpu", "--dynamo=None", "--test=eval", "--repeat=1",
                f"--output-dirname={out}", "--no-resume")
    assert fresh.returncode == 0, fresh.stderr
    after = (out / "results.jsonl").read_bytes()
    assert after.startswith(before)
    new = [json.loads(line) for line in after[len(before):].splitlines()]
    assert len(new) == 1 and new[0]["run_id"] != run_id


LLAMA = ("--suite-name=torchbench", "--accelerator=cpu", "--filter=llama", "--verify", "--batch-size=1", "--repeat=2")


def test_the_readme_command_plans_llama_eager_and_inductor_eval_and_train(env, tmp_path):
    """The README's first command (issues 2 and 4) plans these four experiments, in this order."""
    proc = cli(env, *LLAMA, "--dry-run", f"--output-dirname={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    planned = proc.stdout.split("\n\n")[0].splitlines()
    assert planned == ["4 experiment(s):",
                       "   1. llama: cpu xla=None dynamo=None eval bf16 bs=1",
                       "   2. llama: cpu xla=None dynamo=None train fp32 bs=1",
                       "   3. llama: cpu xla=None dynamo=inductor eval bf16 bs=1",
                       "   4. llama: cpu xla=None dynamo=inductor train fp32 bs=1"]


@pytest.mark.parametrize(("dynamo", "test"), [("None", "eval"), ("None", "train"),
                                              ("inductor", "eval"), ("inductor", "train")])
def test_each_llama_experiment_of_the_readme_command_is_timed_and_verified_in_one_record(env, tmp_path,
                                                                                        dynamo, test):
    """Each of those experiments alone (at batch size 1 to keep CI short), so that the slowest,
    inductor training, has pytest's whole timeout to itself on a loaded host."""
    proc = cli(env, *LLAMA, f"--dynamo={dynamo}", f"--test={test}", f"--output-dirname={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    (r,) = iter_records(tmp_path / "results.jsonl")
    assert (r["experiment"]["dynamo"], r["experiment"]["test"]) == (None if dynamo == "None" else dynamo, test)
    assert (r["status"], r["verification_code"]) == ("ok", "PASS"), (r["error"], r["verification"])
    assert r["model"] == {"suite_name": "torchbench", "model_name": "llama", "source": "builtin"}
    assert len(r["metrics"]["per_iter_time"]) == r["repeat"] == 2
    details = r["verification"]["details"]  # the float64 reference only where a leaf needs it: a loss does
    assert details.get("reference_not_needed") or details["reference"] == "float64", details
    assert r["experiment"]["flush_denormal"] is False
    if test == "eval":
        assert r["experiment"]["loss"] is None and r["experiment"]["optimizer"] is None
        return
    assert details["reference_needed_at"]["path"] == "loss" and details["reference"] == "float64"
    # PyTorch/XLA's recipe for torchbench llama, and a workload that stays put while timed.
    assert (r["experiment"]["loss"], r["experiment"]["optimizer"]) == ("mean_per_output", "Adam(lr=0.01)")
    figures = {**r["metrics"], **r.get("measurements", {})}
    first, last = figures["loss_first_timed_step"], figures["loss_last_timed_step"]
    assert math.isfinite(first) and math.isfinite(last) and abs(last) <= 10 * abs(first), (first, last)


def test_output_and_measurement_flags_reach_the_records(env, tmp_path):
    proc = cli(env, "--suite-name=dummy", "--accelerator=cpu", "--dynamo=None", "--test=train",
               "--precision=bf16", "--precision=fp32", "--verify", "--verify-iterations=2", "--exclude=^nomatch$",
               "--print-subprocess", "--progress-bar", "--no-resume", "--repeat=1",
               f"--output-dirname={tmp_path}", "--output-basename=nightly.jsonl")
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "results.jsonl").exists()
    records = list(iter_records(tmp_path / "nightly.jsonl"))
    assert [r["experiment"]["precision"] for r in records] == ["bf16", "fp32"]
    assert all(r["verification"]["details"]["iterations"] == 2 for r in records)
    for r in records:  # --print-subprocess streamed each child's log, first line included
        assert f"experiment_runner worker: {r['experiment_id']}" in proc.stdout
    assert "2/2" in proc.stderr, "the progress bar counted both experiments"


def test_calibrated_samples_threads_run_cpu_and_a_noisy_neighbour_are_recorded(env, tmp_path):
    """Default calibration, --threads, --cpu-launcher=run_cpu, and a busy process beside the
    run: the record says which count, threads and cores it used, and that the host was noisy."""
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        tuned = {**env, "GLIBC_TUNABLES": "glibc.malloc.trim_threshold=268435456", "MALLOC_ARENA_MAX": "2"}
        proc = cli(tuned, "--suite-name=dummy", "--accelerator=cpu", "--dynamo=None", "--test=eval", "--repeat=10",
                   "--threads=1", "--cpu-launcher=run_cpu", "--noisy-host-share=0.05", f"--output-dirname={tmp_path}")
    finally:
        neighbour.kill()
        neighbour.wait()
    assert proc.returncode == 0, proc.stderr
    (record,) = iter_records(tmp_path / "results.jsonl")
    assert record["status"] == "ok", record["error"]
    metrics = record["metrics"]
    assert record["iterations_per_run_calibrated"] is True and record["iterations_per_run"] >= 1
    # The count is the one whose trial lasted --min-sample-time. The timed samples themselves are
    # not asserted: beside the spinning neighbour the scheduler can make them faster or slower
    # than the trial (the count is checked against a fake clock in tests/child/test_worker.py).
    trials = record["measurements"]["calibration"]
    assert trials[-1]["iterations"] == record["iterations_per_run"] and trials[-1]["elapsed_s"] >= 0.02, trials
    assert all(t["elapsed_s"] < 0.02 for t in trials[:-1]), "calibration stops at the first long-enough trial"
    assert all(t == pytest.approx(p * record["iterations_per_run"])
               for t, p in zip(metrics["total_time"], metrics["per_iter_time"]))
    cpu = record["environment"]["cpu"]
    assert cpu["threads"] == 1 and cpu["threads_source"] == "--threads"
    assert cpu["cpu_launcher"] == "run_cpu" and len(cpu["run_cpu"]["cores"]) == 1, cpu
    assert cpu["malloc_env"] == {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=268435456", "MALLOC_ARENA_MAX": "2"}
    # the processor as this host's /proc/cpuinfo and torch describe it
    import torch

    assert {k: cpu[k] for k in ("model_name", "cpuid", "isa")} == cpu_identity(), cpu
    assert cpu["aten_capability"] == torch.backends.cpu.get_cpu_capability(), cpu
    assert cpu["mkldnn_bf16"] is torch.ops.mkldnn._is_mkldnn_bf16_supported(), cpu
    ours = record["measurements"]
    load = ours["host_load"]
    assert load["others_cpu_share"] > 0.05 and ours["noisy_host"] is True, load
    assert "1 of 1 experiment(s) ran on a noisy host" in proc.stdout
