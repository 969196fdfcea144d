"""The files and CSV text an analysis command writes, and the small files it reads whole.

Every writer (export, history --html, merge, check-expected --update, report --plot) asks
`check_output` before it reads anything, so a wrong `-o` costs one line and exit 2, not the
results it was about to read, nor a write that blocks forever on a FIFO nobody reads. A small
input read whole (an expected-results CSV, bisect's --envs) goes through `read_small`: a FIFO
would block that read, /dev/zero would never end it. `render_csv` is the one CSV writer of
the commands' `--format csv` (report, compare).
"""

from __future__ import annotations

import csv
import io
import os
import stat
from pathlib import Path
from typing import Any, Iterable, Sequence

from experiment_runner.errors import EXIT_RESULTS_IO, EXIT_USAGE, ReportError


def file_kind(mode: int) -> str:
    """What a path that is not a regular file is, in words, for a one-line refusal."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"


def check_output(path: Path, inputs: Iterable[Path], flag: str, folder: bool = False) -> None:
    """Refuse `path` as `flag`'s output (ReportError, exit 2) when it exists and is not what the
    command writes (a regular file, or with `folder` a directory), or when it is one of `inputs`
    (the same file by device and inode: a symlink, a hard link or `./` do not hide it). A path
    that does not exist yet, or cannot be looked at, is left to the write to report."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return
    if folder:
        if not stat.S_ISDIR(mode):
            kind = "a file" if stat.S_ISREG(mode) else file_kind(mode)
            raise ReportError(f"{flag} {path} is not a directory ({kind}); give a folder for the files", EXIT_USAGE)
        return
    if not stat.S_ISREG(mode):
        raise ReportError(f"{flag} {path} is {file_kind(mode)}, not a regular file; give a file path", EXIT_USAGE)
    for given in inputs:
        if os.path.exists(given) and os.path.samefile(path, given):
            raise ReportError(f"{flag} {path} is one of the inputs ({given}): writing it would destroy what is "
                              "read; give another file", EXIT_USAGE)


def read_small(path: Path, what: str, limit: int) -> bytes:
    """The bytes of `path`, `what` the command expects (e.g. "an expected-results file (a CSV)"):
    a regular file of at most `limit` bytes, else one line and exit 2; a failed read is exit 3."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise ReportError(f"cannot read {path}: {exc.strerror or exc}", EXIT_RESULTS_IO) from None
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ReportError(f"{path} is {file_kind(mode)}, not {what}", EXIT_USAGE)
        os.set_blocking(fd, True)
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise ReportError(f"cannot read {path}: {exc.strerror or exc}", EXIT_RESULTS_IO) from None
    if len(data) > limit:
        raise ReportError(f"{path} is larger than {limit} bytes: not {what}", EXIT_USAGE)
    return data


def render_csv(records: Sequence[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    if records:
        writer = csv.DictWriter(buffer, fieldnames=list(records[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(records)
    return buffer.getvalue()
