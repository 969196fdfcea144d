"""What the verifier needs of the experiment it judges, stated here so it never imports the child.

The child's `ExperimentDriver` satisfies `Subject` structurally; tests and other callers
may hand in anything else that does. The verifier depends on these few members only, so
the child side can change how it loads, compiles and times models without the verifier
following it (and the verifier stays importable where no child code is, e.g. by
benchmarks/verifier_agreement.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

from experiment_runner.core.matrix import Experiment, ExperimentConfig
from experiment_runner.core.options import RunOptions

if TYPE_CHECKING:
    from benchmark_models import BenchmarkModel


@dataclass(frozen=True)
class DeviceMemory:
    """The memory of a device the runs live on apart from the host's (a GPU): bytes this process's
    tensors take there now, bytes it can still take (free, plus what its allocator holds unused),
    and which device that is."""

    allocated: int
    available: int
    source: str


@dataclass(frozen=True)
class TimedRun:
    """What the timed runs took, as the record has it, so the verification can be planned before
    its first run (verifier/memory.py plan_before_eager): the resident high-water mark
    (`timed_peak_rss_bytes`, None where the kernel cannot tell), the device's peak allocation
    (`peak_allocated_bytes`, None on the host) and the element counts of the floating-point tensors
    a verification run keeps (the output; in training also the gradients, parameters and buffers)."""

    peak_rss_bytes: int | None
    output_leaves: tuple[int, ...]
    peak_allocated_bytes: int | None = None


class Device(Protocol):
    """The device a subject runs on: where tensors live, its RNG, and how one iteration runs."""

    @property
    def torch_device(self) -> str: ...

    def reset_rng(self, seed: int) -> None: ...

    def run_iteration(self, step: Callable[[], Any]) -> Any: ...

    def synchronize(self) -> None: ...

    def rng_states(self) -> list[Any]:
        """The states of the generators a step draws from, to compare before and after one."""
        ...

    def reset_peak_memory(self) -> None:
        """Start a new resident high-water mark (verifier/memory.py measures the eager run with it)."""
        ...

    def peak_memory(self) -> dict[str, int]:
        """Peaks since reset_peak_memory: `timed_peak_rss_bytes` where the host can tell, and
        `peak_allocated_bytes` on a device with its own memory."""
        ...

    def device_memory(self) -> DeviceMemory | None:
        """The memory of the device the runs live on, None where that is the host's."""
        ...


class Subject(Protocol):
    """One experiment that the verifier can load and run again, from the same seed, as often as it needs."""

    @property
    def experiment(self) -> Experiment: ...

    @property
    def options(self) -> RunOptions: ...

    @property
    def device(self) -> Device: ...

    @property
    def config(self) -> ExperimentConfig: ...

    # The experiment's step as it was timed, for the experiment's run, or None (and why not) to
    # run a fresh copy; the verifier sets it to None once it has run it.
    timed_step: Callable[[], Any] | None
    fresh_copy_reason: str | None
    # What the timed runs took (None where nothing was timed): the plan before the eager runs.
    timed_run: TimedRun | None

    def load(self, precision: str | None = None) -> "BenchmarkModel":
        """A fresh copy of the model, seeded, cast to `precision`."""
        ...

    def make_step(self, model: "BenchmarkModel", compiled: bool = True, precision: str | None = None,
                  full_output: bool | None = None, checking: bool = False) -> Callable[[], Any]:
        """One iteration as a closure, compiled with the experiment's backend when `compiled`;
        `checking`: a verification run's, in the module mode its recipe checks training in."""
        ...

    def with_config(self, config: ExperimentConfig) -> "Subject":
        """The same model and options under another configuration, on that configuration's own device."""
        ...
