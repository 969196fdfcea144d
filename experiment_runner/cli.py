"""Command line: drop-in compatible with PyTorch/XLA's benchmarks/experiment_runner.py.

`experiment_runner [run flags]` runs a matrix; the SUBCOMMANDS (`experiment_runner report ...`,
`compare`, `merge`, `history`, `bisect`, `export`, `check-expected`) analyse results files.
Bad input is one line on stderr and a non-zero exit (see `errors.py`), never a traceback.

Flags and dispatch only: the run itself is `parent.session.run`, the analysis commands
live in `analysis/`. `--help` imports neither torch nor any child-side module.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import signal
import sys
import warnings
from pathlib import Path
from typing import Any, NoReturn, Sequence

from experiment_runner import __version__
from experiment_runner.core import dashboards, matrix
from experiment_runner.core.flags import Declared, declared
from experiment_runner.core.minify import SIDECAR
from experiment_runner.core.results import LOCK_SUFFIX, RecordWarning, ResultsFileError
from experiment_runner.core.run_config import CONFIGS, GROUPS, MatrixConfig, RunConfig, SessionConfig
from experiment_runner.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERNAL,
    EXIT_RESULTS_IO,
    EXIT_USAGE,
    RunnerError,
    Stopped,
    UsageError,
    argparse_hint,
    did_you_mean,
    exit_code,
    stop,
)

# Subcommand → the module whose main(argv) runs it (an analysis module; `minify` starts children,
# so it is the parent's), and what it is for (--help and a bare `experiment_runner` list them).
SUBCOMMANDS = {
    "report": ("experiment_runner.analysis.report", "one run's dashboard metrics: text, CSV, JSON or HTML"),
    "compare": ("experiment_runner.analysis.compare", "two runs experiment by experiment; exit 1 on a regression"),
    "merge": ("experiment_runner.analysis.merge", "shard files into one results file"),
    "history": ("experiment_runner.analysis.history", "change points over nightly runs, and an HTML page"),
    "bisect": ("experiment_runner.analysis.bisect", "the first bad build between a good and a bad one"),
    "export": ("experiment_runner.analysis.export", "PyTorch's dashboard CSVs and benchmark-database records"),
    "check-expected": ("experiment_runner.analysis.expected", "gate a run on expected results (PyTorch's CI CSVs)"),
    "minify": ("experiment_runner.parent.minify", "shrink red compiled experiments to a checked repro.py each"),
}


def commands_text() -> str:
    """The subcommands, one line each, as --help and a bare `experiment_runner` show them."""
    width = max(map(len, SUBCOMMANDS))
    return "\n".join(["commands (experiment_runner COMMAND --help for each):",
                      *(f"  {name:{width}}  {what}" for name, (_, what) in SUBCOMMANDS.items())])


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}{argparse_hint(message, self)} (see --help)")


def default_text(option: Declared) -> str | None:
    """An option's default in words, or None where there is nothing to say (a switch is off)."""
    flag = option.flag
    if flag.default_help is not None:
        return flag.default_help
    if flag.kind == "toggle" and option.default is not None:
        return "on" if option.default else "off"
    if flag.kind == "value" and option.default is not None:
        return str(option.default)
    return None


def help_text(option: Declared) -> str:
    """An option's help as --help shows it: what it does, its default, and what it means for a
    user of the reference runner."""
    default, compat = default_text(option), option.flag.compat
    return " ".join([option.flag.help, *([f"(default: {default})"] if default is not None else []),
                     *([f"[compatibility: {compat}]"] if compat is not None else [])])


def build_parser() -> argparse.ArgumentParser:
    """The run flags, from the flag table (core.run_config.CONFIGS): nothing is declared here.

    Every default is argparse.SUPPRESS, so the namespace holds only what was given and the
    configuration dataclasses supply the rest."""
    p = _Parser(
        prog="experiment_runner",
        description="Run an accelerator x xla x dynamo x test matrix of PyTorch model benchmarks,\n"
                    "one child process per experiment, one JSON line per experiment\n"
                    "(experiment_runner --suite-name=SUITE [flags]), or analyse results files:\n\n"
                    + commands_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        argument_default=argparse.SUPPRESS,
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    groups = {title: p.add_argument_group(title, description or None) for title, description in GROUPS.items()}
    for option in declared(*CONFIGS):
        flag = option.flag
        kwargs: dict[str, Any] = {"dest": option.name, "help": help_text(option).replace("%", "%%")}
        if flag.kind == "switch":
            kwargs["action"] = "store_true"
        elif flag.kind == "toggle":
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs.update(action="append" if flag.kind == "list" else "store", choices=flag.choices,
                          metavar=flag.metavar, required=flag.required)
            if flag.parse is not None:
                kwargs["type"] = flag.parse
        groups[flag.group].add_argument(*option.names, **kwargs)
    return p


def parse_config(argv: Sequence[str]) -> RunConfig:
    """The command line as a validated RunConfig; UsageError on bad input."""
    given = vars(build_parser().parse_args(argv))
    for option in declared(*CONFIGS):
        if option.flag.env_default and option.name not in given and os.environ.get(option.flag.env_default):
            given[option.name] = os.environ[option.flag.env_default]
    config = RunConfig.from_values(given)
    check_ranges(config)
    matrix_config = apply_tiers(apply_single_config(config.matrix))
    config = apply_dashboard(dataclasses.replace(config, matrix=matrix_config), given)
    check_combinations(config)
    check_patterns(matrix_config.filter, "--filter")
    check_patterns(matrix_config.exclude, "--exclude")
    return config


def apply_dashboard(config: RunConfig, given: dict[str, Any]) -> RunConfig:
    """--dashboard runs what its CI job runs: accuracy checked, the harness's speedup; each only where
    the command line did not say otherwise (`given` holds the flags given), so an override is the
    user's choice, recorded per experiment. The batch size is each job's (matrix.dashboard_configurations).
    Its pairs stop once the speedup is known within ±5% (dashboards.PAIRS_HALF_WIDTH), never after more
    than the job's 30, recorded as dashboard_overrides.pairs."""
    if not config.matrix.dashboard:
        return config
    options = dataclasses.replace(config.options, verify=given.get("verify", True),
                                  speedup=given.get("speedup", dashboards.SPEEDUP),
                                  adaptive_pairs=given.get("adaptive_pairs", True),
                                  pairs_half_width=given.get("pairs_half_width", dashboards.PAIRS_HALF_WIDTH),
                                  max_pairs=given.get("max_pairs", dashboards.HARNESS_PAIRS))
    return dataclasses.replace(config, options=options)


def check_ranges(config: RunConfig) -> None:
    """Every number within its declared range, and finite (argparse takes "nan" and "inf")."""
    parts = {"MatrixConfig": config.matrix, "SessionConfig": config.session, "RunOptions": config.options}
    for option in declared(*CONFIGS):
        value = getattr(parts[option.owner], option.name)
        if option.flag.kind != "list" and option.flag.out_of_range(value):
            raise UsageError(f"{option.long} must be {option.flag.wanted}, got {value}")


def check_output_folder(folder: Path) -> None:
    """--output-dirname names a folder, made if missing; an existing file there (or above it) would
    pass --dry-run and fail later with a bare "File exists", after the plan was shown."""
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        where = "" if existing == folder else f": {existing}"
        raise UsageError(f"--output-dirname={folder}{where} is a file, not a folder; give a folder (it is created "
                         "if missing)")


def check_combinations(config: RunConfig) -> None:
    """Flags that are valid alone but not together."""
    m, s, o = config.matrix, config.session, config.options
    if not m.partition_id < m.total_partitions:
        raise UsageError("--partition-id must be in [0, --total-partitions)")
    check_output_folder(Path(s.output_dirname))
    check_results_name(s)
    if o.min_pairs > o.max_pairs:
        raise UsageError(f"--min-pairs={o.min_pairs} is above --max-pairs={o.max_pairs}")
    if s.retry_failed and not s.resume:
        raise UsageError("--retry-failed retries within a resumed run; it cannot go with --no-resume")
    if s.gpu_ids is not None and not re.fullmatch(r"\d+(,\d+)*", s.gpu_ids.replace(" ", "")):
        raise UsageError(f"--gpu-ids must be comma-separated integers, got {s.gpu_ids!r}")
    for flags in m.xla_flags or ():
        check_xla_flags(flags)
    if s.executor == "ray":
        local_only = [flag for flag, used in (("--max-parallel", s.max_parallel != 1),
                                              ("--gpu-ids", s.gpu_ids is not None),
                                              ("--parallel-cpu", s.parallel_cpu),
                                              ("--print-subprocess", s.print_subprocess)) if used]
        if local_only:
            raise UsageError(f"{local_only[0]} is for --executor=local; on Ray the nodes' resources "
                             "(GPUs, experiment_slot) decide what runs at once, and each child's log comes back "
                             "with its record")
    elif s.allow_mixed_versions:
        raise UsageError("--allow-mixed-versions needs --executor=ray")
    if m.shard_by is not None and m.shard_by != "round-robin":
        kind, _, path = m.shard_by.partition(":")
        if kind != "duration" or not path:
            raise UsageError("--shard-by must be round-robin or duration:PATH (an earlier results file), "
                             f"got {m.shard_by!r}")
    if m.dashboard:
        check_dashboard_flags(m)
    if o.profile_xla and (o.dump_pytorch_profiles or o.profile_cuda_cpu or o.profile_cuda_cpu_individual_ops):
        raise UsageError("--profile-xla cannot go with the PyTorch profiler flags (--dump-pytorch-profiles, "
                         "--profile-cuda-cpu*): one profiling path at a time, as in the reference")


def check_dashboard_flags(m: MatrixConfig) -> None:
    """Beside --dashboard only --test (which of a job's runs) and, for training runs,
    --accelerator (PyTorch's CI trains on CUDA only); the job sets everything else."""
    set_too = [flag for flag, value in (("--xla", m.xla), ("--dynamo", m.dynamo), ("--precision", m.precision),
                                        ("--compile-options", m.compile_options), ("--xla-flags", m.xla_flags))
               if value]
    if m.training_recipe is not None:
        set_too.append("--training-recipe")
    if set_too:
        eager = (" (its speedup needs no eager experiment: the compiled experiment times eager in its own "
                 "process, --speedup=harness, as the job does)" if set_too[0] == "--dynamo" else "")
        raise UsageError(f"--dashboard sets the dynamo backend, precision, compile options and training step as "
                         f"PyTorch's CI job of that name does; {set_too[0]} cannot go with it{eager}")
    chosen = dashboards.resolve(tuple(m.dashboard))
    if m.test and not any(d.run(test) for d in chosen for test in m.test):
        trains = ", ".join(dashboards.training_jobs())
        raise UsageError(f"--dashboard={','.join(m.dashboard)} runs no {' or '.join(m.test)} in PyTorch's CI "
                         f"(the jobs with a training run: {trains})")
    if m.accelerator and tuple(m.test or ()) != ("train",):
        raise UsageError("--accelerator beside --dashboard moves a job's training runs to another device and needs "
                         "--test=train: each device's inference is a job of its own (cpu_inductor, inductor, ...)")


def check_results_name(s: SessionConfig) -> None:
    """The results file is inside --output-dirname unless given as an absolute path, and never a
    file the runner derives from another results file's name: the lock beside it (`NAME.lock`,
    truncated by every run into NAME), a folder's run registry (`runs`) or the minification
    sidecar (minified.jsonl, appended to by minify). Checked on the real
    path, so a symlink does not hide it."""
    if not Path(s.output_basename).is_absolute() and ".." in Path(s.output_basename).parts:
        raise UsageError(f"--output-basename={s.output_basename} leads out of --output-dirname ({s.output_dirname}); "
                         "give a name inside it, or an absolute path")
    registry = Path(os.path.realpath(Path(s.output_dirname) / "runs"))
    results = Path(os.path.realpath(s.results_path))
    if results == registry or registry in results.parents:
        raise UsageError(f"--output-basename={s.output_basename} puts the results file in the run registry "
                         f"({registry}, where each run is registered); name it otherwise")
    if results.name == "runs":
        raise UsageError(f"--output-basename={s.output_basename} names the results file {results}, the run "
                         f"registry of any run into {results.parent}; name it otherwise")
    if results.name == SIDECAR:
        raise UsageError(f"--output-basename={s.output_basename} names the results file {results}, the "
                         "minification answers of any results file beside it (minify and --minify append "
                         "there); name it otherwise")
    if results.name.endswith(LOCK_SUFFIX):
        raise UsageError(f"--output-basename={s.output_basename} names the results file {results}, the lock of "
                         f"the results file {results.name[:-len(LOCK_SUFFIX)]} beside it, which every run into "
                         "that file truncates; name it otherwise")


# The keys an --experiment-config may hold: the reference's experiment configuration.
SINGLE_CONFIG_KEYS = frozenset({"accelerator", "xla", "xla_flags", "dynamo", "torch_xla2", "test", "batch_size",
                                "keep_model_data_on_cuda", "enable_functionalization"})


def _json_object(text: str, flag: str) -> dict:
    import json

    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{flag} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise UsageError(f"{flag} must be a JSON object, got {text!r}")
    return value


def apply_single_config(config: MatrixConfig) -> MatrixConfig:
    """--experiment-config with --model-config: exactly one experiment, as the reference's
    subprocess mode runs it; the matrix flags are replaced by its single values."""
    if config.experiment_config is None and config.model_config is None:
        return config
    if config.experiment_config is None or config.model_config is None:
        raise UsageError("--experiment-config and --model-config go together: they name one experiment")
    exp = _json_object(config.experiment_config, "--experiment-config")
    model = _json_object(config.model_config, "--model-config")
    unknown = sorted(set(exp) - SINGLE_CONFIG_KEYS)
    missing = sorted({"accelerator", "xla", "dynamo", "test"} - set(exp))
    if unknown or missing:
        raise UsageError(f"--experiment-config: {'unknown key ' + unknown[0] if unknown else 'missing ' + missing[0]}"
                         f"; keys: {', '.join(sorted(SINGLE_CONFIG_KEYS))}")
    if not isinstance(model.get("model_name"), str):
        raise UsageError('--model-config must name the model: {"model_name": NAME}')
    accelerator = str(exp["accelerator"]).lower()  # the reference lower-cases it (PJRT device names)
    if accelerator not in matrix.ACCELERATORS:
        raise UsageError(f"--experiment-config: unknown accelerator {exp['accelerator']!r}")
    none_or = lambda value: matrix.parse_none(None if value is None else str(value))  # noqa: E731
    test, xla = str(exp["test"]), none_or(exp["xla"])
    if test not in matrix.TESTS or xla not in matrix.XLA_CHOICES:
        raise UsageError(f"--experiment-config: test must be one of {', '.join(matrix.TESTS)} and xla one of "
                         "None, PJRT, XRT")
    return dataclasses.replace(
        config, accelerator=(accelerator,), test=(test,), xla=(xla,), dynamo=(none_or(exp["dynamo"]),),
        xla_flags=(none_or(exp.get("xla_flags")),), torch_xla2=(none_or(exp.get("torch_xla2")),),
        keep_model_data_on_cuda=bool(exp.get("keep_model_data_on_cuda")),
        enable_functionalization=bool(exp.get("enable_functionalization")),
        batch_size=_single_batch_size(exp.get("batch_size"), config.batch_size),
        filter=(f"^{re.escape(model['model_name'])}$",), exclude=(), filter_by_tier=(), exclude_by_tier=(),
        total_partitions=1, partition_id=0)


def _single_batch_size(value: Any, given: int | None) -> int | None:
    """An --experiment-config batch_size, held to --batch-size's own declaration."""
    if value is None:
        return given
    flag = next(option.flag for option in declared(MatrixConfig) if option.name == "batch_size")
    if isinstance(value, bool) or not isinstance(value, int) or flag.out_of_range(value):
        raise UsageError(f"--experiment-config: batch_size must be an integer, {flag.wanted}, got {value!r}")
    return value


def apply_tiers(config: MatrixConfig) -> MatrixConfig:
    """--filter-by-tier/--exclude-by-tier become one more --filter/--exclude regex each."""
    from benchmark_models.base import tier_filter

    patterns = {}
    for tiers, name, flag in ((config.filter_by_tier, "filter", "--filter-by-tier"),
                              (config.exclude_by_tier, "exclude", "--exclude-by-tier")):
        undefined = sorted({t for t in tiers if t not in (1, 2, 3)})
        if undefined:
            print(f"experiment_runner: warning: {flag}={undefined[0]} names no tier (1-3); ignored, as the "
                  "reference runner does", file=sys.stderr)
        pattern = tier_filter(list(tiers))
        if pattern is not None:
            patterns[name] = (*getattr(config, name), pattern)
    return dataclasses.replace(config, **patterns)


def check_xla_flags(flags: str | None) -> None:
    """XLA_FLAGS is a space-separated list of --name[=value]; XLA aborts the child on anything else."""
    import shlex

    if flags is None:
        return
    try:
        tokens = shlex.split(flags)
    except ValueError as exc:
        raise UsageError(f"malformed --xla-flags {flags!r}: {exc}") from None
    bad = [t for t in tokens if not re.fullmatch(r"--[A-Za-z0-9_]+(=.*)?", t, flags=re.S)]
    if bad or not tokens:
        raise UsageError(f"malformed --xla-flags {flags!r}: expected space-separated --flag[=value] items"
                         + (f", got {bad[0]!r}" if bad else ""))


def check_patterns(patterns: Sequence[str], flag: str) -> None:
    try:
        matrix.compile_patterns(patterns)
    except re.error as exc:
        bad = next(p for p in patterns if _invalid(p))
        raise UsageError(f"invalid regex for {flag}: {bad!r}: {exc}") from None


def _invalid(pattern: str) -> bool:
    try:
        re.compile(pattern)
        return False
    except re.error:
        return True


def run_command(argv: Sequence[str]) -> int:
    """Parse and validate the run flags, then hand the RunConfig over to the parent."""
    config = parse_config(argv)
    from experiment_runner.parent.session import run

    return run(config)


_show_warning = warnings.showwarning


def _one_line_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                      file: Any = None, line: str | None = None) -> None:
    """Records this reader may misread are said as one line, like every other warning of ours."""
    if issubclass(category, RecordWarning):
        print(f"experiment_runner: warning: {message}", file=sys.stderr)
    else:
        _show_warning(message, category, filename, lineno, file, line)


def main(argv: Sequence[str] | None = None) -> int:
    warnings.showwarning = _one_line_warning
    try:
        return _dispatch(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:
        # Our reader went away (`experiment_runner --dry-run | head`): records already written
        # stay written; no traceback, and nothing more for Python to flush into the pipe at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _dispatch(argv: list[str]) -> int:
    if argv and argv[0] in SUBCOMMANDS:
        from importlib import import_module

        return import_module(SUBCOMMANDS[argv[0]][0]).main(argv[1:])
    if argv and not argv[0].startswith("-"):
        hint = did_you_mean(argv[0], list(SUBCOMMANDS)) or f"; commands: {', '.join(SUBCOMMANDS)}"
        print(f"experiment_runner: error: unknown command {argv[0]!r}{hint} (a run takes flags only: "
              "see --help)", file=sys.stderr)
        return EXIT_USAGE
    if not argv:
        print("experiment_runner: error: nothing to do: a run needs --suite-name (try experiment_runner "
              f"--suite-name=dummy --dry-run; experiment_runner --help lists every flag)\n{commands_text()}",
              file=sys.stderr)
        return EXIT_USAGE
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    try:
        return run_command(argv)
    except RunnerError as exc:
        print(f"experiment_runner: error: {exc}", file=sys.stderr)
        return exit_code(exc)
    except ResultsFileError as exc:
        print(f"experiment_runner: error: {exc}", file=sys.stderr)
        return EXIT_RESULTS_IO
    except KeyboardInterrupt as exc:  # outside the run loop: no experiment is running
        signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
        print(f"experiment_runner: stopped by {signal.Signals(signum).name} while no experiment was running",
              file=sys.stderr)
        return 128 + signum
    except BrokenPipeError:
        raise
    except Exception:  # noqa: BLE001 - a bug of ours: keep the traceback, say so, exit 1
        import traceback

        traceback.print_exc()
        print("experiment_runner: internal error (a bug in the runner, not in your input); "
              "the traceback above says where", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
