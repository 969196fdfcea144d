"""Reading the end of a child's log: what a record quotes when the child died."""

from __future__ import annotations

import os
from pathlib import Path

LOG_TAIL_LINES = 15


def read_log_tail(path: Path, lines: int = LOG_TAIL_LINES, max_bytes: int = 16384) -> str:
    """The last lines of a log, reading only its end (a child may have written gigabytes)."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - max_bytes))
            data = handle.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").rstrip().splitlines()[-lines:])
