"""PyTorch/XLA: the lazy-tensor device runtime, its metrics, AMP, and the dumps it reports.

The dump variables themselves are set by the parent before launch
(`core/xla_dumps.py`), since torch_xla reads them once at start-up.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import Any, Callable

from experiment_runner.child.devices.cpu import DeviceRuntime
from experiment_runner.core.matrix import ExperimentConfig, autocast_dtype
from experiment_runner.core.options import RunOptions
from experiment_runner.core.xla_dumps import HLO_DIRNAME, METRICS_FILENAME, ir_dump_base

# Our --matmul-precision values (torch's names) to torch_xla.backends' names: torch's
# "medium" allows bfloat16 passes, which is XLA's fastest level, "default".
XLA_MATMUL_PRECISION: dict[str, str] = {"highest": "highest", "high": "high", "medium": "default"}

# torch_xla's metric names (nanoseconds, sample count) → the reference's record keys.
_COUNTED_METRICS = ("CompileTime", "ExecuteTime")

# Where --profile-xla writes its XPlane trace, in the experiment's folder (the reference's name).
PROFILE_DIRNAME = "xla-profile"

# Substrings of errors that mean the device ran out of memory.
_XLA_OOM_MARKERS = ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory")


def xla_autocast(config: ExperimentConfig) -> contextlib.AbstractContextManager:
    """AMP on an XLA device, following the reference: float16 on XLA:CUDA, bfloat16 on TPU.

    The reference ignores AMP on CPU; we run XLA's bfloat16 autocast there instead,
    because `--precision=amp` is an explicit request and torch_xla lowers it on CPU too.
    """
    import torch

    return torch.autocast(device_type="xla", dtype=getattr(torch, str(autocast_dtype(config))))


class XlaRuntime(DeviceRuntime):
    """A PJRT device: lazy tensors cut into graphs by `torch_xla.sync()` per iteration.

    The trace time of each iteration (Python running the model, before the graph is
    compiled and executed) is measured here, and torch_xla's metrics are cleared per
    repeat so that CompileTime and ExecuteTime belong to that repeat alone.
    """

    op_profile_key = "xla_unlowered_ops"

    def __init__(self, config: ExperimentConfig) -> None:
        super().__init__(config)
        import torch_xla

        self._device = torch_xla.device()
        self.torch_device = str(self._device)
        self.options = RunOptions()
        self.artifacts_dir: Path | None = None
        self._trace_s = 0.0
        self._iterations = 0
        self._repeat_index = -1
        self._metrics_files: dict[str, str] = {}
        self._profile_server: Any = None  # kept alive: the server stops when it is collected
        self._profile_trace: threading.Thread | None = None

    @property
    def build_device(self) -> str:
        """Build on the CPU, then move, as the reference does: weights and inputs then come
        from the CPU generator, identical to the native eager run the verifier compares with."""
        return "cpu"

    def prepare(self, options: RunOptions, artifacts_dir: Path) -> None:
        """Apply --matmul-precision to XLA as torch gets it, and remember the dump folder."""
        self.options = options
        self.artifacts_dir = Path(artifacts_dir)
        from torch_xla.backends import set_mat_mul_precision

        # The same precision as torch's, as the reference runner sets both.
        set_mat_mul_precision(XLA_MATMUL_PRECISION[options.effective_matmul_precision])

    def synchronize(self) -> None:
        import torch_xla
        import torch_xla.core.xla_model as xm

        torch_xla.sync()
        xm.wait_device_ops()

    def run_iteration(self, step: Callable[[], Any]) -> Any:
        import torch_xla

        start = time.perf_counter()
        output = step()
        self._trace_s += time.perf_counter() - start
        self._iterations += 1
        torch_xla.sync()
        return output

    def keep(self, tensor: Any) -> Any:
        """The tensor itself: a lazy tensor is the value of its graph's execution, which a later
        execution never overwrites, and a copy would add an op to the timed graph (a compilation in
        the first timed repeat)."""
        return tensor

    def begin_repeat(self) -> None:
        import torch_xla.debug.metrics as met

        self._trace_s = 0.0
        self._iterations = 0
        self._repeat_index += 1
        met.clear_all()
        if self.options.profile_xla and self._repeat_index == 0:
            self._start_profile_trace()

    def _start_profile_trace(self) -> None:
        """--profile-xla: an XPlane trace of the timed runs, from their start, for
        --profile-xla-duration-ms, into xla-profile/ (TensorBoard reads it). The profiler server
        listens on a free port, not the reference's fixed 9012, so parallel experiments never
        trace each other; the capture runs beside the timed runs, as the reference's does."""
        import socket

        import torch_xla.debug.profiler as xp

        with socket.socket() as probe:
            probe.bind(("localhost", 0))
            port = probe.getsockname()[1]
        self._profile_server = xp.start_server(port)
        logdir = self.artifacts_dir / PROFILE_DIRNAME
        logdir.mkdir(parents=True, exist_ok=True)
        self._profile_trace = threading.Thread(
            target=xp.trace, args=(f"localhost:{port}", str(logdir)),
            kwargs={"duration_ms": self.options.profile_xla_duration_ms}, daemon=True)
        self._profile_trace.start()

    def end_repeat(self) -> dict[str, float]:
        import torch_xla.debug.metrics as met

        metrics: dict[str, float] = {
            "trace_total_time": self._trace_s,
            "trace_per_iter_time": self._trace_s / max(self._iterations, 1),
        }
        for name in _COUNTED_METRICS:
            number, total_ns, _ = met.metric_data(name) or (0, 0.0, ())
            metrics[f"xla_{name}_time_s"] = total_ns / 1e9
            metrics[f"xla_{name}_number"] = number
        if self.options.dump_pytorch_xla_metrics and self.artifacts_dir is not None:
            relative = Path(f"repeat_{self._repeat_index}") / METRICS_FILENAME
            path = self.artifacts_dir / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(met.metrics_report())
            self._metrics_files[f"pytorch_xla_metrics.repeat_{self._repeat_index}"] = str(relative)
        return metrics

    def reset_rng(self, seed: int) -> None:
        import torch_xla.core.xla_model as xm

        super().reset_rng(seed)
        xm.set_rng_state(seed, self.torch_device)

    def peak_memory(self) -> dict[str, int]:
        """Host RSS always; the device's own peak where its PJRT client reports one (not CPU)."""
        import torch_xla.core.xla_model as xm

        peak = super().peak_memory()
        try:
            info = xm.get_memory_info(self._device)
        except RuntimeError:
            return peak
        if "peak_bytes_used" in info:
            peak["peak_device_bytes"] = int(info["peak_bytes_used"])
        return peak

    def profiled_op(self, name: str) -> bool:
        """On XLA, the per-op profile is about the ops torch_xla could not lower and ran on
        the CPU instead (its fallback counters), as in the reference runner."""
        import torch_xla.debug.metrics as met

        return name in set(met.executed_fallback_ops())

    def is_oom(self, exc: BaseException) -> bool:
        message = str(exc)
        return any(marker in message for marker in _XLA_OOM_MARKERS) or super().is_oom(exc)

    def accelerator_model(self) -> str:
        if self.config.accelerator == "cuda":
            import torch

            if torch.cuda.is_available():
                return torch.cuda.get_device_name()
        if self.config.accelerator == "tpu":
            from torch_xla._internal import tpu

            return f"TPU v{tpu.version()}"
        return super().accelerator_model()

    def artifacts(self) -> dict[str, str]:
        """Dumped files that exist, relative to the experiment's folder."""
        if self.artifacts_dir is None:
            return {}
        found = dict(self._metrics_files)
        if self._profile_trace is not None:
            # The capture lasts its duration whatever the runs did; wait for it to be written.
            self._profile_trace.join(timeout=self.options.profile_xla_duration_ms / 1000 + 60)
            profile = self.artifacts_dir / PROFILE_DIRNAME
            if any(p.is_file() for p in profile.rglob("*")):
                found["xla_profile"] = PROFILE_DIRNAME
        hlo = self.artifacts_dir / HLO_DIRNAME
        if self.options.dump_hlo and hlo.is_dir() and any(hlo.iterdir()):
            found["hlo"] = HLO_DIRNAME
        if self.options.save_ir_format:
            base = ir_dump_base(self.artifacts_dir, self.options.save_ir_format)
            for path in sorted(base.parent.glob(base.name + "*")):
                suffix = path.name[len(base.name):].lstrip(".")
                key = f"ir_{self.options.save_ir_format}" + (f".{suffix}" if suffix else "")
                found[key] = str(path.relative_to(self.artifacts_dir))
        return found
