"""``demo``: every implementation once at a size that suits the machine (the seed posts' benchmark
shape on a GPU, a small one on a CPU), with its error and speed."""

from __future__ import annotations

import argparse
import os

from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from attention_core.shape import Shape
from profiler.cli.console import case_line, console, fmt
from profiler.cli.options import add_device

HELP = "run every implementation once and print a small table"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_device(p)


def run(args) -> int:
    from profiler.measure.runner import run_case
    from profiler.registry import BUILTIN, REGISTRY, baseline_impl

    on_gpu = args.device.startswith("cuda")
    # The seed posts' benchmark shape on a GPU; on a CPU a size that runs in seconds.
    shape = Shape(4, 32, 4096, 4096, 64, "fp16") if on_gpu else Shape(1, 4, 512, 512, 64, "fp32")
    results = []
    impls = [REGISTRY[name] for name in BUILTIN]
    if console.is_terminal:
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("demo", total=len(impls))
            for impl in impls:
                progress.update(task, description=f"running {escape(impl.name)}")
                results.append(run_case(impl, shape, args.device, rep_ms=50 if on_gpu else 200))
                progress.advance(task)
    else:  # a log or a pipe: a line per implementation as it finishes
        for i, impl in enumerate(impls, 1):
            r = run_case(impl, shape, args.device, rep_ms=50 if on_gpu else 200)
            results.append(r)
            console.print(case_line(i, len(impls), f"{impl.name} fwd {shape.label}",
                                    {"status": r.status, "message": r.message,
                                     "time_ms": r.timing.median_ms if r.timing else None}), soft_wrap=True)
            console.file.flush()
    # Only ok results have a time, rate or speedup: a 'wrong' one was timed, but is no point of comparison.
    baseline = baseline_impl()  # naive: the speedup column's reference
    naive_ms = next((r.timing.median_ms for r in results if r.impl == baseline and r.status == "ok" and r.timing), None)
    table = Table("impl", "ms", "TFLOP/s", "speedup\nvs naive", "max rel err\nvs fp32", "peak\nMiB", "status",
                  title=f"B={shape.batch} H={shape.heads} N={shape.seq_q} D={shape.head_dim} {shape.dtype} "
                        f"forward on {args.device}")
    for r in results:
        ms = r.timing.median_ms if r.timing and r.status == "ok" else None
        table.add_row(r.impl, fmt(ms, ".3f"), fmt(r.tflops if ms else None, ".2f"),
                      fmt(naive_ms / ms if ms and naive_ms else None, ".1f"), fmt(r.max_rel_err, ".1e"),
                      fmt(r.peak_mem_bytes / 2**20 if ms and r.peak_mem_bytes else None, ".0f"), r.status)
    console.print(table)
    for r in results:  # whole, below the table, where they have the console's width
        if r.status != "ok" and r.message:
            console.print(f"  {r.impl}: {r.status}: {r.message}", overflow="fold")
    if not on_gpu and os.environ.get("TRITON_INTERPRET") != "1":
        console.print("Triton kernels need a GPU; set TRITON_INTERPRET=1 to run them (slowly) on the CPU.")
    return 0
