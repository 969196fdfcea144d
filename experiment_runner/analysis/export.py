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
  (`inductor_with_cudagraphs_timm_models_bfloat16_inference_cuda_performance.csv`). Beside a
  performance CSV, its `_compilation_metrics.csv` where the records hold dynamo's compile-time
  accounting (`measurements.dynamo_compile`): the four dynamo_timed columns that accounting covers.

With `--cache-bench` measurements, `pytorch-benchmark` also writes each compiled experiment's
cold and warm compile times and the warm speedup as PyTorch's cachebench.py writes them
("TorchCache Benchmark" records).

Speedups are `report`'s (analysis.baselines: the configuration against its eager baseline, same
model, test, precision and batch size); the export never uploads anything itself.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

from experiment_runner.analysis.files import check_output
from experiment_runner.analysis.harness_rows import MAPPING, Exported, exported, harness_dtype, harness_mode
from experiment_runner.analysis.loader import results_files
from experiment_runner.errors import (
    EXIT_INCOMPLETE,
    EXIT_OK,
    EXIT_RESULTS_IO,
    ReportError,
    ReportParser,
    analysis_command,
)


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
        timed_otherwise = [m for m in members if m.not_the_harness_step]
        for member in timed_otherwise:
            left_out[f"{name} row {member.row.model}"] = (f"it timed {member.not_the_harness_step}, so its speedup "
                                                           "is not the harness's figure")
        if performance:
            files[name] = _csv(performance, MAPPING["performance_columns"])
        elif len(timed_otherwise) < len(members):
            left_out[name] = f"none of its {len(members)} experiment(s) has a speedup: {no_speedup(members)}"
        metrics = [row for row in (m.compilation_metrics() for m in members) if row is not None]
        if metrics:  # as the harness names it: the performance CSV's name, then the suffix
            spec = MAPPING["compilation_metrics"]
            files[f"{output}_performance{spec['suffix']}"] = _csv(metrics, [*spec["first_columns"], *spec["columns"]])
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
