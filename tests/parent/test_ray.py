"""--executor=ray on a real Ray cluster of two nodes on this machine (tests/support/ray_cluster.py).

The cluster is started once for the module and stopped by the pids it started. Experiments
are the quick `faulty` models and the dummy suite without inductor, so most of the time
goes to Ray and process start-up, not to benchmarks.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Iterator

import psutil
import pytest
from conftest import (
    SUPPORT,
    assert_no_process_left,
    cli_command,
    cli_env,
    marked_processes,
    new_marker,
    read_records,
)

from experiment_runner.core.requirements import install_command
from experiment_runner.parent.launch.node_folder import LOCK_SUFFIX, PREFIX

sys.path.insert(0, str(SUPPORT))
from ray_cluster import LocalRayCluster  # noqa: E402  (tests/support)

pytestmark = pytest.mark.cluster

# The command line of the hang model's grandchild, which ignores SIGTERM (support/faulty_suite.py).
STUBBORN = "signal.SIG_IGN"
QUICK = ("--suite-name=faulty", "--accelerator=cpu", "--dynamo=None", "--test=eval", "--repeat=1",
         "--executor=ray", "--no-progress-bar")


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRayCluster]:
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(SUPPORT), os.environ.get("PYTHONPATH")]))}
    with LocalRayCluster(nodes=2, slots=1, env=env) as started:
        yield started


@pytest.fixture
def two_nodes(cluster: LocalRayCluster) -> LocalRayCluster:
    """The cluster with two live nodes again, whatever an earlier test killed."""
    while sum(1 for node in cluster.started if not node.killed) < 2:
        cluster.add_node()
    return cluster


def start_run(args: tuple[str, ...], output: Path, cache: Path, address: str, marker: str) -> subprocess.Popen:
    env = cli_env(cache, marker, {"RAY_ADDRESS": address})
    return subprocess.Popen(cli_command(args, output), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def run(args: tuple[str, ...], output: Path, cache: Path, address: str) -> tuple[subprocess.CompletedProcess, str]:
    marker = uuid.uuid4().hex
    proc = subprocess.run(cli_command(args, output), env=cli_env(cache, marker, {"RAY_ADDRESS": address}),
                          capture_output=True, text=True, timeout=300)
    return proc, marker


def held(lock: Path) -> bool:
    """Whether a live process holds a node folder's lock (launch/node_folder.py)."""
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def wait_until(predicate, timeout_s: float = 120, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def experiment_on(node_pid: int, marker: str) -> bool:
    """Whether an experiment child of this run is running under the node started as node_pid."""
    for line in marked_processes(marker):
        try:
            if node_pid in {p.pid for p in psutil.Process(int(line.split()[0])).parents()}:
                return True
        except psutil.NoSuchProcess:
            continue
    return False


def test_every_experiment_once_with_its_node(two_nodes, tmp_path: Path, cli_cache: Path) -> None:
    args = (*QUICK, "--filter=^quick_0[0-5]$", "--filter=^segfault$")  # 7: both nodes get some
    proc, marker = run(args, tmp_path / "out", cli_cache, two_nodes.address)
    assert proc.returncode == 0, proc.stderr
    records = read_records(tmp_path / "out" / "results.jsonl")
    assert Counter(r["experiment_id"] for r in records).most_common(1)[0][1] == 1
    assert sorted(r["model"]["model_name"] for r in records) == sorted([f"quick_0{i}" for i in range(6)]
                                                                        + ["segfault"])
    statuses = {r["model"]["model_name"]: r["status"] for r in records}
    assert statuses.pop("segfault") == "crashed" and set(statuses.values()) == {"ok"}
    for record in records:
        placement = record["placement"]
        assert placement["executor"] == "ray" and placement["launcher"] == "forkserver"
        assert placement["host"] and len(placement["node_id"]) == 56
        assert record["environment"]["torch"] and record["environment"]["hostname"] == placement["host"]
        log = tmp_path / "out" / record["artifacts"]["log"]
        assert record["experiment_id"] in log.read_text()  # the node's log came back beside the record
    segfault = next(r for r in records if r["model"]["model_name"] == "segfault")
    assert segfault["error"]["signal"] == "SIGSEGV" and "faulty_suite.py" in segfault["error"]["traceback_tail"]
    assert len({r["placement"]["node_id"] for r in records}) == 2, "both nodes should have taken experiments"

    report = subprocess.run([sys.executable, "-m", "experiment_runner", "report", str(tmp_path / "out" / "results.jsonl")],
                            capture_output=True, text=True)
    assert report.returncode == 0 and "(7 experiments," in report.stdout, report.stderr
    assert_no_process_left(marker)


def test_a_lost_node_gives_its_experiment_one_crashed_record(two_nodes, tmp_path: Path, cli_cache: Path) -> None:
    victim = next(node for node in two_nodes.started[1:] if not node.killed)
    marker = uuid.uuid4().hex
    output = tmp_path / "out"
    driver = start_run((*QUICK, "--filter=^nap_0[0-3]$", "--filter=^quick_0[0-1]$"), output, cli_cache,
                       two_nodes.address, marker)
    wait_until(lambda: experiment_on(victim.proc.pid, marker), what="an experiment on the second node")
    victim.kill()
    stdout, stderr = driver.communicate(timeout=300)
    assert driver.returncode == 0, stderr
    records = read_records(output / "results.jsonl")
    assert sorted(r["model"]["model_name"] for r in records) == sorted(
        [f"nap_0{i}" for i in range(4)] + [f"quick_0{i}" for i in range(2)])
    lost = [r for r in records if r["status"] == "crashed"]
    assert len(lost) == 1, stderr
    assert lost[0]["error"]["reason"] == "node lost" and lost[0]["error"]["type"] == "Lost"
    assert lost[0]["placement"]["node_id"], "the lost experiment says which node it was on"
    assert all(r["status"] == "ok" for r in records if r is not lost[0])
    assert_no_process_left(marker, within_s=15)
    assert not victim.alive()


def test_driver_killed_then_resume_loses_and_duplicates_nothing(two_nodes, tmp_path: Path,
                                                                  cli_cache: Path) -> None:
    marker = uuid.uuid4().hex
    output = tmp_path / "out"
    args = (*QUICK, "--filter=^nap_0[0-5]$")
    driver = start_run(args, output, cli_cache, two_nodes.address, marker)
    results = output / "results.jsonl"
    nodes = [node.proc.pid for node in two_nodes.started if not node.killed]
    wait_until(lambda: results.exists() and len(read_records(results)) >= 2
               and any(experiment_on(pid, marker) for pid in nodes), what="two records and a running experiment")
    driver.kill()
    driver.communicate()
    assert_no_process_left(marker, within_s=30)  # Ray ends the dead driver's tasks; their children follow
    # The running task's worker went with its driver: nothing on the node removed its folder. Ray
    # ends that worker on its own time; once it is gone its lock is free, and any later task sweeps.
    orphans = sorted(two_nodes.node_tmp.glob(f"{PREFIX}*{LOCK_SUFFIX}"))
    assert orphans
    wait_until(lambda: not any(held(lock) for lock in orphans), what="the killed driver's workers to end")
    before = read_records(results)

    proc, _ = run((*args, "--resume"), output, cli_cache, two_nodes.address)
    assert proc.returncode == 0, proc.stderr
    after = read_records(results)
    assert after[:len(before)] == before
    assert Counter(r["experiment_id"] for r in after) == Counter({r["experiment_id"]: 1 for r in after})
    assert sorted(r["model"]["model_name"] for r in after) == [f"nap_0{i}" for i in range(6)]
    assert {r["run_id"] for r in after} == {before[0]["run_id"]} and {r["status"] for r in after} == {"ok"}
    # The killed tasks' folders on the nodes (with their scratch) went with the resumed run's tasks.
    assert [lock for lock in orphans if lock.exists() or lock.with_suffix("").exists()] == []


@pytest.mark.parametrize("launcher", ["forkserver", "subprocess"])
def test_sigterm_cancels_running_tasks_and_records_them_interrupted(two_nodes, tmp_path: Path, cli_cache: Path,
                                                                    launcher: str) -> None:
    marker = uuid.uuid4().hex
    output = tmp_path / "out"
    driver = start_run((*QUICK, "--filter=^hang$", "--filter=^nap_0[0-3]$", f"--launcher={launcher}"), output,
                       cli_cache, two_nodes.address, marker)
    nodes = [node.proc.pid for node in two_nodes.started if not node.killed]
    wait_until(lambda: all(experiment_on(pid, marker) for pid in nodes), what="experiments running on both nodes")
    # The hang experiment itself running, its SIGTERM-proof grandchild started: the launcher, blocked
    # waiting for it, must still honour the cancellation (Ray raises it between bytecodes only).
    wait_until(lambda: any(STUBBORN in line for line in marked_processes(marker)), what="the hang experiment running")
    driver.send_signal(signal.SIGTERM)
    _, stderr = driver.communicate(timeout=120)
    assert driver.returncode == 128 + signal.SIGTERM, stderr
    records = read_records(output / "results.jsonl")
    assert Counter(r["experiment_id"] for r in records).most_common(1)[0][1] == 1
    interrupted = {r["model"]["model_name"]: r for r in records if r["status"] == "interrupted"}
    assert all(r["placement"]["node_id"] and r["placement"]["launcher"] == launcher for r in interrupted.values())
    # Cancelled in its worker, which killed the experiment; not force-killed after the grace period.
    assert interrupted["hang"]["error"]["message"].endswith("the child was killed"), interrupted["hang"]["error"]
    assert len(records) < 5  # experiments that never started get no record: --resume runs them
    assert_no_process_left(marker, within_s=15)


def ray_worker_of(marker: str) -> psutil.Process | None:
    """The Ray worker process whose task runs an experiment child of this run."""
    for line in marked_processes(marker):
        try:
            for parent in psutil.Process(int(line.split()[0])).parents():
                if parent.name().startswith("ray::") or "default_worker.py" in " ".join(parent.cmdline()):
                    return parent
        except psutil.NoSuchProcess:
            continue
    return None


def test_a_worker_that_cannot_honour_the_cancellation_is_killed_and_the_driver_exits(two_nodes, tmp_path: Path,
                                                                                      cli_cache: Path) -> None:
    """SIGTERM cancels a task by raising in its worker. A worker that cannot (here it is stopped,
    as a wedged one would be) is killed after the grace period: the driver still exits, and the
    experiment is still recorded `interrupted`, once, with nothing of the run left behind."""
    marker = uuid.uuid4().hex
    output = tmp_path / "out"
    driver = start_run((*QUICK, "--filter=^hang$"), output, cli_cache, two_nodes.address, marker)
    wait_until(lambda: ray_worker_of(marker) is not None, what="the experiment running in a Ray worker")
    worker = ray_worker_of(marker)
    worker.suspend()
    try:
        driver.send_signal(signal.SIGTERM)
        _, stderr = driver.communicate(timeout=240)  # twice the executor's grace, then some
    finally:
        if worker.is_running():
            worker.resume()
    assert driver.returncode == 128 + signal.SIGTERM, stderr
    records = read_records(output / "results.jsonl")
    assert [(r["model"]["model_name"], r["status"]) for r in records] == [("hang", "interrupted")]
    assert records[0]["placement"]["node_id"]
    assert "did not honour the cancellation within" in records[0]["error"]["message"]
    assert_no_process_left(marker, within_s=15)
    wait_until(lambda: not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE, timeout_s=60,
               what="Ray to end the finished job's wedged worker")


def test_nodes_with_different_torch_are_refused_unless_allowed(two_nodes, tmp_path: Path, cli_cache: Path) -> None:
    fake = tmp_path / "fake_torch" / "torch-0.0.1.dist-info"  # metadata only: `import torch` is unchanged
    fake.mkdir(parents=True)
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 0.0.1\n")
    path = os.pathsep.join(filter(None, [str(fake.parent), str(SUPPORT), os.environ.get("PYTHONPATH")]))
    odd = two_nodes.add_node({"PYTHONPATH": path})
    try:
        proc, _ = run((*QUICK, "--filter=^quick_00$"), tmp_path / "out", cli_cache, two_nodes.address)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().startswith("experiment_runner: error: the Ray cluster's nodes run different "
                                              "torch versions (") and "torch 0.0.1: " in proc.stderr
        assert proc.stderr.strip().endswith("pass --allow-mixed-versions to run anyway")
        assert not (tmp_path / "out" / "results.jsonl").exists()
        proc, _ = run((*QUICK, "--filter=^quick_00$", "--allow-mixed-versions"), tmp_path / "out", cli_cache,
                      two_nodes.address)
        assert proc.returncode == 0, proc.stderr
        assert [r["status"] for r in read_records(tmp_path / "out" / "results.jsonl")] == ["ok"]
    finally:
        odd.kill(signal.SIGTERM)
        wait_until(lambda: two_nodes.alive_nodes() == 2, what="the third node to leave")


def test_cluster_without_the_resource_is_one_line_and_exit_2(two_nodes, tmp_path: Path, cli_cache: Path) -> None:
    # The driver has no GPU either: with --executor=ray, whether cuda can run is the cluster's to say.
    proc, _ = run(("--suite-name=dummy", "--accelerator=cuda", "--dynamo=None", "--test=eval", "--executor=ray"),
                  tmp_path / "out", cli_cache, two_nodes.address)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("experiment_runner: error: the Ray cluster at ")
    assert "no GPU resource for cuda experiments" in proc.stderr
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_without_ray_address_cluster_or_ray_is_one_line_and_exit_2(tmp_path: Path, cli_cache: Path) -> None:
    env = cli_env(cli_cache, new_marker("no-ray"))
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run(cli_command(["--suite-name=dummy", "--accelerator=cpu", "--executor=ray"], tmp_path),
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "needs the cluster's address" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = subprocess.run(cli_command(["--suite-name=dummy", "--accelerator=cpu", "--executor=ray",
                                       "--ray-address=127.0.0.1:1"], tmp_path), env=env,
                          capture_output=True, text=True, timeout=120)  # nobody listens: no minutes of retries
    assert proc.returncode == 2 and proc.stderr.strip() == ("experiment_runner: error: cannot reach the Ray cluster "
                                                            "at 127.0.0.1:1: Connection refused")

    blocker = tmp_path / "no_ray"
    (blocker / "ray").mkdir(parents=True)
    (blocker / "ray" / "__init__.py").write_text("raise ImportError('ray is not installed (simulated)')\n")
    env["PYTHONPATH"] = os.pathsep.join([str(blocker), env["PYTHONPATH"]])
    proc = subprocess.run(cli_command(["--suite-name=dummy", "--accelerator=cpu", "--executor=ray",
                                       "--ray-address=127.0.0.1:1"], tmp_path), env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == ("experiment_runner: error: --executor=ray needs Ray, which is not installed "
                                   f"here: {install_command(['ray'])}")


def test_local_only_flags_are_refused_with_ray(run_cli) -> None:
    for flag in ("--max-parallel=2", "--gpu-ids=0", "--parallel-cpu", "--print-subprocess"):
        run_ = run_cli("--suite-name=dummy", "--executor=ray", flag)
        assert run_.returncode == 2 and f"{flag.split('=')[0]} is for --executor=local" in run_.stderr
    run_ = run_cli("--suite-name=dummy", "--allow-mixed-versions")
    assert run_.returncode == 2 and "--allow-mixed-versions needs --executor=ray" in run_.stderr


def test_records_say_where_they_ran_locally(run_cli) -> None:
    run_ = run_cli("--suite-name=dummy", "--accelerator=cpu", "--dynamo=None", "--test=eval", "--repeat=1")
    assert run_.returncode == 0, run_.stderr
    (record,) = run_.records()
    assert record["placement"]["executor"] == "local" and record["placement"]["node_id"] is None
    assert record["placement"]["host"] == record["environment"]["hostname"]
