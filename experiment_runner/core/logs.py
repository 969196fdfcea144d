"""Reading the end of a child's log: what a record quotes when the child died."""

from __future__ import annotations

import os
from pathlib import Path

LOG_TAIL_LINES = 15


# A crash's Python stack (faulthandler) lists the innermost frame first: keep the whole dump,
# up to this many lines, rather than its outermost frames only.
FATAL_DUMP_MAX_LINES = 60
FATAL_DUMP = "Fatal Python error"
# What the native code printed just before the dump is its cause, where the dump is only the
# place: glibc's heap checks ("corrupted size vs. prev_size", "double free or corruption (out)"),
# C++'s "terminate called after throwing an instance of ...". Kept, up to this many lines.
LAST_WORDS_MAX_LINES = 5
# The first line of every child's log (child/main.py), never a cause.
WORKER_HEADER = "experiment_runner worker: "


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
    fatal = max((i for i, line in enumerate(text) if line.startswith(FATAL_DUMP)), default=None)
    if fatal is not None and len(text) - fatal <= FATAL_DUMP_MAX_LINES:
        start = fatal
        while (start > 0 and fatal - start < LAST_WORDS_MAX_LINES and text[start - 1].strip()
               and not text[start - 1].startswith(WORKER_HEADER)):
            start -= 1
        return "\n".join(text[start:])
    return "\n".join(text[-lines:])


def last_words(tail: str) -> str:
    """The line a log tail holds just before Python's fatal-error dump: the native code's
    message about why it aborted, or "" when nothing came before the dump."""
    lines = tail.splitlines()
    fatal = next((i for i, line in enumerate(lines) if line.startswith(FATAL_DUMP)), 0)
    return lines[fatal - 1].strip() if fatal > 0 else ""
