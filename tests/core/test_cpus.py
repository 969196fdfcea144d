"""Host CPU figures: thread defaults from the affinity mask, and other processes' load."""

import os
import subprocess
import sys
import time

import pytest

from experiment_runner.core.cpus import (
    HostLoadSample,
    affinity_cpus,
    cpu_identity,
    default_threads,
    judge_noisy,
    physical_cores,
)


def test_default_threads_are_the_physical_cores_of_the_affinity_mask():
    cpus = affinity_cpus()
    assert cpus == sorted(os.sched_getaffinity(0))
    physical = physical_cores(cpus)
    assert default_threads() == (physical or len(cpus))
    assert physical is None or 1 <= physical <= len(cpus)
    assert physical_cores([cpus[0]]) in (None, 1)


# Two processors a virtual machine names alike: Zen 3 (no AVX-512) and Zen 4 (AVX-512 BF16), the
# first entries of their /proc/cpuinfo cut to the fields read; then an Arm server's, which has
# no model name and lists its ISA under "Features".
ZEN3 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
stepping\t: 1
flags\t\t: fpu sse2 avx fma avx2 sha_ni

processor\t: 1
flags\t\t: avx512f avx512_bf16
"""
ZEN4 = ZEN3.replace("model\t\t: 1", "model\t\t: 17").replace(
    "avx2 sha_ni", "avx2 avx512f avx512dq avx512bw avx512vl avx512_vnni avx512_bf16 sha_ni", 1)
ARM = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd crc32 asimddp sve sve2 bf16 i8mm
CPU implementer\t: 0x41
"""


@pytest.mark.parametrize("text, model_name, cpuid, isa", [
    (ZEN3, "AMD EPYC", "AuthenticAMD family 25 model 1 stepping 1", ["avx2", "fma"]),
    (ZEN4, "AMD EPYC", "AuthenticAMD family 25 model 17 stepping 1",
     ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16"]),
    (ARM, None, None, ["asimd", "asimddp", "sve", "sve2", "bf16", "i8mm"]),
    ("", None, None, None),
])
def test_the_processor_is_told_apart_by_its_cpuid_and_kernel_flags(tmp_path, text, model_name, cpuid, isa):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(text)
    assert cpu_identity(cpuinfo) == {"model_name": model_name, "cpuid": cpuid, "isa": isa}


def test_an_unreadable_cpuinfo_says_nothing_rather_than_guessing(tmp_path):
    assert cpu_identity(tmp_path / "absent") == {"model_name": None, "cpuid": None, "isa": None}


@pytest.mark.e2e
def test_a_busy_neighbour_shows_as_other_processes_cpu_time():
    quiet = HostLoadSample.start()
    time.sleep(0.3)
    asleep = quiet.finish(noisy_share=1.0)
    assert asleep["own_cpu_s"] < 0.1, "sleeping costs us no CPU"
    assert 0 <= asleep["others_cpu_share"] <= 1, "a share above 1 is impossible"
    assert asleep["noisy_host"] is None, "nor can a share above 1 ever be shown: not judged"
    assert asleep["others_cpu_resolution_s"] == 2 * asleep["host_cpus"] / os.sysconf("SC_CLK_TCK")

    sample = HostLoadSample.start()
    busy = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<2.0: pass"])
    time.sleep(1.5)
    figures = sample.finish(noisy_share=0.0)  # before the neighbour ends: it is not our waited-for child yet
    busy.wait()
    assert figures["others_cpu_s"] > 0.7, figures  # the neighbour spun about 1.5 s of CPU
    assert figures["others_cpu_share"] == figures["others_cpu_s"] / (figures["wall_s"] * figures["host_cpus"])
    assert figures["noisy_host"] is True and figures["noisy_host_share"] == 0.0
    assert len(figures["load_average_before"]) == 3


def test_a_few_ticks_of_neighbours_in_a_short_stretch_are_not_a_noisy_host():
    """Figures from A/A records on a quiet 2-CPU host (10 ms ticks, resolution 0.04 s): timed
    runs of 16-50 ms where a neighbour's one or two ticks read as a 15-39% share."""
    resolution = 2 * 2 / 100
    assert judge_noisy(0.0078, 0.016, 2, 0.1, resolution) is None, "too short to tell"
    assert judge_noisy(0.0126, 0.043, 2, 0.1, resolution) is False, "two ticks in 43 ms: within the resolution"
    assert judge_noisy(0.0283, 0.051, 2, 0.1, resolution) is False
    assert judge_noisy(0.06, 0.06, 2, 0.05, resolution) is True, "a neighbour on a whole CPU shows even in 60 ms"
    assert judge_noisy(0.15, 1.0, 2, 0.1, resolution) is False, "7.5% of the host: under the share"
    assert judge_noisy(0.30, 1.0, 2, 0.1, resolution) is True, "15% of the host, beyond the resolution"
