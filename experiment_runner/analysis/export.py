"""`experiment_runner export`: a run in the formats PyTorch's dashboards and CI gates read.

- `pytorch-benchmark`: the PyTorch OSS benchmark database's v3 records (one JSON object per line,
  one per metric and experiment), as PyTorch's dynamo harness writes them beside every CSV for
  the uploader: `benchmark`, `model`, `metric`, plus `runners` and `dependencies` from the
  record's environment. Checked against data/pytorch_benchmark_v3.schema.json.
- `dynamo-csv`: the harness's performance and accuracy CSVs, one pair per compiler, suite,
  dtype, mode and device, named as the harness names them
  (`inductor_torchbench_float32_inference_cpu_performance.csv`; compile options other than the
  default in the compiler's part, `inductor_freezing_...`), with our statuses and verification
  codes mapped to its accuracy statuses (data/dynamo_export.json says how). Experiments of a
  PyTorch dashboard configuration (`--dashboard`) also get the accuracy CSV its CI job writes,
  where that job writes it, one per run of the job: `<TEST_CONFIG>/<inference|training>_<suite>.csv`,
  e.g. `cpu_inductor_amp_freezing_timm/inference_timm_models.csv` or
  `inductor_timm/training_timm_models.csv`, whose expected files are PyTorch's
  `cpu_inductor_amp_freezing_timm_inference.csv` and `inductor_timm_training.csv` (check-expected).
  A CUDA performance mode's pair is named by the mode, as its job names them
  (`inductor_with_cudagraphs_timm_models_bfloat16_inference_cuda_performance.csv`).

With `--cache-bench` measurements, `pytorch-benchmark` also writes each compiled experiment's
cold and warm compile times and the warm speedup as PyTorch's cachebench.py writes them
("TorchCache Benchmark" records).

Speedups are `report`'s (the configuration against its eager baseline, same model, test,
precision and batch size); the export never uploads anything itself.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from experiment_runner.analysis.baselines import DEFAULT_BASELINE, ModelResult, pair_with_baselines, parse_baseline
from experiment_runner.analysis.files import check_output
from experiment_runner.analysis.loader import Row, read_rows, results_files, run_records, runs_of, select_run
from experiment_runner.core import dashboards
from experiment_runner.errors import (
    EXIT_INCOMPLETE,
    EXIT_OK,
    EXIT_RESULTS_IO,
    ReportError,
    ReportParser,
    analysis_command,
)

DATA = Path(__file__).parent / "data"
MAPPING: dict[str, Any] = json.loads((DATA / "dynamo_export.json").read_text())
GB = 1e9
# The dynamo counter columns both CSVs carry (get_dynamo_stats's keys at the pinned commit).
HARNESS_STATS = MAPPING["accuracy_columns"][4:]
# The suites PyTorch's CI names in its TEST_CONFIGs and expected files, spelled as ours are.
CI_SUITES = ("torchbench", "huggingface", "timm")


def harness_dtype(precision: str | None) -> str:
    return MAPPING["dtype"].get(str(precision), str(precision))


def harness_mode(test: str | None) -> str:
    return MAPPING["mode"][str(test)]


def unchecked(row: Row, verified: bool) -> bool:
    """An ok record without an accuracy verdict: run without --verify (VERIFIER_SKIPPED with no
    verification block; `verified` tells the verifier's own VERIFIER_SKIPPED, a model too large to
    judge, from it), or a verification code this reader does not know. Never exported as a pass."""
    code = row.verification_code
    return row.status == "ok" and (code not in MAPPING["verification"] or (code == "VERIFIER_SKIPPED" and not verified))


def accuracy_status(result: ModelResult, verified: bool) -> str:
    """The harness's accuracy status for one compiled experiment (data/dynamo_export.json);
    `verified`: the verifier ran on it (its record has a verification block), which tells a
    VERIFIER_SKIPPED of the verifier's (a model too large to judge) from a run without --verify.
    A code this mapping does not know (a newer runner's, a hand-edited record) is no verdict, so
    no pass either."""
    row, base = result.row, result.baseline
    if base is not None and base.status != "ok":
        return MAPPING["baseline_failed"]
    if unchecked(row, verified):
        return MAPPING["unchecked"]
    if row.status == "ok":
        return MAPPING["verification"][str(row.verification_code)]
    return MAPPING["status"].get(row.status, MAPPING["status_default"])


@dataclass(frozen=True)
class Exported:
    """One compiled experiment as the harness's rows see it."""

    result: ModelResult
    record: dict[str, Any]  # its final record (environment, dynamo accounting)

    @property
    def row(self) -> Row:
        return self.result.row

    @property
    def harness_suite(self) -> str:
        return MAPPING["suite"].get(str(self.row.suite), str(self.row.suite))

    @property
    def output(self) -> str:
        """The harness's CSV name for this experiment's compiler (with its compile options, as the
        dashboard's inductor_dynamic_..., inductor_aot_inductor_... files), suite, dtype, mode, device;
        a performance mode's is named by the mode, as test_perf_for_dashboard names its files
        (inductor_with_cudagraphs_...), so it never shares a file with an accuracy job's run."""
        r = self.row
        job = dashboards.dashboards().get(str(self.dashboard))
        options = f"_{r.compile_options.replace('-', '_')}" if r.compile_options else ""
        compiler = job.name if job is not None and job.target == dashboards.PERFORMANCE else f"{r.dynamo}{options}"
        return f"{compiler}_{self.harness_suite}_{harness_dtype(r.precision)}_{harness_mode(r.test)}_{r.accelerator}"

    @property
    def experiment(self) -> dict[str, Any]:
        return self.record.get("experiment") or {}

    @property
    def dashboard(self) -> str | None:
        """The PyTorch dashboard configuration (CI job) this experiment is, if any: the record's own
        `experiment.dashboard`, which knows where a job's run was moved (a CUDA job's training on the
        CPU); a record older than that field is read through core/dashboards.json, where a training
        experiment is a job's only with the harness's step (`experiment.training_recipe`)."""
        if "dashboard" in self.experiment:
            return self.experiment["dashboard"]
        r = self.row
        return dashboards.name_of(str(r.accelerator), r.xla, r.dynamo, str(r.test), str(r.precision),
                                  r.compile_options or "default", self.experiment.get("training_recipe"))

    @property
    def ci_test_config(self) -> str | None:
        """PyTorch CI's TEST_CONFIG for this experiment's configuration and suite
        (cpu_inductor_amp_freezing_timm); None for a performance job's mode, whose files the CI names
        otherwise and no expected file gates."""
        job = dashboards.dashboards().get(str(self.dashboard))
        if job is None or job.target != dashboards.ACCURACY or self.row.suite not in CI_SUITES:
            return None
        return f"{self.dashboard}_{self.row.suite}"

    @property
    def expected_file(self) -> str | None:
        """PyTorch's expected file for this experiment, `<TEST_CONFIG>_<inference|training>.csv`: a job's
        inference and training runs are gated each against its own."""
        if self.ci_test_config is None:
            return None
        return f"{self.ci_test_config}_{dashboards.MODES[str(self.row.test)]}.csv"

    @property
    def ci_accuracy_file(self) -> str | None:
        """Where the CI job writes this experiment's accuracy row: `<TEST_CONFIG>/<inference|training>_<suite>.csv`
        (test.sh's --output for that run, the suite as the harness's module names it)."""
        if self.ci_test_config is None:
            return None
        return f"{self.ci_test_config}/{dashboards.MODES[str(self.row.test)]}_{self.harness_suite}.csv"

    @property
    def moved_to(self) -> str | None:
        """The device this experiment ran on where its CI job runs on another
        (`experiment.dashboard_overrides.accelerator`): its differences may be the device's."""
        return (self.experiment.get("dashboard_overrides") or {}).get("accelerator")

    @property
    def checked(self) -> bool:
        """Whether the experiment has an accuracy verdict (or failed before one could be given)."""
        return not unchecked(self.row, self.record.get("verification") is not None)

    @property
    def harness_counted(self) -> bool:
        """Whether the record's graph-break figure is the harness's own count: inference's is (with
        --verify, breaks.harness_count; AOT Inductor's export breaks nothing); a training step's
        only where its --verify run replayed the harness's step, else its figure is this runner's
        count of every frame compiled."""
        breaks = (self.record.get("measurements") or {}).get("graph_breaks") or {}
        return self.row.test != "train" or "harness_count" in breaks

    @property
    def measurements(self) -> dict[str, Any]:
        return self.record.get("measurements") or {}

    @property
    def harness_warmup(self) -> dict[str, Any]:
        """The eager and compiled warm-ups measured as the harness's run_performance_test measures
        them (measurements.harness_warmup: --speedup=paired or harness, a --dashboard run's)."""
        return self.measurements.get("harness_warmup") or {}

    def graph_stats(self) -> dict[str, int | str]:
        """The accuracy CSV's dynamo columns. graph_breaks is counted as the harness counts it where the
        record has that count (--verify on inference), else the breaks of everything the child compiled.
        The other counters of the harness's accuracy row are its accuracy run's, which this runner does
        not replay when nothing breaks: unique_graphs is the child's, and the columns no record holds
        (calls_captured of that run, the counter columns) are left empty, never a stand-in figure."""
        breaks = self.measurements.get("graph_breaks") or {}
        total, unique = int(breaks.get("total") or 0), int(breaks.get("unique_graphs") or 0)
        reasons = len(breaks.get("reasons") or [])
        return {"calls_captured": "", "unique_graphs": unique, "fallbacks_to_eager": "",
                "graph_breaks": int(breaks.get("harness_count", total)), "unique_graph_breaks": reasons,
                "autograd_captures": "", "autograd_compiles": "", "cudagraph_skips": ""}

    def performance_stats(self) -> dict[str, int | str]:
        """The performance CSV's dynamo columns: the counters' change over the compiled warm-up, compile
        included, as the harness's warmup() takes them (get_dynamo_stats before and after); a record
        without that warm-up gives what its graph_breaks summary holds (calls_captured over everything
        the child compiled, where recorded), the rest left empty."""
        compiled = self.harness_warmup.get("compiled") or {}
        if compiled.get("dynamo_stats"):
            return {column: compiled["dynamo_stats"].get(column, "") for column in HARNESS_STATS}
        breaks = self.measurements.get("graph_breaks") or {}
        return {**self.graph_stats(), "calls_captured": breaks.get("calls_captured", "")}

    def peak_memory(self) -> tuple[float | None, float | None]:
        """(eager, dynamo) peak memory in the harness's unit: its warm-ups' figures (device memory on
        CUDA, 100 x the resident set in GB on the CPU: data/dynamo_export.json, peak_memory), else,
        for a record without them, the peaks of the timed samples of this experiment and its baseline."""
        eager, compiled = (self.harness_warmup.get(side) or {} for side in ("eager", "compiled"))
        if eager.get("peak_memory_bytes") and compiled.get("peak_memory_bytes"):
            scale = MAPPING["peak_memory"]["scale"].get(str(self.row.accelerator), 1) / GB
            return eager["peak_memory_bytes"] * scale, compiled["peak_memory_bytes"] * scale
        base = self.result.baseline
        eager_bytes, dynamo_bytes = (_peak(base) if base is not None else None), _peak(self.row)
        return (eager_bytes / GB if eager_bytes else None), (dynamo_bytes / GB if dynamo_bytes else None)

    def compilation_latency(self) -> float | None:
        """The harness's compilation_latency: its compiled warm-up's time less its eager warm-up's (the
        same count of iterations each); a record without them gives its first-iteration estimate."""
        eager, compiled = (self.harness_warmup.get(side) or {} for side in ("eager", "compiled"))
        if eager.get("latency_s") is not None and eager.get("iterations") == compiled.get("iterations"):
            return compiled["latency_s"] - eager["latency_s"]
        return self.row.compile_time_s

    def performance(self) -> dict[str, Any] | None:
        """The performance CSV's row; None where there is no speedup to report."""
        res, r = self.result, self.row
        if res.speedup is None or not r.median_per_iter_time_s:
            return None
        eager_mem, dynamo_mem = self.peak_memory()
        latency = self.compilation_latency()
        return {"dev": r.accelerator, "name": r.model, "batch_size": r.batch_size,
                "speedup": round(res.speedup, 6), "abs_latency": round(r.median_per_iter_time_s * 1e3, 6),
                "compilation_latency": round(latency, 6) if latency is not None else 0.0,
                "compression_ratio": round(eager_mem / dynamo_mem, 6) if eager_mem and dynamo_mem else 0.0,
                "eager_peak_mem": round(eager_mem, 6) if eager_mem else 0.0,
                "dynamo_peak_mem": round(dynamo_mem, 6) if dynamo_mem else 0.0,
                **self.performance_stats()}

    def accuracy(self) -> dict[str, Any]:
        r = self.row
        return {"dev": r.accelerator, "name": r.model, "batch_size": r.batch_size,
                "accuracy": accuracy_status(self.result, self.record.get("verification") is not None),
                **self.graph_stats()}


def _peak(row: Row | None) -> float | None:
    if row is None:
        return None
    value = row.peak_allocated_bytes or row.timed_peak_rss_bytes or row.peak_rss_bytes
    return float(value) if value else None


def exported(paths: Sequence[Path], run_id: str | None) -> list[Exported]:
    """The run's compiled experiments (not the eager baselines), in model order."""
    rows = read_rows(paths)
    run = select_run(runs_of(rows), run_id)
    fixed = parse_baseline(DEFAULT_BASELINE)
    records = run_records(paths, run.run_id)
    results = [res for res in pair_with_baselines([r for r in rows if r.run_id == run.run_id], fixed)
               if res.row.dynamo is not None and res.baseline is not res.row]
    results.sort(key=lambda res: (str(res.row.suite), str(res.row.model), res.row.experiment_id))
    return [Exported(res, records.get(res.row.experiment_id, {})) for res in results]


def _csv(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(columns), lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def no_speedup(members: Sequence[Exported]) -> str:
    """Why a group has no performance row, in words that say how to get one. A verification code
    this reader does not know is no verdict, so no timing of it counts whatever baseline there
    is: named first, as a baseline would not help."""
    unknown = sorted({str(m.row.verification_code) for m in members
                      if m.row.status == "ok" and m.row.verification_code not in MAPPING["verification"]})
    if unknown:
        return (f"{', '.join(unknown)} is no verification code this reader knows (a newer runner's?), so no "
                "verdict, and a timing without one is not exported: export with the runner that wrote them")
    if all(m.result.baseline is None for m in members):
        return ("the run has no eager baseline for them: plan one beside them (--dynamo=None), or time it in "
                "their own process (--speedup=harness, a --dashboard run's default)")
    return "each failed, did not pass verification, or lacks its baseline's figures"


def dynamo_csv(items: Sequence[Exported]) -> tuple[dict[str, str], dict[str, str]]:
    """File name -> contents: a performance and an accuracy CSV per output group; and the files
    left out, with why: a performance CSV with no row is not written (a header alone reads as a
    run that measured nothing, not as one that could not)."""
    groups: dict[str, list[Exported]] = {}
    for item in items:
        groups.setdefault(item.output, []).append(item)
    files, left_out = {}, {}
    for output, members in sorted(groups.items()):
        performance = [row for row in (m.performance() for m in members) if row is not None]
        name = f"{output}_performance.csv"
        if performance:
            files[name] = _csv(performance, MAPPING["performance_columns"])
        else:
            left_out[name] = f"none of its {len(members)} experiment(s) has a speedup: {no_speedup(members)}"
        files[f"{output}_accuracy.csv"] = _csv([m.accuracy() for m in members], MAPPING["accuracy_columns"])
    ci_files: dict[str, list[Exported]] = {}
    for item in items:
        if item.ci_accuracy_file is not None:
            ci_files.setdefault(item.ci_accuracy_file, []).append(item)
    for name, members in sorted(ci_files.items()):  # as PyTorch's CI job <TEST_CONFIG> writes each run's CSV
        files[name] = _csv([m.accuracy() for m in members], MAPPING["accuracy_columns"])
    return files, left_out


def _runner(record: dict[str, Any]) -> dict[str, Any]:
    """The runner block: `cpu_info` is the processor's model name, as the database's other runners
    give it, from the record's environment.cpu (/proc/cpuinfo on the host that ran it, not on the
    one exporting); records without one (older, or no /proc/cpuinfo) give their platform string."""
    env = record.get("environment") or {}
    cpu = env.get("cpu") or {}
    accelerator = (record.get("experiment") or {}).get("accelerator")
    gpu = accelerator == "cuda"
    return {"name": str(env.get("hostname") or ""), "type": str(accelerator or ""),
            "cpu_info": str(cpu.get("model_name") or env.get("platform") or ""),
            "cpu_count": int(cpu.get("threads") or 0),
            "gpu_info": str((record.get("experiment") or {}).get("accelerator_model") or "") if gpu else "",
            "gpu_count": 1 if gpu else 0}


def _dependencies(record: dict[str, Any]) -> dict[str, dict[str, str]]:
    env = record.get("environment") or {}
    found = {}
    for name in ("torch", "torch_xla", "transformers", "timm"):
        if env.get(name):
            found[name] = {"version": str(env[name])}
    if env.get("torchbenchmark_commit"):
        found["torchbenchmark"] = {"sha": str(env["torchbenchmark_commit"])}
    return found


def cachebench_records(item: Exported, base: dict[str, Any]) -> list[dict[str, Any]]:
    """cachebench.py's three records for an experiment measured with --cache-bench, else none.

    cachebench.py puts "OSS model" in `metric.type`, a field the database does not have; here it
    stays in `model.type`, as in the compiler records."""
    measured = item.record.get("measurements") or {}
    cold, warm = measured.get("cold_compile_time_s"), measured.get("warm_compile_time_s")
    if cold is None or warm is None:
        return []
    spec = MAPPING["cachebench"]
    options = (item.record.get("experiment") or {}).get("compile_options")  # --compile-options, a name
    benchmark = {"name": spec["benchmark"], "mode": base["benchmark"]["mode"], "dtype": base["benchmark"]["dtype"],
                 "extra_info": {"is_dynamic": options == "dynamic",
                                "device": base["benchmark"]["extra_info"]["device"]}}
    values = {"cold": cold, "warm": warm, "speedup_pct": (measured.get("cache_bench") or {}).get("warm_speedup_pct")}
    return [{**base, "benchmark": benchmark, "metric": {"name": spec["metrics"][key], "benchmark_values": [value]}}
            for key, value in values.items() if value is not None]


def benchmark_records(items: Sequence[Exported]) -> list[dict[str, Any]]:
    """v3 records: one per metric of the performance and accuracy rows, as the harness writes them,
    then cachebench.py's records where the experiment measured its compilation cache."""
    out = []
    for item in items:
        r = item.row
        suite = MAPPING["suite"].get(str(r.suite), str(r.suite))
        base = {
            "benchmark": {"name": "TorchInductor", "mode": harness_mode(r.test), "dtype": harness_dtype(r.precision),
                          "extra_info": {"device": str(r.accelerator), "batch_size": str(r.batch_size),
                                         "flags": ",".join(item.result.flags()),
                                         "output": f"{item.output}_performance.csv",
                                         "experiment_id": r.experiment_id, "run_id": r.run_id}},
            "model": {"name": str(r.model), "type": "OSS model", "backend": str(r.dynamo), "origins": [suite]},
            "runners": [_runner(item.record)],
            "dependencies": _dependencies(item.record),
        }
        performance = item.performance() or {}
        for name in MAPPING["v3_metrics"]:
            if name in performance:
                out.append({**base, "metric": {"name": name, "benchmark_values": [performance[name]]}})
        accuracy = item.accuracy()
        out.append({**base, "benchmark": {**base["benchmark"], "extra_info": {
            **base["benchmark"]["extra_info"], "output": f"{item.output}_accuracy.csv"}},
            "metric": {"name": "accuracy", "extra_info": {"benchmark_values": [accuracy["accuracy"]]}}})
        out.extend(cachebench_records(item, base))
    return out


def build_parser() -> argparse.ArgumentParser:
    p = ReportParser(prog="experiment_runner export", description=__doc__.split("\n\n", 1)[0],
                     epilog="Exit status: 0 written; 1 written but for a file that would have had no row (each "
                            "named, with why); 2 bad flags; 3 a file cannot be read or written.")
    p.add_argument("files", nargs="+", type=Path, help="results files, or folders searched for *.jsonl")
    p.add_argument("--format", required=True, choices=("pytorch-benchmark", "dynamo-csv"))
    p.add_argument("-o", "--output", type=Path, required=True,
                   help="pytorch-benchmark: the JSON-lines file to write; dynamo-csv: the folder for the CSVs")
    p.add_argument("--run-id", help="which run (default: the latest)")
    return p


def write(args: argparse.Namespace) -> tuple[list[Path], dict[Path, str]]:
    """The files written, and those left out with why (dynamo-csv's performance files with no row)."""
    inputs = results_files(args.files)
    csvs = args.format == "dynamo-csv"
    check_output(args.output, inputs, "-o", folder=csvs)
    parent = args.output.absolute().parent
    if not parent.exists():  # a mistyped path must not become a tree of new folders
        raise ReportError(f"-o {args.output}: the folder {parent} does not exist; create it first (export creates "
                          "only its output)", EXIT_RESULTS_IO)
    items = exported(inputs, args.run_id)
    if not items:
        raise ReportError("the run holds no compiled experiment (dynamo other than None) to export")
    try:
        if not csvs:
            args.output.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in benchmark_records(items)))
            return [args.output], {}
        contents, left_out = dynamo_csv(items)
        files = {args.output / name: text for name, text in contents.items()}
        for path in files:
            check_output(path, inputs, "-o")
            _check_target(path, args.output)
        args.output.mkdir(parents=True, exist_ok=True)
        for path, text in files.items():
            path.parent.mkdir(exist_ok=True)
            path.write_text(text)
        return list(files), {args.output / name: why for name, why in left_out.items()}
    except OSError as exc:
        raise ReportError(f"cannot write {exc.filename or args.output}: {exc.strerror or exc}",
                          EXIT_RESULTS_IO) from None


def _check_target(path: Path, folder: Path) -> None:
    """Refuse, before any file is written, a CSV whose folder is a file (check_output refuses a
    CSV that is a folder): finding it half way would leave an export half written."""
    blocked = next((parent for parent in path.relative_to(folder).parents
                    if parent != Path(".") and (folder / parent).exists() and not (folder / parent).is_dir()), None)
    if blocked is not None:
        raise ReportError(f"cannot write {path}: {folder / blocked} is a file, not a folder; nothing was written",
                          EXIT_RESULTS_IO)


@analysis_command("export")
def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    written, left_out = write(args)
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    for path, why in left_out.items():
        print(f"experiment_runner export: {path} not written: {why}", file=sys.stderr)
    return EXIT_INCOMPLETE if left_out else EXIT_OK
