"""Where PyTorch/XLA's dumps go in an experiment's folder.

HLO and IR dumps are configured through variables torch_xla reads once at start-up, so
the parent sets them in the child's environment before launch; the child then reports
the files it finds at these paths.
"""

from __future__ import annotations

from pathlib import Path

from experiment_runner.core.options import RunOptions

HLO_DIRNAME = "hlo"
IR_DIRNAME = "ir"
METRICS_FILENAME = "pytorch-xla-metrics.txt"


def ir_dump_base(artifacts_dir: Path, save_ir_format: str) -> Path:
    """Where torch_xla writes saved IR; it appends `.<ordinal>` to this name itself."""
    return Path(artifacts_dir) / IR_DIRNAME / f"ir.{save_ir_format}.txt"


def artifact_environment(options: RunOptions, artifacts_dir: str | Path,
                         xla_flags: str | None) -> dict[str, str]:
    """Variables for the child's dumps; `xla_flags` is the XLA_FLAGS value so far.

    --dump-hlo appends `--xla_dump_to` to the experiment's own XLA_FLAGS rather than
    replacing them, so a flags dimension and an HLO dump can be combined.
    """
    env: dict[str, str] = {}
    if options.dump_hlo:
        dump = f"--xla_dump_to={Path(artifacts_dir) / HLO_DIRNAME}"
        env["XLA_FLAGS"] = f"{xla_flags} {dump}" if xla_flags else dump
    if options.save_ir_format:
        base = ir_dump_base(Path(artifacts_dir), options.save_ir_format)
        base.parent.mkdir(parents=True, exist_ok=True)
        env["XLA_SAVE_TENSORS_FMT"] = options.save_ir_format
        env["XLA_SAVE_TENSORS_FILE"] = str(base)
    return env
