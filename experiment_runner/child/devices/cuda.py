"""The CUDA runtime: device synchronization, CUDA peak memory, CUDA OOM."""

from __future__ import annotations

from typing import Any, Callable

from experiment_runner.child.devices.cpu import DeviceRuntime
from experiment_runner.core.matrix import ExperimentConfig, uses_cuda_graphs
from verifier.subject import DeviceMemory


class CudaRuntime(DeviceRuntime):
    """Every torch.cuda call goes through `self.cuda`, and the CUDA-graph step mark through
    `mark_step_begin`: the seams a unit test replaces with fakes so the CUDA logic is exercised on
    a host without a GPU."""

    torch_device = "cuda"

    def __init__(self, config: ExperimentConfig, cuda: Any = None,
                 mark_step_begin: Callable[[], None] | None = None) -> None:
        super().__init__(config)
        self._cuda = cuda
        self._mark_step_begin = mark_step_begin

    @property
    def cuda(self) -> Any:
        if self._cuda is None:
            import torch

            self._cuda = torch.cuda
        return self._cuda

    def synchronize(self) -> None:
        self.cuda.synchronize()

    def run_iteration(self, step: Callable[[], Any]) -> Any:
        """One iteration; under CUDA graphs, marked as a new step of the cudagraph trees first
        (torch.compiler.cudagraph_mark_step_begin), so a replay may reuse the memory of the
        previous iteration's outputs: whatever is kept across iterations is copied out
        (DeviceRuntime.keep, verifier.run.snapshot)."""
        if uses_cuda_graphs(self.config):
            if self._mark_step_begin is None:
                import torch

                self._mark_step_begin = torch.compiler.cudagraph_mark_step_begin
            self._mark_step_begin()
        return step()

    def rng_states(self) -> list[Any]:
        return [*super().rng_states(), self.cuda.get_rng_state()]

    def start_device_clock(self) -> Callable[[], float]:
        """CUDA events around the queued work: kernel time without the host's launch overhead."""
        start, end = self.cuda.Event(enable_timing=True), self.cuda.Event(enable_timing=True)
        start.record()

        def stop() -> float:
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000.0

        return stop

    def reset_peak_memory(self) -> None:
        self.cuda.synchronize()
        self.cuda.reset_peak_memory_stats()
        super().reset_peak_memory()

    def peak_memory(self) -> dict[str, int]:
        return {
            **super().peak_memory(),
            "peak_allocated_bytes": int(self.cuda.max_memory_allocated()),
            "peak_reserved_bytes": int(self.cuda.max_memory_reserved()),
        }

    harness_memory_method = "torch.cuda.max_memory_allocated() over the warm-up (the harness's get_peak_memory)"

    def harness_memory_start(self) -> None:
        """As the harness's warmup() starts on CUDA: the peak statistics reset, then the
        allocator's cache emptied."""
        self.cuda.synchronize()
        self.cuda.reset_peak_memory_stats()
        self.cuda.empty_cache()

    def harness_memory(self) -> int | None:
        """The allocator's peak since harness_memory_start (the harness's get_peak_memory)."""
        return int(self.cuda.max_memory_allocated())

    def harness_memory_base(self) -> int | None:
        """None: the allocator's peak starts from its reset, whatever the process holds."""
        return None

    def device_memory(self) -> DeviceMemory:
        """This GPU's memory as the verifier plans it: what the process's tensors take now, and what
        it can still take, the driver's free memory (torch.cuda.mem_get_info) and the caching
        allocator's reserved but unused blocks."""
        device = self.cuda.current_device()
        free, total = self.cuda.mem_get_info(device)
        allocated = int(self.cuda.memory_allocated(device))
        reusable = int(self.cuda.memory_reserved(device)) - allocated
        return DeviceMemory(allocated, int(free) + max(0, reusable),
                            f"GPU {device} memory (torch.cuda.mem_get_info: {free / 2**30:.1f} of "
                            f"{total / 2**30:.1f} GiB free, and the allocator's cache)")

    def memory_capacity(self) -> tuple[int, str] | None:
        device = self.cuda.current_device()
        return int(self.cuda.get_device_properties(device).total_memory), f"the memory of GPU {device}"

    def profiler_activities(self) -> list[Any]:
        from torch.profiler import ProfilerActivity

        return [ProfilerActivity.CPU, ProfilerActivity.CUDA]

    def is_oom(self, exc: BaseException) -> bool:
        import torch

        if isinstance(exc, torch.cuda.OutOfMemoryError):
            return True
        return isinstance(exc, RuntimeError) and "CUDA out of memory" in str(exc) or super().is_oom(exc)

    def accelerator_model(self) -> str:
        return self.cuda.get_device_name()
