"""`experiment_runner compare`: flags real shifts, stays quiet on noise, says when it cannot tell.

The noise model looks like real benchmark noise, not i.i.d. jitter: each process draws its
own offset (memory layout, clocks, autotuning choices), now and then a much larger one (a
neighbour's job), and within a process samples are log-normal with occasional spikes
(an interrupt, a page fault). Repeats of one process share that process's offset, which is
why testing them as independent raises false alarms.
"""

from __future__ import annotations

import json
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pytest

from experiment_runner.analysis.loader import load_rows
from experiment_runner.analysis.stats import mann_whitney_ps, min_two_sided_p
from experiment_runner.cli import main as cli_main

MODELS = ("llama", "nanogpt", "resnet50", "dlrm", "BERT_pytorch")
FLAGGED = {"regression", "improvement"}


@dataclass(frozen=True)
class Noise:
    process_sigma: float = 0.02  # log-sd of a process's offset
    tail_share: float = 0.05  # processes with a larger offset
    tail_sigma: float = 0.06
    sample_sigma: float = 0.01  # log-sd of samples within a process
    spike_share: float = 0.05  # samples slowed by +10..50%


def process_samples(rng: random.Random, base: float, n: int, noise: Noise) -> list[float]:
    offset = rng.gauss(0.0, noise.tail_sigma if rng.random() < noise.tail_share else noise.process_sigma)
    return [base * math.exp(offset + rng.gauss(0.0, noise.sample_sigma))
            * (1 + rng.uniform(0.1, 0.5) if rng.random() < noise.spike_share else 1.0) for _ in range(n)]


def record(run_id: str, model: str, samples: Sequence[float], status: str = "ok", ts: float = 1.7e9,
           process: tuple[int, int] = (0, 1)) -> dict:
    return {
        "schema_version": 1, "run_id": run_id,
        "experiment_id": f"torchbench/{model}/cpu-None-inductor-eval-fp32-bsdefault",
        "model": {"suite_name": "torchbench", "model_name": model, "source": "builtin"},
        "experiment": {"accelerator": "cpu", "xla": None, "xla_flags": None, "dynamo": "inductor",
                       "torch_xla2": None, "test": "eval", "batch_size": 4, "precision": "fp32"},
        "process": {"index": process[0], "count": process[1]},
        "repeat": len(samples), "iterations_per_run": 1,
        "metrics": {"per_iter_time": list(samples)} if status == "ok" else {},
        "status": status, "verification_code": "VERIFIER_SKIPPED", "timestamp": ts,
    }


def write(path: Path, records: Sequence[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def run_records(rng: random.Random, run_id: str, bases: dict[str, float], processes: int, n: int, noise: Noise,
                shifts: dict[str, float] | None = None, ts: float = 1.7e9) -> list[dict]:
    """A run as the runner writes it: rounds of one process per experiment."""
    shifts = shifts or {}
    return [record(run_id, model, process_samples(rng, base * (1 + shifts.get(model, 0.0)), n, noise), ts=ts,
                   process=(index, processes))
            for index in range(processes) for model, base in bases.items()]


def bases_for(models: Sequence[str], rng: random.Random) -> dict[str, float]:
    return {m: 10 ** rng.uniform(-3, -1) for m in models}  # 1 ms to 100 ms


def two_runs(tmp_path: Path, seed: int, shifts: dict[str, float], n: int = 10, processes: int = 10,
             models: Sequence[str] = MODELS, noise: Noise = Noise()) -> tuple[Path, Path]:
    rng = random.Random(seed)
    bases = bases_for(models, rng)
    a = write(tmp_path / "a.jsonl", run_records(rng, "run-a", bases, processes, n, noise))
    b = write(tmp_path / "b.jsonl", run_records(rng, "run-b", bases, processes, n, noise, shifts, ts=1.8e9))
    return a, b


def compare(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = cli_main(["compare", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def verdicts(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, dict[str, str]]:
    code, out, _ = compare(capsys, *argv, "--format", "json")
    return code, {c["model"]: c["verdict"] for c in json.loads(out)["comparisons"]}


MANY = tuple(f"model_{i:03d}" for i in range(60))


def test_the_noise_model_fools_a_test_that_treats_repeats_as_independent() -> None:
    """What the old compare did (Mann-Whitney on one process's repeats, p < 0.01, beyond 5%)
    alarms on several percent of pure-noise comparisons here: the noise model has teeth."""
    rng = random.Random(0)
    bases = bases_for(MANY, rng)
    pairs = [(process_samples(rng, base, 10, Noise()), process_samples(rng, base, 10, Noise()))
             for _ in range(10) for base in bases.values()]
    ps = mann_whitney_ps(pairs)
    alarms = sum(p < 0.01 and abs(sorted(b)[5] / sorted(a)[5] - 1) > 0.05 for p, (a, b) in zip(ps, pairs))
    assert alarms / len(pairs) > 0.03


@pytest.mark.parametrize("processes", [10, 5, 1])
def test_pure_noise_false_alarms_stay_under_one_percent(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        processes: int) -> None:
    """600 A/A experiment comparisons (10 pairs of runs x 60 experiments), real-looking noise."""
    alarms = compared = 0
    for seed in range(10):
        a, b = two_runs(tmp_path, seed, {}, processes=processes, models=MANY)
        _, found = verdicts(capsys, a, b)
        alarms += sum(v in FLAGGED for v in found.values())
        compared += len(found)
    assert compared == 600
    assert alarms <= 6, f"{alarms} false alarms in {compared} comparisons"


def test_a_ten_percent_step_is_caught_with_processes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """10 processes per side: on this noise model 5 catch about 70% of 10% steps, 10 about 99%
    (one process in 20 draws a large offset and widens the t-test's interval)."""
    stepped = {m: 0.10 for m in MANY[::10]}
    a, b = two_runs(tmp_path, seed=11, shifts=stepped, processes=10, models=MANY)
    code, found = verdicts(capsys, a, b)
    assert code == 1
    assert {m for m, v in found.items() if v in FLAGGED} == set(stepped)
    assert all(found[m] == "regression" for m in stepped)


def test_a_ten_percent_slowdown_is_flagged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_runs(tmp_path, seed=1, shifts={"resnet50": 0.10})
    code, out, _ = compare(capsys, a, b)
    assert code == 1
    assert "regression" in next(line for line in out.splitlines() if line.startswith("resnet50"))
    assert "Benjamini-Hochberg" in out and "Welch's t-test on the logs of the per-process medians" in out
    assert "result: REGRESSION (exit 1)" in out
    repro = out.split("to see each regression again, alone:\n", 1)[1].splitlines()
    assert repro[0].startswith("  resnet50 ") and "experiment_runner --suite-name=torchbench --filter='^resnet50$' " in repro[0]
    assert not repro[1].strip(), "only the regression gets a line"
    code, found = verdicts(capsys, a, b)
    assert found["resnet50"] == "regression"
    assert not FLAGGED & {v for m, v in found.items() if m != "resnet50"}


def test_a_change_on_a_noisy_host_is_shown_and_never_called(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The same 10% slowdown, but B's records say busy neighbours shared the host during its timed
    runs (one process's noisy_host is enough): a neighbour moves the whole run, so no verdict."""
    a, b = two_runs(tmp_path, seed=1, shifts={"resnet50": 0.10})
    records = [json.loads(line) for line in b.read_text().splitlines()]
    for r in records:
        if r["model"]["model_name"] == "resnet50" and r["process"]["index"] == 3:
            r["measurements"] = {"noisy_host": True}
    write(b, records)
    code, out, _ = compare(capsys, a, b)
    assert code == 0, out
    assert "noisy host (not judged)" in next(line for line in out.splitlines() if line.startswith("resnet50"))
    _, found = verdicts(capsys, a, b)
    assert found["resnet50"] == "noisy host (not judged)"


def test_one_process_says_the_noise_is_unknown_and_applies_its_floor(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    stepped = {MANY[0]: 0.30, MANY[1]: 0.06}
    a, b = two_runs(tmp_path, seed=12, shifts=stepped, processes=1, models=MANY)
    code, out, _ = compare(capsys, a, b)
    assert code == 1
    assert "process-to-process noise is unknown" in out and "run with --processes" in out
    document = json.loads(compare(capsys, a, b, "--format", "json")[1])
    found = {c["model"]: c for c in document["comparisons"]}
    assert found[MANY[0]]["verdict"] == "regression"
    assert found[MANY[0]]["test"] == "mann-whitney-samples"
    # the floor is stated, beyond the threshold, and derived from the spread across experiments
    assert 0.02 < document["change_spread"] < 0.06
    floors = {c["noise_floor"] for c in document["comparisons"]}
    assert all(f >= 5 * document["change_spread"] - 1e-6 for f in floors)
    assert found[MANY[1]]["verdict"] in ("within threshold", "within noise floor")


def test_few_experiments_and_noisy_processes_stay_within_the_noise_floor(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    noisy = Noise(sample_sigma=0.06)  # relative IQR ~ 8%: the floor is ~ 40%
    a, b = two_runs(tmp_path, seed=13, shifts={"llama": 0.15}, processes=1, noise=noisy)
    code, found = verdicts(capsys, a, b)
    assert code == 0 and found["llama"] == "within noise floor"
    code, out, _ = compare(capsys, a, b)
    assert "too few experiments to estimate" in out


def test_iid_noise_over_thousands_of_experiments_raises_no_alarm(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """With thousands of tests some p-values are small by chance: the old compare (p < 0.01
    and beyond 5%, no correction) found 20 "regressions" in 87k records of pure noise.
    Benjamini-Hochberg, and with one process the noise floor, keep them out."""
    rng = random.Random(14)
    models = [f"m{i:04d}" for i in range(3000)]
    sides = [[[0.001 * (1 + rng.uniform(-0.15, 0.15)) for _ in range(10)] for _ in models] for _ in "ab"]
    ps = mann_whitney_ps(list(zip(*sides)))
    old_alarms = sum(p < 0.01 and abs(sorted(b)[5] / sorted(a)[5] - 1) > 0.05 for p, a, b in zip(ps, *sides))
    assert old_alarms >= 5  # what the uncorrected rule made of this file
    a = write(tmp_path / "a.jsonl", [record("run-a", m, s) for m, s in zip(models, sides[0])])
    b = write(tmp_path / "b.jsonl", [record("run-b", m, s, ts=1.8e9) for m, s in zip(models, sides[1])])
    code, found = verdicts(capsys, a, b)
    assert code == 0 and not FLAGGED & set(found.values())


def test_a_ten_percent_speedup_is_an_improvement_and_exits_zero(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_runs(tmp_path, seed=2, shifts={"llama": -0.10})
    code, found = verdicts(capsys, a, b)
    assert code == 0 and found["llama"] == "improvement"


def test_few_samples_say_significance_is_unreachable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    quiet = Noise(process_sigma=0.002, tail_share=0.0, sample_sigma=0.002, spike_share=0.0)
    a, b = two_runs(tmp_path, seed=3, shifts={"dlrm": 0.30}, n=3, processes=1, noise=quiet)
    code, out, _ = compare(capsys, a, b)
    assert code == 0
    assert "not significant (too few samples)" in next(line for line in out.splitlines() if line.startswith("dlrm"))
    assert "significance is unreachable" in out and "3 vs 3" in out


def test_processes_are_aggregated_and_a_failed_process_fails_the_experiment(tmp_path: Path) -> None:
    path = write(tmp_path / "p.jsonl", [
        record("r", "llama", [1.0, 2.0, 3.0], process=(0, 3)), record("r", "llama", [5.0, 6.0], process=(1, 3)),
        record("r", "llama", [4.0], process=(2, 3)),
        record("r", "dlrm", [1.0], process=(0, 2)), record("r", "dlrm", [], status="crashed", process=(1, 2)),
    ])
    rows = {r.model: r for r in load_rows([path])}
    llama = rows["llama"]
    assert (llama.processes, llama.process_medians, llama.median_per_iter_time_s) == (3, (2.0, 5.5, 4.0), 4.0)
    assert llama.per_iter_time == (1.0, 2.0, 3.0, 5.0, 6.0, 4.0) and llama.n_samples == 6
    assert (rows["dlrm"].status, rows["dlrm"].processes) == ("crashed", 2)


def test_missing_experiments_and_new_failures_are_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(4)

    def noisy() -> list[float]:
        return process_samples(rng, 0.01, 10, Noise())

    a = write(tmp_path / "a.jsonl", [record("run-a", "llama", noisy()),
                                     record("run-a", "nanogpt", noisy()),
                                     record("run-a", "dlrm", noisy())])
    b = write(tmp_path / "b.jsonl", [record("run-b", "llama", noisy()),
                                     record("run-b", "nanogpt", [], status="crashed"),
                                     record("run-b", "resnet50", noisy())])
    code, out, _ = compare(capsys, a, b)
    assert code == 1
    assert "new failure" in next(line for line in out.splitlines() if line.startswith("nanogpt"))
    assert "1 experiment(s) only in A:\n  torchbench/dlrm/" in out
    assert "1 experiment(s) only in B:\n  torchbench/resnet50/" in out


def test_one_file_compares_the_run_before_the_latest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_runs(tmp_path, seed=5, shifts={"nanogpt": 0.10})
    both = write(tmp_path / "both.jsonl", [json.loads(line) for p in (a, b) for line in p.read_text().splitlines()])
    code, out, _ = compare(capsys, both)
    assert code == 1 and "A: run run-a" in out and "B: run run-b" in out
    code, found = verdicts(capsys, both, "--run-a", "run-b", "--run-b", "run-a")
    assert code == 0 and found["nanogpt"] == "improvement"


def test_torn_last_line_is_skipped_with_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_runs(tmp_path, seed=6, shifts={"llama": 0.10})
    with open(b, "a") as handle:
        handle.write('{"schema_version": 1, "run_id": "run-b", "experim')
    code, out, err = compare(capsys, a, b)
    assert code == 1 and "regression" in out
    assert f"{b}: skipped 1 corrupt or torn line(s) (line {10 * len(MODELS) + 1};" in err


@pytest.mark.parametrize(("argv", "code", "message"), [
    (["/no/such.jsonl", "/no/other.jsonl"], 3, "cannot read results file"),
    (["{a}", "{b}", "--run-a", "nope"], 2, "no run 'nope'"),
    (["{a}"], 2, "no run in"),
    (["{a}", "--run-a", "run-a", "--run-b", "run-a"], 2, "same run"),
    (["{a}", "{b}", "--threshold", "-1"], 2, "--threshold"),
    (["{a}", "{b}", "--threshold", "5"], 2, "argument --threshold: 5 would be 500%: give a fraction (0.05) or a "
                                           "percentage (5%)"),
    (["{a}", "{b}", "--threshold", "five"], 2, "'five' is no relative change"),
    (["{a}", "{b}", "--threshold", "nan%"], 2, "must be a finite change of 0 or more"),
    (["{a}", "{b}", "--alpha", "2"], 2, "--alpha"),
])
def test_bad_input_is_one_line_and_exit_2_or_3(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                argv: list[str], code: int, message: str) -> None:
    a, b = two_runs(tmp_path, seed=7, shifts={})
    got, out, err = compare(capsys, *(x.format(a=a, b=b) for x in argv))
    assert (got, out) == (code, "")
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_a_threshold_is_a_fraction_or_a_percentage_and_said_as_given(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """--threshold 5% and 0.05 are one threshold, the default's, and the output says which."""
    a, b = two_runs(tmp_path, seed=9, shifts={"resnet50": 0.10})
    said = []
    for spelling in ((), ("--threshold", "5%"), ("--threshold", "0.05"), ("--threshold", "150%")):
        _, out, _ = compare(capsys, a, b, *spelling, "--format", "json")
        said.append(json.loads(out)["threshold"])
    assert said == [0.05, 0.05, 0.05, 1.5]
    _, out, _ = compare(capsys, a, b, "--threshold", "20%")
    assert out.startswith("A: ") and "threshold 20.0%;" in out


def test_without_scipy_the_error_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = two_runs(tmp_path, seed=8, shifts={})
    monkeypatch.setitem(sys.modules, "scipy.stats", None)
    code, out, err = compare(capsys, a, b)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "needs scipy" in err


def test_ten_samples_per_side_can_reach_the_default_significance() -> None:
    assert min_two_sided_p(10, 10) == pytest.approx(1.0825e-5, rel=1e-3)
    assert min_two_sided_p(3, 3) == pytest.approx(0.1)
    assert min_two_sided_p(0, 10) == 1.0


def test_csv_holds_every_compared_experiment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_runs(tmp_path, seed=9, shifts={"dlrm": 0.10})
    code, out, _ = compare(capsys, a, b, "--format", "csv")
    lines = out.splitlines()
    assert code == 1 and len(lines) == 1 + len(MODELS)
    assert lines[0].startswith("experiment_id,model,configuration,")


def test_a_shift_inside_the_noise_is_shown_as_not_significant(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    before = [[0.010 + 0.001 * i + 0.002 * p for i in range(10)] for p in range(3)]  # processes 20% apart
    a = write(tmp_path / "a.jsonl", [record("run-a", "llama", s, process=(p, 3)) for p, s in enumerate(before)])
    b = write(tmp_path / "b.jsonl", [record("run-b", "llama", [t * 1.08 for t in s], process=(p, 3))
                                     for p, s in enumerate(before)])
    code, out, _ = compare(capsys, a, b)
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("llama"))
    assert "+8.0%" in row and row.endswith("not significant")


def test_model_source_and_batch_size_are_part_of_what_compare_matches(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A built-in llama and TorchBench's are different experiments; so are two batch sizes."""
    rng = random.Random(7)
    real = record("run-b", "llama", process_samples(rng, 0.01, 10, Noise()))
    real["model"]["source"] = "torchbenchmark"
    bigger = record("run-b", "dlrm", process_samples(rng, 0.01, 10, Noise()))
    bigger["experiment"]["batch_size"] = 8
    a = write(tmp_path / "a.jsonl", [record("run-a", "llama", process_samples(rng, 0.01, 10, Noise())),
                                     record("run-a", "dlrm", process_samples(rng, 0.01, 10, Noise()))])
    b = write(tmp_path / "b.jsonl", [real, bigger])
    code, out, _ = compare(capsys, a, b, "--format", "json")
    document = json.loads(out)
    assert document["only_in_a"] == ["torchbench/llama/cpu-None-inductor-eval-fp32-bsdefault"]
    assert document["only_in_b"] == ["torchbench/llama/cpu-None-inductor-eval-fp32-bsdefault [torchbenchmark]"]
    (dlrm,) = document["comparisons"]
    assert dlrm["verdict"] == "not comparable (batch size 4 vs 8)" and code == 0


def test_models_lost_to_timeouts_leave_the_geomean_alone_and_are_listed(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Run B loses five models' compiled experiments to timeouts: the geomean speedup over the
    models both runs measured is the same as A's, and the five are listed as infrastructure."""
    models = [f"m{i:02d}" for i in range(12)]
    rng = random.Random(7)
    eager = {m: 10 ** rng.uniform(-3, -1) for m in models}
    speedup = {m: rng.uniform(1.1, 2.5) for m in models}

    def run(run_id: str, lost: set[str], ts: float) -> list[dict]:
        out = []
        for m in models:
            base = record(run_id, m, [eager[m]] * 5, ts=ts)
            base["experiment_id"] = base["experiment_id"].replace("-inductor-", "-None-")
            base["experiment"]["dynamo"] = None
            compiled = record(run_id, m, [eager[m] / speedup[m]] * 5, status="timeout" if m in lost else "ok", ts=ts)
            out += [base, compiled]
        return out

    lost = set(models[:5])
    a = write(tmp_path / "a.jsonl", run("run-a", set(), 1.7e9))
    b = write(tmp_path / "b.jsonl", run("run-b", lost, 1.7e9 + 86400))
    code = cli_main(["compare", str(a), str(b), "--format", "json"])
    document = json.loads(capsys.readouterr().out)
    (fair,) = [f for f in document["dashboard_over_common_models"] if f["configuration"] == "xla=None dynamo=inductor"]
    assert fair["common_models"] == 7
    assert fair["speedup_geomean_a"] == pytest.approx(fair["speedup_geomean_b"])
    assert sorted((m["model"], m["lacking_in"], m["why"]) for m in fair["one_side_only"]) == [
        (m, "B", "infrastructure (timeout)") for m in sorted(lost)]
    assert code == 1  # the five are still new failures of B
    cli_main(["compare", str(a), str(b)])
    text = capsys.readouterr().out
    assert "dashboard over the models both runs measured" in text
    assert "    m00: counts in one run only, lacking in B: infrastructure (timeout)" in text


def test_a_change_of_speedup_method_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A measured its speedups across processes, B in pairs (--speedup=paired): B's geomean is its
    paired figures, each side says its method, and the change of method is named."""
    def run(run_id: str, paired: float | None, ts: float) -> list[dict]:
        out = []
        for m in ("m0", "m1"):
            base = record(run_id, m, [0.02] * 5, ts=ts)
            base["experiment_id"] = base["experiment_id"].replace("-inductor-", "-None-")
            base["experiment"]["dynamo"] = None
            compiled = record(run_id, m, [0.01] * 5, ts=ts)
            if paired is not None:
                compiled["measurements"] = {"paired": {"speedup": paired}, "samples_from": "pairs"}
                base["measurements"] = {"samples_from": "isolated"}
            out += [base, compiled]
        return out

    a = write(tmp_path / "a.jsonl", run("run-a", None, 1.7e9))
    b = write(tmp_path / "b.jsonl", run("run-b", 1.8, 1.7e9 + 86400))
    cli_main(["compare", str(a), str(b), "--format", "json"])
    (fair,) = [f for f in json.loads(capsys.readouterr().out)["dashboard_over_common_models"]
               if f["configuration"] == "xla=None dynamo=inductor"]
    assert (fair["speedup_geomean_a"], fair["speedup_geomean_b"]) == (pytest.approx(2.0), pytest.approx(1.8))
    assert (fair["speedup_method_a"], fair["speedup_method_b"]) == ("isolated", "paired")
    cli_main(["compare", str(a), str(b)])
    text = capsys.readouterr().out
    assert "2.000x isolated -> 1.800x paired" in text
    assert "measured differently (isolated in A, paired in B)" in text
    # the compiled experiments' samples are their samples in B's pairs: their time changes are named so
    assert "2 experiment(s) took their samples differently in A and B" in text
    cli_main(["compare", str(b), str(b)])
    text = capsys.readouterr().out
    assert "measured differently" not in text and "took their samples differently" not in text


def test_each_regression_says_what_else_changed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A torch bump that brought graph breaks to resnet50 and slowed it: the regression's
    evidence names both; a new failure does not list its own status."""
    a, b = two_runs(tmp_path, seed=1, shifts={"resnet50": 0.10})
    runs = []
    for path, torch_version, breaks in ((a, "2.12.0", 0), (b, "2.13.0", 3)):
        records = [json.loads(line) for line in path.read_text().splitlines()]
        for r in records:
            r["environment"] = {"torch": torch_version, "hostname": "node1"}
            r["measurements"] = {"graph_breaks": {"total": breaks if r["model"]["model_name"] == "resnet50" else 0}}
            if path == b and r["model"]["model_name"] == "llama":
                r.update(status="crashed", metrics={})
        runs.append(write(path, records))
    code, out, _ = compare(capsys, *runs)
    assert code == 1
    evidence = out.split("what else changed between A's and B's record:\n", 1)[1].splitlines()
    said = {line.split()[0]: line for line in evidence[:2]}
    assert said["resnet50"].endswith(": torch 2.12.0 -> 2.13.0; graph breaks 0 -> 3"), out
    assert said["llama"].endswith(": torch 2.12.0 -> 2.13.0"), out
    code, out, _ = compare(capsys, *runs, "--format", "json")
    (resnet,) = [c["experiment_id"] for c in json.loads(out)["comparisons"] if c["model"] == "resnet50"]
    assert json.loads(out)["evidence"][resnet] == [
        {"field": "torch", "before": "2.12.0", "after": "2.13.0", "environment": True},
        {"field": "graph breaks", "before": 0, "after": 3, "environment": False}]


@pytest.mark.e2e
def test_confirm_upholds_a_real_slowdown_and_clears_a_noisy_run(capsys: pytest.CaptureFixture[str],
                                                                  tmp_path: Path, cli_cache: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Two real runs of two paced models; in B, paced_b is slowed on purpose (its pace 1.5x, and
    it stays so) and paced_a's record is inflated 1.5x as a noisy run would be. `compare
    --confirm` reruns both: paced_b is upheld, paced_a is not; exit 1. A pace moves the clock the
    runner reads its samples on by exactly that much (faulty_suite._paced_clock), so every sample,
    the runs' noise floors and the reruns' medians are fixed whatever the host's load: at load 4
    real sleeps gave noise floors of 54-79%, above the slowdown injected."""
    import os
    import subprocess

    from conftest import FAULTY_SUITE, SUPPORT, cli_command

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(SUPPORT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("EXPERIMENT_RUNNER_SUITES", FAULTY_SUITE)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cli_cache))
    args = ["--suite-name=faulty", "--filter=^paced_[ab]$", "--accelerator=cpu", "--dynamo=None", "--test=eval",
            "--precision=fp32", "--repeat=5", "--no-progress-bar"]
    monkeypatch.setenv("FAULTY_PACE_PACED_A", "0.02")
    monkeypatch.setenv("FAULTY_PACE_PACED_B", "0.02")
    for side in ("a", "b"):
        if side == "b":
            monkeypatch.setenv("FAULTY_PACE_PACED_B", "0.03")
        proc = subprocess.run(cli_command(args, tmp_path / side), capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
    newest = tmp_path / "b" / "results.jsonl"
    for path in (tmp_path / "a" / "results.jsonl", newest):
        records = [json.loads(line) for line in path.read_text().splitlines()]
        for r in records:
            r["measurements"]["noisy_host"] = False  # what is judged here is the reruns, not this host's load
            if path == newest and r["model"]["model_name"] == "paced_a":
                r["metrics"]["per_iter_time"] = [t * 1.5 for t in r["metrics"]["per_iter_time"]]
                r["stats"]["per_iter_time"]["median"] *= 1.5
        write(path, records)

    code, out, err = compare(capsys, tmp_path / "a" / "results.jsonl", newest, "--threshold", 0.2,
                             "--confirm", "--confirm-processes", 3)
    assert code == 1, out + err
    confirmation = out.split("confirmation: ", 1)[1].splitlines()
    assert confirmation[0] == "2 suspect(s) rerun with --processes 3; 1 upheld (exit 1)", out
    found = {("paced_b" if "/paced_b/" in line else "paced_a"): line.split() for line in confirmation[1:3]}
    assert found["paced_b"][:2] == ["CONFIRMED", "time"], out
    assert found["paced_a"][:3] == ["NOT", "CONFIRMED", "time"], out
    rerun = tmp_path / "b" / "confirm" / "results.jsonl"
    assert {json.loads(line)["process"]["count"] for line in rerun.read_text().splitlines()} == {3}


def test_per_op_profiles_name_the_ops_that_moved() -> None:
    """Both records profiled per op: the ops whose self time per iteration moved most (10% or
    more) are evidence, largest move first; profiles of different lengths compare per iteration."""
    from experiment_runner.analysis.evidence import differences

    def profiled(repeat: int, ops: dict[str, float]) -> dict:
        return {"repeat": repeat, "iterations_per_run": 2, "measurements": {"per_op_profile": {
            op: {"self_cpu_time_s": seconds * repeat * 2, "self_cuda_time_s": None} for op, seconds in ops.items()}}}

    before = profiled(10, {"aten::conv2d": 0.010, "aten::relu": 0.001, "aten::add": 0.002, "aten::mm": 0.005})
    after = profiled(5, {"aten::conv2d": 0.016, "aten::relu": 0.00105, "aten::add": 0.001, "aten::cat": 0.0005})
    assert [str(d) for d in differences(before, after)] == [
        "aten::conv2d self ms per iteration 10.0 -> 16.0", "aten::mm self ms per iteration 5.0 -> 0.0",
        "aten::add self ms per iteration 2.0 -> 1.0"]
    assert differences(before, {"repeat": 5, "iterations_per_run": 2}) == []  # one side unprofiled


def test_a_change_of_where_the_samples_come_from_is_evidence() -> None:
    """history and compare put "samples from" beside a change when one record's samples were its
    pairs' and the other's isolated runs: the method moved, not only the build."""
    from experiment_runner.analysis.evidence import differences

    isolated, pairs = ({"measurements": {"samples_from": kind}} for kind in ("isolated", "pairs"))
    assert [str(d) for d in differences(isolated, pairs)] == ["samples from isolated -> pairs"]
    assert differences(pairs, pairs) == []


def test_two_hosts_a_fleet_names_alike_are_told_apart_by_their_kernels() -> None:
    """Both hosts say "AMD EPYC"; one lacks AVX-512 BF16, so its bf16 matrix products take torch's
    reference gemm: the evidence says so, as environment, and such differences group into events."""
    from experiment_runner.analysis.evidence import differences

    def record(model: int, isa: list[str], bf16: bool) -> dict[str, object]:
        return {"experiment": {"accelerator_model": "AMD EPYC"},
                "environment": {"cpu": {"cpuid": f"AuthenticAMD family 25 model {model} stepping 1", "isa": isa,
                                        "aten_capability": "AVX2", "mkldnn_bf16": bf16}}}

    found = differences(record(1, ["avx2", "fma"], False), record(17, ["avx2", "fma", "avx512_bf16"], True))
    assert [str(d) for d in found] == [
        "cpu AuthenticAMD family 25 model 1 stepping 1 -> AuthenticAMD family 25 model 17 stepping 1",
        "cpu isa ('avx2', 'fma') -> ('avx2', 'fma', 'avx512_bf16')", "mkldnn bf16 False -> True"]
    assert all(d.environment for d in found) and len({tuple(found)}) == 1  # hashable, so events can group them


def test_the_cpu_allocator_s_settings_are_environment() -> None:
    """A preloaded allocator or glibc malloc's settings took a tenth or more off CPU training steps
    (docs/timing.md): two records that differ in them differ in their environment."""
    from experiment_runner.analysis.evidence import differences

    def record(preload: str | None, malloc: dict[str, str] | None) -> dict[str, object]:
        return {"environment": {"cpu": {"ld_preload": preload, "malloc_env": malloc}}}

    found = differences(record(None, None),
                        record("/usr/lib/libjemalloc.so", {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=33554432"}))
    assert [str(d) for d in found] == [
        "ld_preload None -> /usr/lib/libjemalloc.so",
        "malloc env None -> (('GLIBC_TUNABLES', 'glibc.malloc.mmap_threshold=33554432'),)"]
    assert all(d.environment for d in found) and len({tuple(found)}) == 1
    assert differences(record(None, {"MALLOC_ARENA_MAX": "2"}), record(None, {"MALLOC_ARENA_MAX": "2"})) == []
