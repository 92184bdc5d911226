"""Which copy the size-aware roof should time (issue 43, item 3): a device copy by size, four ways.

    python scripts/perf_experiments/copy_curve_probe.py

``dst.copy_(src)`` is a cudaMemcpyAsync device to device; in a CUDA graph it becomes a memcpy node, which
the driver may hand to a copy engine instead of the SMs. ``torch.neg(src, out=dst)`` is an elementwise
kernel that reads and writes as many bytes. Each is timed by profiler.measure.timing.measure (do_bench,
L2 flushed), launched and as graph replays; GB/s counts bytes read + written.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from profiler.measure.timing import measure  # noqa: E402

SIZES = [1 << 20 << k for k in range(0, 13, 2)]  # 1 MiB to 4 GiB moved

print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
print(f"{'moved':>10} | " + " | ".join(f"{w:>16}" for w in ("memcpy", "memcpy graph", "neg kernel", "neg graph")))
for moved in SIZES:
    src = torch.randn(moved // 8, device="cuda")
    dst = torch.empty_like(src)
    rates = []
    for fn in (lambda src=src, dst=dst: dst.copy_(src), lambda src=src, dst=dst: torch.neg(src, out=dst)):
        for graph in (False, True):
            t = measure(fn, "cuda", graph=graph)
            rates.append(f"{t.median_ms * 1e3:8.1f} µs {moved / (t.median_ms * 1e-3) / 1e9:5.0f}")
    print(f"{moved >> 20:>6} MiB | " + " | ".join(f"{r:>16}" for r in rates), flush=True)
    del src, dst
