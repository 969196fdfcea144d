"""The reference runner's own --dry-run beside ours, for each of its documented invocations.

tests/parent/test_reference_invocations.py checks our plans against a re-implementation of the
reference's planning on simulated hosts; this script asks the real thing, on this host. It
needs the XLA environment (torch_xla: both runners probe it), a copy of the reference's
`benchmarks/` folder (one from before PyTorch/XLA removed CUDA from it, pytorch/xla#9610, for its
CUDA invocations), and a torchbenchmark checkout (by default a stand-in of empty model folders
named after the models the invocations and our tier data name, plus a `__pycache__`, listed the
way `torchbenchmark._list_model_paths` lists them). Never commit the fetched files.

    PJRT_DEVICE=CPU .venv-xla/bin/python benchmarks/plans_vs_reference.py --reference /tmp/ref/benchmarks \
        --reference-commit "pytorch/xla @ ddf75a17c8" --rows-out docs/benchmarks/data/plans_vs_reference/DATE.jsonl
    python benchmarks/plans_vs_reference.py --standing   # the head of docs/benchmarks/plans_vs_reference.md

Each invocation runs as written and with its accelerator replaced by `cpu` (this host's), so
that the CUDA and TPU commands plan something here too. The reference's single-config mode
(--experiment-config) does not dry-run, so those invocations are left to the test. The
output is one line per invocation (same / differs, with the experiments only one side plans;
"refused" where ours refuses an accelerator this host lacks, which the reference plans and then
fails) and the exit status is the number of invocations that differ.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "parent"))
from test_reference_invocations import DIMENSIONS, INVOCATIONS  # noqa: E402

import kept_rows  # noqa: E402
from benchmark_models.data_files import read_data  # noqa: E402

CUDA_HERE = Path("/dev/nvidia0").exists()
RUN_LINE = re.compile(r"Run with --model-config=(\{.*?\}) --experiment-config=(\{.*\})")
OUR_LINE = re.compile(r"^\s*\d+\. (\S+): (.*?)(?:  \[.*\])?$")
LIST_MODEL_PATHS = '''import pathlib


def _list_model_paths():
    models = pathlib.Path(__file__).parent / "models"
    return sorted(str(child.absolute()) for child in models.iterdir() if child.is_dir())
'''


def stand_in_checkout(folder: Path) -> Path:
    """Empty model folders for every name the invocations and the tier data use."""
    names = {"alexnet", "BERT_pytorch", "dlrm", "llama", "moco", "hf_Bert", "cm3leon_generate", "vision_maskrcnn"}
    names |= {n for tier in read_data("torchbench_tiers.json")["tiers"].values() for n in tier}
    package = folder / "torchbenchmark"
    for name in names:
        (package / "models" / name).mkdir(parents=True)
        (package / "models" / name / "__init__.py").write_text("")
    (package / "models" / "__pycache__").mkdir()
    (package / "__init__.py").write_text(LIST_MODEL_PATHS)
    return folder


def deliberately_dropped(entry: tuple, checkout: Path) -> bool:
    """What the reference plans and ours drops on purpose (docs/compatibility.md): a
    checkout folder that holds no model, xla=XRT, and CUDA experiments on a host without CUDA."""
    model, accelerator, xla = entry[:3]
    folder = checkout / "torchbenchmark" / "models" / model
    return (folder.is_dir() and not (folder / "__init__.py").is_file()) or xla == "XRT" or (
        accelerator == "cuda" and not CUDA_HERE)


def cpu_variant(argv: list[str]) -> list[str]:
    return [re.sub(r"^--accelerator=\w+$", "--accelerator=cpu", a) for a in argv]


def reference_plan(python: str, script: Path, argv: list[str], work: Path, out: Path) -> set[tuple]:
    proc = subprocess.run([python, str(script), *argv, "--dry-run", f"--output-dirname={out}"], cwd=work,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"the reference failed ({proc.returncode}): {proc.stderr.strip()[-1500:]}")
    planned = set()
    for match in RUN_LINE.finditer(proc.stderr):
        model, exp = json.loads(match[1]), json.loads(match[2])
        exp.setdefault("keep_model_data_on_cuda", False)
        planned.add((model["model_name"], *(exp.get(k) for k in DIMENSIONS)))
    return planned


def parse_label(label: str) -> dict:
    words = label.split()
    config = {"accelerator": words[0], "xla_flags": None, "torch_xla2": None, "keep_model_data_on_cuda": False,
              "enable_functionalization": False}
    for word in words[1:]:
        key, _, value = word.partition("=")
        if key in ("xla", "dynamo"):
            config[key] = None if value == "None" else value
        elif key in ("eval", "train"):
            config["test"] = key
        elif key == "XLA_FLAGS":
            config["xla_flags"] = value
        elif key == "torch_xla2":
            config["torch_xla2"] = value
        elif key == "keep_model_data_on_cuda":
            config["keep_model_data_on_cuda"] = True
        elif key == "functionalization":
            config["enable_functionalization"] = True
    return config


class Refused(Exception):
    """Ours refused the command with one line, as it does an accelerator this host lacks."""


def our_plan(python: str, argv: list[str], work: Path, out: Path, checkout: Path) -> set[tuple]:
    env = {**os.environ, "TORCHBENCH_DIR": str(checkout),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([python, "-m", "experiment_runner", *argv, "--dry-run", f"--output-dirname={out}"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode == 2 and "matches the filters" in proc.stderr:
        return set()
    if proc.returncode == 2 and "not available on this host" in proc.stderr:
        raise Refused(proc.stderr.strip())
    if proc.returncode != 0:
        raise SystemExit(f"ours failed ({proc.returncode}): {proc.stderr.strip()[-1500:]}")
    planned = set()
    for line in proc.stdout.splitlines():
        match = OUR_LINE.match(line)
        if match:
            config = parse_label(match[2])
            planned.add((match[1], *(config[k] for k in DIMENSIONS)))
    return planned


STUDY = "plans_vs_reference"


def standing(rows: list[dict] | None = None) -> list[str]:
    """The page's present tense: the newest kept run, each invocation as written and on this
    host's CPU (same, differs or refused by ours on purpose), then how many plan the same."""
    row = (kept_rows.read(STUDY) if rows is None else rows)[-1]
    compared = [c for c in row["comparisons"] if c["outcome"] != "refused"]
    same = sum(c["outcome"] == "same" for c in compared)
    lines = kept_rows.table(
        ["invocation", "variant", "outcome", "experiments (reference / ours)", "planned by the reference, dropped by ours on purpose"],
        [[c["name"], c["variant"], c["outcome"], f"{c['reference']} / {c['ours'] if c['ours'] is not None else '-'}",
          str(c["dropped"])] for c in row["comparisons"]])
    return lines + ["", f"{same} of {len(compared)} comparisons plan the same experiments; "
                        f"{len(row['comparisons']) - len(compared)} refused by ours on purpose (an accelerator this "
                        f"host lacks); against {row['reference']}, on {kept_rows.where(row)}."]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, help="the reference's benchmarks/ folder")
    parser.add_argument("--reference-commit", default="an unnamed checkout",
                        help="what the reference folder is, for the kept row (e.g. 'pytorch/xla @ ddf75a17c8')")
    parser.add_argument("--torchbench-yaml", type=Path,
                        help="PyTorch's benchmarks/dynamo/torchbench.yaml (its --dry-run does not read it; "
                             "default: an empty one where the reference looks for it)")
    parser.add_argument("--checkout", type=Path, help="a torchbenchmark checkout (default: a stand-in)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter of both runners")
    kept_rows.add_arguments(parser, STUDY, standing)
    args = parser.parse_args()
    if args.reference is None:
        parser.error("--reference is required (except with --standing)")
    differ = 0
    row: dict = {"host": kept_rows.host(), "reference": args.reference_commit, "comparisons": []}
    with tempfile.TemporaryDirectory(prefix="plans-vs-reference-") as tmp:
        work = Path(tmp) / "work"
        (work / "benchmarks" / "dynamo").mkdir(parents=True)
        yaml = work / "benchmarks" / "dynamo" / "torchbench.yaml"
        if args.torchbench_yaml:
            shutil.copy(args.torchbench_yaml, yaml)
        else:
            yaml.write_text("{}\n")
        checkout = args.checkout.resolve() if args.checkout else stand_in_checkout(Path(tmp) / "checkout")
        (work / "torchbench").symlink_to(checkout)
        for i, (name, (_, argv)) in enumerate(INVOCATIONS.items()):
            if any(a.startswith("--experiment-config") for a in argv):
                continue
            variants = {"as written": argv}
            if cpu_variant(argv) != argv:
                variants["on cpu"] = cpu_variant(argv)
            for label, variant in variants.items():
                planned = reference_plan(args.python, args.reference / "experiment_runner.py", variant, work,
                                         Path(tmp) / f"ref-{i}-{len(label)}")
                theirs = {e for e in planned if not deliberately_dropped(e, checkout)}
                try:
                    ours = our_plan(args.python, variant, work, Path(tmp) / f"ours-{i}-{len(label)}", checkout)
                except Refused as exc:  # a deliberate difference (docs/compatibility.md): the reference plans them to fail
                    print(f"refused {name} ({label}): the reference plans {len(planned)} (to fail here); ours: {exc}",
                          flush=True)
                    row["comparisons"].append({"name": name, "variant": label, "outcome": "refused",
                                               "reference": len(planned), "ours": None, "dropped": 0})
                    continue
                same = theirs == ours
                differ += not same
                row["comparisons"].append({"name": name, "variant": label, "outcome": "same" if same else "differs",
                                           "reference": len(theirs), "ours": len(ours),
                                           "dropped": len(planned) - len(theirs)})
                print(f"{'same   ' if same else 'DIFFERS'} {name} ({label}): reference {len(theirs)}, ours {len(ours)}"
                      f" (and {len(planned) - len(theirs)} the reference plans that ours drops on purpose)", flush=True)
                for side, extra in (("only the reference", theirs - ours), ("only ours", ours - theirs)):
                    for entry in sorted(extra, key=str)[:5]:
                        print(f"    {side}: {entry}")
                    if len(extra) > 5:
                        print(f"    {side}: ... {len(extra) - 5} more")
    kept_rows.append(args.rows_out, row)
    return differ


if __name__ == "__main__":
    sys.exit(main())
