"""Exit codes and the errors that become them: one line for the user, never a traceback."""

from __future__ import annotations

import argparse
import difflib
import functools
import math
import re
import sys
from typing import Callable, NoReturn, Sequence

EXIT_OK = 0  # the runner did its job; failed experiments are data, not exit codes
EXIT_INTERNAL = 1  # a bug in the runner itself
EXIT_USAGE = 2  # bad input: flags, suite, regex, model, unavailable accelerator or backend
EXIT_RESULTS_IO = 3  # the results file or output folder cannot be read or written
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT); SIGTERM gives 143, SIGHUP 129: running experiments are recorded as interrupted
EXIT_REGRESSION = 1  # compare: a significant regression or a new failure (cron acts on it)
EXIT_INCOMPLETE = 1  # export: a file left out for having no row; check-expected: a model not checked
EXIT_BROKEN_PIPE = 141  # stdout's reader went away (`| head`): 128 + SIGPIPE, as a shell would report


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, ending what runs as Ctrl-C does (the run loop handles them itself)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def stop(signum: int, _frame: object) -> None:
    """A signal handler: raise Stopped, so `finally` blocks end what was started."""
    raise Stopped(signum)


class RunnerError(Exception):
    """An error the run reports as one line, with the exit code EXIT_CODES gives its type."""


class UsageError(RunnerError):
    """Bad input; the message is the one line the user sees."""


class ResultsIOError(RunnerError):
    """The results file, the output folder or an experiment's files cannot be read or written."""


def exit_code(error: RunnerError) -> int:
    """The run's exit code for one of its errors; the CLI alone turns one into the other."""
    return EXIT_RESULTS_IO if isinstance(error, ResultsIOError) else EXIT_USAGE


class ReportError(Exception):
    """Bad input to an analysis command: one line for the user and the exit status."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


# Other spellings of a value, by what they mean: spelling alone would take fp64 for fp16, the
# precision furthest from it. Each maps to the choice it means, or the nearest one and why.
_WIDEST = ("fp32", " (the widest precision measured; float64 is only --verify's reference)")
MEANT: dict[str, tuple[str, str]] = {
    **dict.fromkeys(("fp64", "float64", "double"), _WIDEST),
    **dict.fromkeys(("float32", "float"), ("fp32", "")),
    **dict.fromkeys(("float16", "half"), ("fp16", "")),
    "bfloat16": ("bf16", ""),
    "autocast": ("amp", ""),
}


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """The suffix "; did you mean 'X'?" naming the choice a word means (MEANT) or the closest to a
    misspelt word, or nothing. A choice whose digits are not the word's is another value, not a
    misspelling of it (fp16 for fp64), and is never suggested."""
    meant, why = MEANT.get(word.lower(), ("", ""))
    if meant in choices:
        return f"; did you mean {meant!r}?{why}"
    digits = sorted(filter(str.isdigit, word))
    close = [c for c in difflib.get_close_matches(word, list(choices), n=3)
             if not digits or sorted(filter(str.isdigit, c)) in (digits, [])]
    return f"; did you mean {close[0]!r}?" if close else ""


def argparse_hint(message: str, parser: argparse.ArgumentParser) -> str:
    """A did-you-mean for argparse's error about a misspelt flag or value (argparse suggests
    nothing before Python 3.12)."""
    unknown = re.search(r"unrecognized arguments: (--[^\s=]+)", message)
    if unknown is not None:
        return did_you_mean(unknown.group(1), [name for action in parser._actions for name in action.option_strings])
    invalid = re.search(r"invalid choice: '?(.*?)'? \(choose from (.*)\)$", message)
    if invalid is not None:
        return did_you_mean(invalid.group(1), [c.strip(" '") for c in invalid.group(2).split(",")])
    return ""


def relative_change(text: str) -> float:
    """An argparse type for a relative change, spelled as a fraction (0.05) or a percentage (5%).
    A bare number of 1 or more is refused: `--threshold 5` meant as 5% would be 500%, a gate that
    never trips; 500% said on purpose is written 500%."""
    percent = text.strip().endswith("%")
    try:
        value = float(text.strip().removesuffix("%")) / (100 if percent else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is no relative change: give a fraction (0.05) or a "
                                         "percentage (5%)") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite change of 0 or more (0.05 or 5%)")
    if not percent and value >= 1:
        raise argparse.ArgumentTypeError(f"{text} would be {value:.0%}: give a fraction (0.05) or a percentage "
                                         f"({text}%)")
    return value


class ReportParser(argparse.ArgumentParser):
    """The analysis commands' parser: bad arguments are a ReportError (one line, exit 2), not
    argparse's usage dump and exit."""

    def error(self, message: str) -> NoReturn:
        raise ReportError(f"{message}{argparse_hint(message, self)} (see {self.prog} --help)")


def analysis_command(name: str) -> Callable[[Callable[[Sequence[str]], int]], Callable[[Sequence[str]], int]]:
    """An analysis command's `main(argv)`: a ReportError raised anywhere in it is one line on
    stderr (`experiment_runner NAME: error: ...`) and its exit status, an OSError (a results file
    that fails to read, ResultsFileError included) one line and exit 3; --help (argparse's
    SystemExit) returns argparse's status instead of leaving the interpreter."""
    def wrap(main: Callable[[Sequence[str]], int]) -> Callable[[Sequence[str]], int]:
        @functools.wraps(main)
        def run(argv: Sequence[str]) -> int:
            try:
                return main(argv)
            except ReportError as exc:
                print(f"experiment_runner {name}: error: {exc}", file=sys.stderr)
                return exc.code
            except BrokenPipeError:  # our reader went away: the CLI's exit 141, not an I/O error of ours
                raise
            except OSError as exc:  # a failing disk or a file gone mid-read: I/O, exit 3, never a traceback
                where = f"{exc.filename}: " if exc.filename and exc.strerror else ""
                print(f"experiment_runner {name}: error: {where}{exc.strerror or exc}", file=sys.stderr)
                return EXIT_RESULTS_IO
            except SystemExit as exc:  # --help
                return int(exc.code or 0)
        return run
    return wrap
