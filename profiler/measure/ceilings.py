"""Measured ceilings: what this machine really reaches for a large matmul and a large copy.

The datasheet roof (profiler.model.hardware) is a promise; these are the measured roofs the roofline
also draws. Matmul FLOP/s = 2·n³ / time for an n×n×n product on random data (never zeros: they
can run faster); copy bandwidth = (bytes read + bytes written) / time for a device-to-device copy.
Results are cached per device and software versions in ``~/.cache/attention-roofline``.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from profiler.measure.timing import measure
from profiler.model.roofs import Ceilings, CopyCurve

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "fp8": torch.float8_e4m3fn}


def device_name(device: torch.device | str) -> str:
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU {platform.processor() or platform.machine()} ({os.cpu_count()} threads)"


def cache_path() -> Path:
    """Where measured ceilings are cached: ceilings.json in ``$ATTN_ROOFLINE_CACHE`` (a folder), or that
    file itself where the variable names a .json file; by default under ~/.cache/attention-roofline."""
    value = os.environ.get("ATTN_ROOFLINE_CACHE")
    if value and value.endswith(".json"):
        return Path(value)
    return Path(value or Path.home() / ".cache" / "attention-roofline") / "ceilings.json"


def load_cached(device: torch.device | str) -> Ceilings | None:
    path = cache_path()
    if not path.exists():
        return None
    try:
        entries = json.loads(path.read_text())
        entry = entries.get(f"{device_name(device)}|torch {torch.__version__}")
        return Ceilings(**{k: v for k, v in entry.items() if k != "copy_curve"}) if entry else None
    except (ValueError, TypeError):
        return None  # an unreadable cache is re-measured, not trusted


def _store(ceilings: Ceilings) -> None:
    from profiler.store import write_json_atomic

    path = cache_path()
    entries = {}
    if path.exists():
        try:
            entries = json.loads(path.read_text())
        except ValueError:
            entries = {}
    # The copy curve belongs to the run that measured it (measure_copy_curve), never to the cache.
    entries[f"{ceilings.device}|torch {ceilings.torch_version}"] = asdict(replace(ceilings, copy_curve=None))
    write_json_atomic(path, entries)  # a crash never leaves half a file


def measure_ceilings(device: torch.device | str, dtypes=("fp16", "bf16", "fp32"), use_cache: bool = True) -> Ceilings:
    """Time a large matmul per dtype and a large copy on ``device`` (GPU: n=8192 and 2 GiB;
    CPU: n=2048 and 256 MiB, so it finishes in seconds)."""
    device = torch.device(device)
    on_gpu = device.type == "cuda"
    # CPU half-precision matmuls are emulated on most CPUs: not a ceiling, so a CPU measures fp32 only
    # (and a cache entry holding it is complete).
    dtypes = tuple(dtypes) if on_gpu else tuple(d for d in dtypes if d == "fp32")
    cached = load_cached(device) if use_cache else None
    if cached is not None and set(dtypes) <= set(cached.matmul_tflops) and cached.l2_copy_gbps is not None:
        return cached
    n = 8192 if on_gpu else 2048
    rates = {}
    old_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means IEEE fp32, as in our kernels
    try:
        for dtype in dtypes:
            if dtype == "fp8":  # e4m3 × e4m3 with fp32 accumulation, bf16 out: torch's scaled matmul (cuBLASLt)
                a = torch.randn(n, n, device=device).to(TORCH_DTYPES[dtype])
                b = torch.randn(n, n, device=device).to(TORCH_DTYPES[dtype]).t()  # column-major, as it needs
                one = torch.ones((), device=device)

                def scaled(a=a, b=b, one=one):
                    return torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16)

                t = measure(scaled, device)
                rates[dtype] = 2 * n**3 / (t.median_ms * 1e-3) / 1e12
                del a, b
                continue
            a = torch.randn(n, n, device=device, dtype=TORCH_DTYPES[dtype])
            b = torch.randn(n, n, device=device, dtype=TORCH_DTYPES[dtype])
            t = measure(lambda a=a, b=b: torch.matmul(a, b), device)
            rates[dtype] = 2 * n**3 / (t.median_ms * 1e-3) / 1e12  # 2·n³ FLOPs per n×n×n product
            del a, b
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_tf32
    copy_bytes = (2 << 30) if on_gpu else (256 << 20)
    src = torch.randn(copy_bytes // 4, device=device)
    dst = torch.empty_like(src)
    t = measure(lambda: dst.copy_(src), device)
    copy_gbps = 2 * copy_bytes / (t.median_ms * 1e-3) / 1e9  # read + write
    src = dst = None  # free the large copy before the small one
    l2_gbps, l2_bytes = measure_l2_copy(device)
    ceilings = Ceilings(
        device=device_name(device), matmul_tflops=rates, copy_gbps=copy_gbps, matmul_n=n, copy_bytes=copy_bytes,
        torch_version=torch.__version__, measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        l2_copy_gbps=l2_gbps, l2_copy_bytes=l2_bytes,
    )
    _store(ceilings)
    return ceilings


def measure_l2_copy(device: torch.device | str, copies: int = 50, replays: int = 10) -> tuple[float, int]:
    """(GB/s read + written, bytes per buffer) of a device copy that stays in the L2: source and
    destination a quarter of the L2 the driver reports each (CPU: 256 KiB each, inside a core's
    L2). The roof tile (L2) bytes are judged against; a measured lower bound of the L2's bandwidth.
    On a GPU the copies are replayed from a CUDA graph and timed with events around all of them:
    launched one by one, a copy this small is timed by its launch (on an H200: 4.6 TB/s launched,
    6.3 TB/s from a graph), and do_bench's L2 flush between repetitions would send it to DRAM."""
    device = torch.device(device)
    if device.type != "cuda":
        nbytes = 256 << 10
        src = torch.randn(nbytes // 4)
        dst = torch.empty_like(src)
        t = measure(lambda: dst.copy_(src), device)
        return 2 * nbytes / (t.median_ms * 1e-3) / 1e9, nbytes
    nbytes = torch.cuda.get_device_properties(device).L2_cache_size // 4
    src = torch.randn(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # both buffers now live in L2
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(copies):
            dst.copy_(src)
    graph.replay()  # warm
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize(device)
    seconds = start.elapsed_time(end) * 1e-3 / (replays * copies)
    return 2 * nbytes / seconds / 1e9, nbytes


# Copy sizes of the curve, in bytes moved (read + written): on a GPU from 64 KiB, under any attention
# step's, to the 4 GiB of the single large copy above, every factor of 2; on a CPU to 256 MiB, every
# factor of 4, timed for a shorter while (CPU_REP_MS), so a CPU capture spends well under a second on it.
CURVE_BYTES = {"cuda": [64 << 10 << k for k in range(17)], "cpu": [64 << 10 << 2 * k for k in range(7)]}
CPU_REP_MS = 10


def measure_copy_curve(device: torch.device | str, graph: bool = False, progress=None) -> CopyCurve:
    """The median time of a device copy at each size of :data:`CURVE_BYTES`, timed as the capture times
    its kernels (profiler.measure.timing.measure: do_bench with the L2 flushed between repetitions, so
    each copy starts from DRAM as a step does; ``graph``: of CUDA-graph replays, as --cuda-graph times
    decode). The copy is an elementwise kernel (``torch.neg(src, out=dst)``: each byte read once and
    written once, by the SMs, as an attention kernel moves its bytes), not ``dst.copy_(src)``: captured
    in a CUDA graph, that memcpy becomes a node the driver may run on a copy engine, which on an H100
    moved 1 to 4 GiB at 2.44 TB/s against the kernel's 3.03, launched or replayed alike
    (scripts/perf_experiments/copy_curve_probe.py). Measured by every capture, never cached: it is the
    roof of the rows measured beside it (profiler.model.roofs.CopyCurve says what sets its shape).
    ``progress(i, n)`` is called after each size."""
    device = torch.device(device)
    sizes = CURVE_BYTES["cuda" if device.type == "cuda" else "cpu"]
    seconds = []
    for i, moved in enumerate(sizes):
        # half the bytes moved are read, half written; random on a GPU (never zeros), where randn is cheap
        src = torch.randn(moved // 8, device=device) if device.type == "cuda" else torch.full((moved // 8,), 1.5)
        dst = torch.empty_like(src)
        if device.type == "cuda":
            timing = measure(lambda src=src, dst=dst: torch.neg(src, out=dst), device, graph=graph)
        else:
            timing = measure(lambda src=src, dst=dst: torch.neg(src, out=dst), device, rep_ms=CPU_REP_MS)
        seconds.append(timing.median_ms * 1e-3)
        del src, dst
        if progress is not None:
            progress(i + 1, len(sizes))
    how = ("do_bench of CUDA-graph replays" if graph else "do_bench") if device.type == "cuda" else \
        "torch.utils.benchmark"
    return CopyCurve(tuple(sizes), tuple(seconds), timing=how, measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
