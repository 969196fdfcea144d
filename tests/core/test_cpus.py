"""Host CPU figures: thread defaults from the affinity mask, and other processes' load."""

import os
import subprocess
import sys
import time

from experiment_runner.core.cpus import HostLoadSample, affinity_cpus, default_threads, physical_cores


def test_default_threads_are_the_physical_cores_of_the_affinity_mask():
    cpus = affinity_cpus()
    assert cpus == sorted(os.sched_getaffinity(0))
    physical = physical_cores(cpus)
    assert default_threads() == (physical or len(cpus))
    assert physical is None or 1 <= physical <= len(cpus)
    assert physical_cores([cpus[0]]) in (None, 1)


def test_a_busy_neighbour_shows_as_other_processes_cpu_time():
    quiet = HostLoadSample.start()
    time.sleep(0.3)
    asleep = quiet.finish(noisy_share=1.0)
    assert asleep["own_cpu_s"] < 0.1, "sleeping costs us no CPU"
    assert 0 <= asleep["others_cpu_share"] <= 1 and asleep["noisy_host"] is False, "a share above 1 is impossible"

    sample = HostLoadSample.start()
    busy = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<2.0: pass"])
    time.sleep(1.5)
    figures = sample.finish(noisy_share=0.0)  # before the neighbour ends: it is not our waited-for child yet
    busy.wait()
    assert figures["others_cpu_s"] > 0.7, figures  # the neighbour spun about 1.5 s of CPU
    assert figures["others_cpu_share"] == figures["others_cpu_s"] / (figures["wall_s"] * figures["host_cpus"])
    assert figures["noisy_host"] is True and figures["noisy_host_share"] == 0.0
    assert len(figures["load_average_before"]) == 3
