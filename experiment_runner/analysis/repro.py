"""The command that runs one experiment of a results file again, alone.

A change found by `compare` or `history` is only useful once someone can see it on their
own machine. The line names the experiment completely: an anchored filter for its model, one
value of every dimension (so the plan holds exactly that experiment, with the same experiment
id, and `compare` can put the rerun beside the original), and the measurement flags the
original used that are not at their default (`--repeat`, `--processes`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import fields
from typing import Any, Mapping

from experiment_runner.analysis.loader import Row

# The experiment id's batch-size part: `-bsdefault` (the suite's size) or `-bs<N>` (--batch-size).
_BATCH = re.compile(r"-bs(default|\d+)(?:-|$)")
DEFAULT_REPEAT = 10


def repro_command(experiment_id: str, fields: Mapping[str, Any]) -> str:
    """`experiment_runner ...` for one experiment, values shell-quoted, one line. `fields` are
    the loader's names (a Row's, or history's per-experiment info): suite, model, accelerator,
    xla, dynamo, test, precision, and optionally xla_flags, compile_options, torch_xla2,
    repeat, processes."""
    key = experiment_id.rsplit("/", 1)[-1]
    batch = _BATCH.search(key)
    flags: list[tuple[str, object]] = [
        ("--suite-name", fields["suite"]), ("--filter", f"^{re.escape(fields['model'] or '')}$"),
        *((f"--{name}", fields[name]) for name in ("accelerator", "xla", "dynamo", "test", "precision")),
    ]
    flags += [(f"--{name.replace('_', '-')}", fields.get(name))
              for name in ("xla_flags", "compile_options", "torch_xla2") if fields.get(name)]
    if batch is not None and batch.group(1) != "default":
        flags.append(("--batch-size", batch.group(1)))
    if fields.get("repeat") not in (None, DEFAULT_REPEAT):
        flags.append(("--repeat", fields["repeat"]))
    if (fields.get("processes") or 1) > 1:
        flags.append(("--processes", fields["processes"]))
    switches = [name for name, suffix in (("--keep-model-data-on-cuda", "-keep_model_data_on_cuda"),
                                          ("--enable-functionalization", "-functionalization")) if suffix in key]
    return " ".join(["experiment_runner", *(f"{name}={shlex.quote(str(value))}" for name, value in flags), *switches])


def row_fields(row: Row) -> dict[str, Any]:
    """A loader Row as the fields repro_command reads."""
    return {f.name: getattr(row, f.name) for f in fields(row)}


def repro_of(row: Row) -> str:
    """repro_command for a loader Row."""
    return repro_command(row.experiment_id, row_fields(row))
