"""PyTorch's torchbench CPU list on a host that reaches no download but the package registries:
which models run, and does each one that cannot say in one line what it needs?

The list is `userbenchmark/dynamo/dynamobench/torchbench_models_list_cpu.txt` of a pytorch/benchmark
checkout (no `python install.py` run in it: no weights, no input data). Every listed model the
checkout has runs through the runner once, eager, eval, fp32, at one small batch for all (the
list's own sizes, up to 2048, take hours per model on a 2-core host), each in its own child:

    python benchmarks/torchbench_offline.py --checkout /tmp/tb --output /tmp/tb_run --rows-out FILE
    python benchmarks/torchbench_offline.py --standing    # the head of docs/benchmarks/torchbench_offline.md

A row keeps, per model, its status, median ms per iteration, the stand-ins the runner used (random
weights, random input data), its requirements.txt and the line a failure gave; beside them the
checkout's commit and the versions of the packages the models' requirements name.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import kept_rows

STUDY = "torchbench_offline"
CPU_LIST = Path("userbenchmark/dynamo/dynamobench/torchbench_models_list_cpu.txt")
MODELS = Path("torchbenchmark/models")
# What the run's environment holds of the packages the listed models' requirements (and
# fastNLP_Bert's install.py) name: each row keeps their versions, None where one is missing.
PACKAGES = ("torch", "torchvision", "numpy", "onnx", "scikit-learn", "pydot", "future", "opencv-python",
            "tensorboardX", "kaldi-io", "pycocotools", "tensorboard", "FastNLP", "setuptools")
LINE_CHARS = 400


def listed(checkout: Path) -> tuple[list[str], list[str]]:
    """The CPU list's names the checkout has a folder for, and those it has not."""
    names = [line.split(",")[0].strip() for line in (checkout / CPU_LIST).read_text().splitlines() if line.strip()]
    return ([n for n in names if (checkout / MODELS / n).is_dir()],
            [n for n in names if not (checkout / MODELS / n).is_dir()])


def version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def outcome(record: dict[str, Any], checkout: Path) -> dict[str, Any]:
    """One model's figures from its record."""
    name = record["model"]["model_name"]
    environment = record.get("environment") or {}
    error = record.get("error") or {}
    per_iter = (record.get("metrics") or {}).get("per_iter_time") or []
    requirements = checkout / MODELS / name / "requirements.txt"
    return {
        "status": record["status"],
        "ms_per_iter": round(1e3 * statistics.median(per_iter), 1) if per_iter else None,
        "stand_ins": sorted(what for what in ("pretrained_weights", "input_data") if environment.get(what) == "random"),
        "requirements": sorted(line.strip() for line in requirements.read_text().splitlines()
                               if line.strip() and not line.startswith("#")) if requirements.exists() else [],
        "line": f"{error.get('type')}: {error.get('message', '').splitlines()[0][:LINE_CHARS]}" if error else None,
    }


def standing(rows: list[dict[str, Any]] | None = None) -> list[str]:
    """The page's present tense: the newest row's models, how many ran, and each failure's line."""
    kept = kept_rows.read(STUDY) if rows is None else rows
    row = kept[-1]
    models = row["models"]
    ok = sum(m["status"] == "ok" for m in models.values())
    cells = [[name, m["status"], "-" if m["ms_per_iter"] is None else f"{m['ms_per_iter']:.1f}",
              ", ".join(m["stand_ins"]) or "-", ", ".join(m["requirements"]) or "-",
              (m["line"] or "").replace("|", "/")] for name, m in sorted(models.items(), key=lambda i: i[0].lower())]
    missing = f"; not in the checkout: {', '.join(row['not_in_checkout'])}" if row["not_in_checkout"] else ""
    return [*kept_rows.table(["model", "status", "ms/iter", "random in place of", "requirements.txt", "the line"], cells),
            "", f"**{ok} of {len(models)} ok** (pytorch/benchmark @ {row['checkout_commit']}, {row['listed']} listed"
            f"{missing}); eager, eval, fp32, batch size {row['batch_size']}; {kept_rows.where(row)}."]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, required=True, help="a pytorch/benchmark checkout (install.py not run)")
    parser.add_argument("--commit", help="the checkout's commit (default: what git says, if it is a clone)")
    parser.add_argument("--output", type=Path, required=True, help="the runner's output folder")
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--subprocess-timeout", type=int, default=900)
    kept_rows.add_arguments(parser, STUDY, standing)
    args = parser.parse_args(argv)
    if not (args.checkout / CPU_LIST).is_file():
        parser.error(f"--checkout: {args.checkout} holds no {CPU_LIST}: not a pytorch/benchmark checkout")
    checkout = args.checkout.resolve()
    commit = args.commit or subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
                                           capture_output=True, text=True, check=False).stdout.strip() or "unknown"
    present, absent = listed(checkout)
    where = kept_rows.host()
    command = [sys.executable, "-m", "experiment_runner", "--suite-name=torchbench",
               f"--filter=^({'|'.join(present)})$", "--accelerator=cpu", "--dynamo=None", "--test=eval",
               "--precision=fp32", f"--batch-size={args.batch_size}",
               f"--subprocess-timeout={args.subprocess_timeout}", f"--output-dirname={args.output}"]
    subprocess.run(command, env=dict(os.environ, TORCHBENCH_DIR=str(checkout)), check=False)
    results = args.output / "results.jsonl"
    records = [json.loads(line) for line in results.read_text().splitlines() if line.strip()] if results.exists() else []
    models = {r["model"]["model_name"]: outcome(r, checkout) for r in records}
    models.update({name: {"status": "no record", "ms_per_iter": None, "stand_ins": [], "requirements": [],
                          "line": "the runner left no record"} for name in present if name not in models})
    row = {"host": where, "checkout_commit": commit, "listed": len(present) + len(absent), "not_in_checkout": absent,
           "batch_size": args.batch_size, "packages": {p: version(p) for p in PACKAGES}, "models": models}
    print(json.dumps({name: m["status"] for name, m in models.items()}, indent=1))
    kept_rows.append(args.rows_out, row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
