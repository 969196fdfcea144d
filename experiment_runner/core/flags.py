"""How a configuration field is spelled on the command line: one declaration per option.

Every run flag is a field of one of the frozen configuration dataclasses (`RunOptions`,
read by the child; `MatrixConfig`, read when planning; `SessionConfig`, read by the
parent), declared with `option(default, Flag(...))`. The parser, the range checks, the
typed configuration and the generated CLI reference (docs/cli.md) all read that one
declaration, so a flag's name, default, range and help cannot drift apart.

Pure data: no argparse here (the CLI builds its parser from it) and no torch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Literal

# How a flag takes its value: `value` one argument; `list` repeatable, each use adds one
# (a matrix dimension); `switch` present or absent; `toggle` --name / --no-name.
Kind = Literal["value", "list", "switch", "toggle"]

# Which process reads the option, for the reference page: the child (per experiment), the
# planner (which experiments), or the parent (how they are run and recorded).
SIDES = {"RunOptions": "child", "MatrixConfig": "planning", "SessionConfig": "parent"}


@dataclass(frozen=True)
class Flag:
    """The command-line side of one configuration field.

    The long name is the field's name with dashes (`min_sample_time` → `--min-sample-time`).
    `low`/`high` bound a number (inclusive, unless `low_open`); `wanted` says the range in
    words for the error message. `compat` marks a flag kept for PyTorch/XLA's
    experiment_runner.py and says what it does here.
    """

    help: str
    group: str
    kind: Kind = "value"
    aliases: tuple[str, ...] = ()
    parse: Callable[[str], Any] | None = None
    choices: tuple[Any, ...] | None = None
    metavar: str | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    wanted: str | None = None
    required: bool = False
    default_help: str | None = None  # how --help states the default, when the value alone would mislead
    env_default: str | None = None  # an environment variable that supplies the default
    compat: str | None = None

    def out_of_range(self, value: Any) -> bool:
        """True when a number falls outside [low, high] (or (low, high]) or is not finite."""
        if self.low is None and self.high is None or value is None:
            return False
        if not math.isfinite(value):
            return True
        too_low = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        return too_low or (self.high is not None and value > self.high)


def option(default: Any, flag: Flag) -> Any:
    """A dataclass field with its flag; `default` is the configuration's default too."""
    return dataclasses.field(default=default, metadata={"flag": flag})


def required(flag: Flag) -> Any:
    """A dataclass field with a required flag (no default)."""
    return dataclasses.field(metadata={"flag": dataclasses.replace(flag, required=True)})


@dataclass(frozen=True)
class Declared:
    """One option: the field it fills, in which configuration, and its flag."""

    name: str
    owner: str
    default: Any
    flag: Flag

    @property
    def long(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def names(self) -> tuple[str, ...]:
        return (self.long, *self.flag.aliases)


def declared(*configs: type) -> Iterator[Declared]:
    """The options of these configuration dataclasses, in declaration order."""
    for config in configs:
        for f in dataclasses.fields(config):
            flag = f.metadata.get("flag")
            if flag is None:
                continue
            default = None if f.default is dataclasses.MISSING else f.default
            yield Declared(f.name, config.__name__, default, flag)
