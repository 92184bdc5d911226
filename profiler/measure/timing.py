"""Timing of one callable: CUDA events through ``triton.testing.do_bench`` on a GPU (warm-up,
repetitions, L2 flushed between repetitions, median and spread), ``torch.utils.benchmark`` on a CPU.

With ``graph`` the callable is first captured in a CUDA graph and do_bench times its replays (still
one replay per repetition, L2 still flushed in between). Decode kernels run for microseconds, less
than Python takes to launch them (a Triton launch costs tens of microseconds of CPU), so without a
graph the GPU waits on the CPU and the time measures the launcher; serving stacks replay CUDA
graphs for the same reason.

The L2 flush between repetitions reads a buffer larger than the L2 instead of zeroing it (which is
what do_bench does by itself): a zeroing flush leaves the L2 full of dirty lines, and their write-
back to HBM then lands inside the next timed call. On an H100 (50 MB of L2) that added about
19 µs, a third, to a 134 MB decode read (docs/perf-notes.md, "Decode"); a read leaves clean lines,
which the timed call evicts for free.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager

import torch

from profiler.measure.gpu_state import GpuSampler
from profiler.model.rows import Timing


class GraphCaptureError(RuntimeError):
    """The callable cannot be captured in a CUDA graph (the message says why)."""


def graphed(fn: Callable[[], object]) -> Callable[[], None]:
    """``fn`` captured in a CUDA graph (after warm-up runs on a side stream, so compilation,
    autotuning and the allocator's first allocations happen outside the capture); returns replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            fn()
    except RuntimeError as err:
        raise GraphCaptureError(f"cannot be captured in a CUDA graph: {str(err).splitlines()[0]}") from err
    return graph.replay


@contextmanager
def clean_l2_flush():
    """While open, do_bench flushes the L2 by reading its flush buffer (a reduction) rather than by
    zeroing it, so no dirty line is left to be written back during a timed call."""
    import triton

    driver = triton.runtime.driver.active  # the driver object do_bench calls clear_cache on
    own = vars(driver).get("clear_cache")
    driver.clear_cache = lambda cache: cache.sum()  # reads every byte, writes one number
    try:
        yield
    finally:
        if own is None:
            del driver.clear_cache  # the class's zeroing method again
        else:
            driver.clear_cache = own


DO_BENCH_WARMUP_MS = 25  # do_bench's own warm-up, inside the NVML readings; a longer one runs before them


def warm_up(fn: Callable[[], object], ms: float, batch: int = 8) -> None:
    """Run ``fn`` back to back on the GPU for about ``ms`` milliseconds (in batches of ``batch`` calls, each waited
    for, so that the host's clock follows the GPU's work rather than running ahead of it)."""
    import time

    torch.cuda.synchronize()  # the work already queued is not the warm-up's
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        for _ in range(batch):
            fn()
        torch.cuda.synchronize()


def measure(fn: Callable[[], object], device: torch.device | str, *, warmup_ms: int = 25, rep_ms: int = 100,
            grad_to_none: list[torch.Tensor] | None = None, graph: bool = False) -> Timing:
    """Median, 10th and 90th percentile time of ``fn()`` in milliseconds (``graph``: of replays of
    a CUDA graph of it; forward calls only, a GPU only), and on a GPU the SM clock and board power NVML read
    meanwhile (profiler.measure.gpu_state). A warm-up longer than do_bench's own (:data:`DO_BENCH_WARMUP_MS`) runs
    before NVML's readings start, so a row's clock and power are read over its timed repetitions and do_bench's short
    warm-up, not over the seconds that brought the board to its power limit (docs/perf-notes.md, rounds 22 and 23)."""
    if torch.device(device).type == "cuda":
        import triton.testing

        if graph:
            fn = graphed(fn)
        with clean_l2_flush():
            if warmup_ms > DO_BENCH_WARMUP_MS:
                warm_up(fn, warmup_ms - DO_BENCH_WARMUP_MS)
            with GpuSampler(device) as state:
                median, p10, p90 = triton.testing.do_bench(
                    fn, warmup=min(warmup_ms, DO_BENCH_WARMUP_MS), rep=rep_ms, grad_to_none=grad_to_none,
                    quantiles=[0.5, 0.1, 0.9])
        return Timing(median, p10, p90, state.sm_clock_mhz, state.power_w)
    import torch.utils.benchmark as benchmark

    def run():
        if grad_to_none:
            for t in grad_to_none:
                t.grad = None
        fn()

    measurement = benchmark.Timer(stmt="run()", globals={"run": run}).blocked_autorange(min_run_time=rep_ms / 1000)
    times = torch.tensor(measurement.times, dtype=torch.float64) * 1e3
    return Timing(measurement.median * 1e3, times.quantile(0.1).item(), times.quantile(0.9).item())
