"""Which records PyTorch's minifier can shrink, how, and where its answers are kept.

A red compiled experiment (verdict FAIL, or status error) is re-run in a process of its own
under torch._dynamo's repro settings, which dump a `minifier_launcher.py`; the launcher shrinks
the failing graph to `repro.py`, which is then run in a fresh interpreter to see whether it
still shows the experiment's symptom. Pure: the parent plans and records, the child
(`child/minify.py`) does the work.

The answers go to a sidecar file, `minified.jsonl` beside the results file, one line per
minification keyed by run_id and experiment_id: every experiment keeps exactly one record in
the results file (which the runner only appends to), and a minification done later (the
`minify` command) cannot rewrite it. Readers join the newest line of an experiment to its
record as its `minified` block (`join_minified`).
"""

from __future__ import annotations

import json
import os
import re
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from experiment_runner.core.matrix import AOT_INDUCTOR_OPTIONS
from experiment_runner.core.results import BadLine, RecordWarning, ResultsFileError, iter_numbered_records

SIDECAR = "minified.jsonl"
# The folder, inside the experiment's own, where the minifier works and its repro is kept; an attempt
# made while it holds a repro that reproduced works beside it, in `minify.<attempt>`.
FOLDER = "minify"
JOB_FILE = "minify_job.json"
# In the experiment's folder: held by the one minification of the experiment under way.
LOCK_FILE = "minify.lock"
RESULT_FILE = "minify_result.json"
CHECK_RESULT_FILE = "checkpoint_check.json"  # the check of a killed minification's last checkpoint
LOG_FILE = "minify.log"
MINIFIER_LOG = "minifier.log"  # the launcher's output
CHECK_LOG = "repro_check.log"  # repro.py's output in a fresh interpreter
WORK_FOLDER = "work"  # the launcher's working folder: its checkpoints and repro.py
REPRO_FILE = "repro.py"

# Measured on a busy 2-core host (docs/benchmarks/minify.md): a real model's failing graph
# (alexnet's 47 nodes, repvgg_a2's 1377, T5Small's 1091) minifies after AOT in 8 to 44 minutes,
# each query compiling C++; an hour lets those finish, and bounds a run.
DEFAULT_TIMEOUT_S = 3600.0
# The share of a budget kept to check the last checkpoint of a minification that ran past the rest:
# a real model's repro runs once in a fresh interpreter in well under a minute (T5Small's 90-node
# checkpoint: 39 s), and a checked repro, even a larger one, is what a user can act on.
CHECK_SHARE = 0.1

# The exception a repro of an accuracy failure raises (torch._dynamo.debug_utils).
ACCURACY_SYMPTOM = "AccuracyError"
# Wrappers dynamo and inductor put around a backend's own exception, which the repro (compiling
# the graph directly) may not raise: the symptom is the innermost named exception.
WRAPPERS = frozenset({"BackendCompilerFailed", "InductorError"})

# Settings a user's shell may carry that would make a repro's process (or the minifier's own: the
# launcher, the check) dump and minify again, or read a cache instead of compiling.
CLEARED_ENV = ("TORCHDYNAMO_REPRO_AFTER", "TORCHDYNAMO_REPRO_LEVEL", "TORCH_COMPILE_DEBUG_DIR")
FRESH_COMPILE_ENV = {"TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}

# A minification's outcome, as the record schema's `minified.status` lists them.
STATUSES = ("reproduced", "not_reproduced", "no_launcher", "no_repro", "timeout", "failed")

_STARTED = re.compile(r"Started off with (\d+) nodes")
_CHECKPOINT = re.compile(r"minified_(\d+)_nodes\.py$")
# The minifier's progress: each strategy names the graph's size as it stands, each success the new size.
_SIZE = re.compile(r"\((\d+) nodes, \d+ inputs\)|Went from \d+ to (\d+) nodes")
# An exception's name where a traceback or a wrapper's message puts one: at the start of a line,
# or after another's "Name: " (inductor's "InductorError: CppCompileError: ...").
_EXCEPTION = re.compile(r"(?:^|(?<=Error: )|(?<=Failed: ))(?:[A-Za-z_]\w*\.)*"
                        r"([A-Z]\w*(?:Error|Exception|Failed|Interrupt))(?=:|$)", re.MULTILINE)


@dataclass(frozen=True)
class MinifyJob:
    """What the minifier child is asked: the symptom's kind, dynamo's repro stage and level, and
    the symptom a repro must show to count as reproducing."""

    kind: str  # "accuracy" or "error"
    repro_after: str  # "aot" (inductor's graphs after AOT autograd) or "dynamo"
    repro_level: int  # 4: dump when accuracy fails; 2: dump when compiling or running raises
    symptom: str  # ACCURACY_SYMPTOM, or the experiment's innermost exception type

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "MinifyJob":
        return cls(**{k: data[k] for k in ("kind", "repro_after", "repro_level", "symptom")})


def exception_names(text: str) -> list[str]:
    """The exception class names `text` (a traceback, a message) names, in order."""
    return _EXCEPTION.findall(text or "")


def shows_symptom(exit_code: int, output: str, symptom: str) -> bool:
    """Whether a repro's run reproduced: it exited non-zero and its output names `symptom`. One
    rule for the minifier's self-check and for `bisect --repro`, so both call the same run red."""
    return exit_code != 0 and symptom in exception_names(output)


def repro_environment(env: Mapping[str, str]) -> dict[str, str]:
    """`env` for a repro's process: compiling afresh, never dumping and minifying again."""
    return {**{k: v for k, v in env.items() if k not in CLEARED_ENV}, **FRESH_COMPILE_ENV}


def nodes_before(minifier_log: str) -> int | None:
    """The failing graph's size, as the minifier says it when it starts."""
    match = _STARTED.search(minifier_log)
    return int(match.group(1)) if match is not None else None


def kept_nodes(minifier_log: str, checkpoints: Path) -> int | None:
    """The smallest graph the minifier reached, the one its repro.py holds: from its progress
    lines, and from the checkpoints after-dynamo minification writes (minified_<N>_nodes.py)."""
    sizes = [int(a or b) for a, b in _SIZE.findall(minifier_log)]
    sizes += [int(m.group(1)) for p in Path(checkpoints).glob("minified_*_nodes.py")
              if (m := _CHECKPOINT.search(p.name))]
    return min(sizes) if sizes else None


def error_symptom(error: Mapping[str, Any]) -> str:
    """An error record's symptom: its exception type, or the exception a wrapper names inside."""
    names = [str(error.get("type") or "")] + exception_names(str(error.get("message") or ""))
    inner = [name for name in names if name and name not in WRAPPERS]
    return inner[-1] if inner else names[0]


def plan(record: Mapping[str, Any]) -> MinifyJob | None:
    """How to minify a record, or None when it is not a red compiled experiment the minifier can
    shrink: eager, XLA, AOT Inductor (torch.export, no dynamo graph), a PASS, a skip, a timeout.

    Accuracy (verdict FAIL) after AOT at level 4 for inductor, whose graphs AOT autograd makes;
    after dynamo for other backends. A compile or run error at level 2, which dumps a launcher
    when compiling or running the graph raises."""
    experiment = record.get("experiment") or {}
    backend = experiment.get("dynamo")
    if (backend is None or experiment.get("xla") is not None
            or experiment.get("compile_options") in AOT_INDUCTOR_OPTIONS):
        return None
    after = "aot" if backend == "inductor" else "dynamo"
    if record.get("status") == "ok" and record.get("verification_code") == "FAIL":
        return MinifyJob("accuracy", after, 4, ACCURACY_SYMPTOM)
    if record.get("status") == "error" and record.get("error"):
        return MinifyJob("error", after, 2, error_symptom(record["error"]))
    return None


def sidecar_path(results_path: Path) -> Path:
    """The sidecar beside the results file itself: a symbolic link to it leads there too, so
    every reader and writer, through the link or not, meets the same answers."""
    return Path(os.path.realpath(results_path)).parent / SIDECAR


def sidecar_line(record: Mapping[str, Any], block: Mapping[str, Any]) -> bytes:
    return (json.dumps({"run_id": record["run_id"], "experiment_id": record["experiment_id"],
                        "minified": dict(block)}, sort_keys=True) + "\n").encode()


def read_minified(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The newest `minified` block per (run_id, experiment_id) in a sidecar file, read as the
    results file is (`iter_numbered_records`: a regular file only, bounded lines and depth). A
    missing file holds none; an unreadable one, and lines that are not whole answers of ours
    (torn, foreign, a field of the wrong type), are passed over with one warning naming the file
    and the first such line: an answer is never worth a failed report."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    bad: list[BadLine] = []
    try:
        for lineno, entry in iter_numbered_records(Path(path), bad):
            problem = _entry_problem(entry)
            if problem is not None:
                bad.append(BadLine(lineno, problem))
                continue
            found[(entry["run_id"], entry["experiment_id"])] = dict(entry["minified"])
    except ResultsFileError as exc:
        if not isinstance(exc.__cause__, FileNotFoundError):
            warnings.warn(f"{exc}; its minification answers are left out", RecordWarning, stacklevel=2)
        return found
    if bad:
        first = min(bad, key=lambda line: line.lineno)
        warnings.warn(f"{path}:{first.lineno}: skipped {len(bad)} line(s) that are no minification answer "
                      f"({first.reason})", RecordWarning, stacklevel=2)
    return found


# The fields of a block that readers use as text: joined to a folder (repro, log), compared (symptom).
_TEXT_FIELDS = ("status", "symptom", "repro", "log", "message")


def _entry_problem(entry: Mapping[str, Any]) -> str | None:
    """Why a sidecar line is no answer a reader can use, or None."""
    if not (isinstance(entry.get("run_id"), str) and isinstance(entry.get("experiment_id"), str)):
        return "run_id and experiment_id must be strings"
    block = entry.get("minified")
    if not isinstance(block, dict):
        return "minified must be an object"
    for name in _TEXT_FIELDS:
        value = block.get(name)
        if value is not None and not isinstance(value, str):
            return f"minified.{name} is {type(value).__name__} {str(value)[:40]!r}, not a string"
        if isinstance(value, str) and "\0" in value:
            return f"minified.{name} holds a NUL byte"
    return None


def block_for(blocks: Mapping[tuple[str, str], dict[str, Any]], record: Mapping[str, Any]) -> dict[str, Any] | None:
    """A record's block among `blocks`; None for a record whose ids are not strings (a malformed
    record has no answer, and must not fail the lookup)."""
    key = (record.get("run_id"), record.get("experiment_id"))
    return blocks.get(key) if all(isinstance(part, str) for part in key) else None  # type: ignore[arg-type]


def join_minified(records: Iterable[dict[str, Any]], results_path: Path) -> list[dict[str, Any]]:
    """The records with their `minified` block, from the sidecar beside the results file."""
    blocks = read_minified(sidecar_path(results_path))
    return [{**record, "minified": block} if (block := block_for(blocks, record)) is not None else record
            for record in records]


def minified_block(job: MinifyJob, result: Mapping[str, Any] | None, folder: Path, wall_s: float,
                   timeout_s: float, relative: Callable[[Path], str], killed_at_s: float | None = None,
                   checked: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The `minified` block of a minification that ended (`result`, the child's) or was killed
    (None) at `killed_at_s` of its budget, with the check of the last checkpoint it left
    (`checked`: the child's `--check` answer, or None where it gave none): what it found, how long
    it took, and where its files are (`relative` makes a path relative to the run's output folder,
    as the record's artifacts are)."""
    folder = Path(folder)
    repro = folder / REPRO_FILE
    if result is None:
        try:
            log = (folder / MINIFIER_LOG).read_text(errors="replace")
        except OSError:
            log = ""
        checked = dict(checked or {})
        result = {"status": "timeout", "reproduces": checked.get("reproduces"),
                  "observed": checked.get("observed") or [], "nodes_before": nodes_before(log),
                  "nodes_after": kept_nodes(log, folder / WORK_FOLDER / "checkpoints"),
                  "message": f"ran past {timeout_s if killed_at_s is None else killed_at_s:g} s of its budget of "
                             f"{timeout_s:g} s and was killed with every process it started; "
                             + _checkpoint_said(repro.exists(), checked, job)}
    return {
        "status": result.get("status", "failed"),
        "kind": job.kind, "repro_after": job.repro_after, "repro_level": job.repro_level, "symptom": job.symptom,
        "reproduces": result.get("reproduces"),
        "observed": list(result.get("observed") or []),
        "nodes_before": result.get("nodes_before"), "nodes_after": result.get("nodes_after"),
        "minify_s": round(wall_s, 3), "timeout_s": timeout_s,
        "repro": relative(repro) if repro.exists() else None,
        "log": relative(folder / LOG_FILE),
        "message": result.get("message"),
    }


def _checkpoint_said(written: bool, checked: Mapping[str, Any], job: MinifyJob) -> str:
    """What a killed minification left, in words: its last checkpoint and what checking it showed."""
    if not written:
        return "it had written no repro.py yet"
    if checked.get("reproduces") is True:
        return f"repro.py is the minifier's last checkpoint, and it reproduces {job.symptom} in a fresh interpreter"
    if checked.get("reproduces") is False:
        return f"repro.py is the minifier's last checkpoint, and it does not reproduce: {checked.get('message')}"
    return (f"repro.py is the minifier's last checkpoint, not checked: "
            f"{checked.get('message') or 'its check gave no answer'}")
