"""Each experiment of a run beside its baseline: the pairing report, compare and export share.

A speedup or memory ratio is a configuration against the baseline of the same model, accelerator,
test, precision and batch size with the `--baseline` fields replaced (eager by default), or the
eager baseline timed in the experiment's own process (--speedup=paired or harness). Every
command that shows one pairs rows here, so no two of them can pair differently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from experiment_runner.analysis.loader import CONFIG_FIELDS, Row
from experiment_runner.core.matrix import parse_none
from experiment_runner.errors import ReportError

BASELINE_KEYS: tuple[str, ...] = ("accelerator", "test", "precision") + CONFIG_FIELDS
DEFAULT_BASELINE = "xla=None,dynamo=None"


def parse_baseline(spec: str) -> dict[str, str | None]:
    """`key=value,...` over BASELINE_KEYS; xla, xla_flags, dynamo, torch_xla2 and compile_options
    (None: plain torch.compile) default to None.

    accelerator, test and precision default to the configuration's own value.
    """
    fixed: dict[str, str | None] = {key: None for key in CONFIG_FIELDS}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in BASELINE_KEYS:
            raise ReportError(f"bad --baseline item {part!r}: expected key=value with key in "
                              f"{', '.join(BASELINE_KEYS)}")
        given = parse_none(value.strip())
        # a record's default compile options read as None (loader.Row.compile_options)
        fixed[key] = None if key == "compile_options" and given == "default" else given
    return fixed


def _match_key(row: Row) -> tuple:
    return (row.suite, row.model, row.accelerator, row.test, row.precision, row.batch_size,
            row.xla, row.xla_flags, row.dynamo, row.torch_xla2, row.compile_options)


def _baseline_key(row: Row, fixed: dict[str, str | None]) -> tuple:
    get = lambda name: fixed[name] if name in fixed else getattr(row, name)  # noqa: E731
    return (row.suite, row.model, get("accelerator"), get("test"), get("precision"), row.batch_size,
            get("xla"), get("xla_flags"), get("dynamo"), get("torch_xla2"), get("compile_options"))


def _peaks(row: Row, base: Row) -> tuple[int, int] | None:
    for name in ("peak_allocated_bytes", "timed_peak_rss_bytes"):
        mine, theirs = getattr(row, name), getattr(base, name)
        if mine and theirs:
            return theirs, mine
    return None


GroupKey = tuple[str, str, str, str]  # suite, accelerator, test, precision
# The speedup methods that time the eager baseline in the compiled experiment's own process,
# as Row.paired_method names them; each is named beside its figure.
PAIR_METHODS = ("paired", "harness")


@dataclass
class ModelResult:
    """One experiment of the run beside its baseline."""

    row: Row
    baseline: Row | None
    speedup: float | None
    memory_ratio: float | None
    # "paired": the median ratio of baseline and compiled samples interleaved in the experiment's own
    # process (--speedup=paired); "harness": the ratio of their medians, timed in that process as
    # PyTorch's harness times them (--speedup=harness); "isolated": baseline median / configuration
    # median across processes
    method: str | None = None

    @property
    def group(self) -> GroupKey:
        r = self.row
        return (str(r.suite), str(r.accelerator), str(r.test), str(r.precision))

    def cell(self) -> str:
        """What the per-model table shows: the speedup, or why there is none."""
        r = self.row
        if r.status != "ok":
            return r.status
        if not r.usable:
            return str(r.verification_code)
        if self.speedup is None:
            return "no baseline" if self.baseline is None or self.baseline.status == "ok" else \
                f"baseline {self.baseline.status}"
        flags = "".join(f" ({flag})" for flag in self.flags())
        return f"{self.speedup:.2f}x" + (f" {self.method}" if self.method in PAIR_METHODS else "") + flags

    def flags(self) -> list[str]:
        """Why the speedup may not be trusted: samples taken beside busy neighbours (noisy host), or
        spread over more than 10% of their median (unstable), on either side of the ratio."""
        rows = [r for r in (self.row, self.baseline) if r is not None]
        return [flag for flag, hit in (("noisy host", any(r.noisy_host for r in rows)),
                                       ("unstable", any(r.unstable for r in rows))) if hit]


def pair_with_baselines(rows: Sequence[Row], fixed: dict[str, str | None]) -> list[ModelResult]:
    index = {_match_key(r): r for r in rows}
    results = []
    for row in rows:
        base = index.get(_baseline_key(row, fixed))
        speedup = memory = method = None
        if row.usable and row.paired_speedup is not None and base is not row:
            speedup, method = row.paired_speedup, row.paired_method
        if base is not None and row.usable and base.status == "ok":
            mine, theirs = row.median_per_iter_time_s, base.median_per_iter_time_s
            if speedup is None and mine and theirs:
                speedup, method = theirs / mine, "isolated"
            peaks = _peaks(row, base)
            memory = peaks[0] / peaks[1] if peaks else None
        if row.usable and base is not row and row.harness_compression_ratio is not None:
            memory = row.harness_compression_ratio  # the harness's own, from the warm-ups in its process
        results.append(ModelResult(row, base, speedup, memory, method))
    return results


def is_baseline(row: Row, fixed: dict[str, str | None]) -> bool:
    """Whether `row` is its own baseline (eager, under the default): no speedup of its own to show."""
    return _baseline_key(row, fixed) == _match_key(row)
