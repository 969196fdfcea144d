"""Reading the end of a child's log: what a record quotes when the child died."""

from __future__ import annotations

import os
from pathlib import Path

LOG_TAIL_LINES = 15


# A crash's Python stack (faulthandler) lists the innermost frame first: keep the whole dump,
# up to this many lines, rather than its outermost frames only.
FATAL_DUMP_MAX_LINES = 60


def read_log_tail(path: Path, lines: int = LOG_TAIL_LINES, max_bytes: int = 16384) -> str:
    """The last lines of a log, reading only its end (a child may have written gigabytes); a
    fatal error's stack dump near the end is kept from its first line."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - max_bytes))
            data = handle.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace").rstrip().splitlines()
    fatal = max((i for i, line in enumerate(text) if line.startswith("Fatal Python error")), default=None)
    if fatal is not None and len(text) - fatal <= FATAL_DUMP_MAX_LINES:
        return "\n".join(text[fatal:])
    return "\n".join(text[-lines:])
