"""Timing of one callable: CUDA events through ``triton.testing.do_bench`` on a GPU (warm-up,
repetitions, L2 flushed between repetitions, median and spread), ``torch.utils.benchmark`` on a CPU.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from profiler.model.rows import Timing


def measure(fn: Callable[[], object], device: torch.device | str, *, warmup_ms: int = 25, rep_ms: int = 100,
            grad_to_none: list[torch.Tensor] | None = None) -> Timing:
    """Median, 10th and 90th percentile time of ``fn()`` in milliseconds."""
    if torch.device(device).type == "cuda":
        import triton.testing

        median, p10, p90 = triton.testing.do_bench(
            fn, warmup=warmup_ms, rep=rep_ms, grad_to_none=grad_to_none, quantiles=[0.5, 0.1, 0.9]
        )
        return Timing(median, p10, p90)
    import torch.utils.benchmark as benchmark

    def run():
        if grad_to_none:
            for t in grad_to_none:
                t.grad = None
        fn()

    measurement = benchmark.Timer(stmt="run()", globals={"run": run}).blocked_autorange(min_run_time=rep_ms / 1000)
    times = torch.tensor(measurement.times, dtype=torch.float64) * 1e3
    return Timing(measurement.median * 1e3, times.quantile(0.1).item(), times.quantile(0.9).item())
