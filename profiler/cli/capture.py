"""``capture``: measure implementations at one shape into a capture folder (results.parquet,
meta.json, torch-profiler traces), then print a table per shape. ``sweep`` is the same over lists of
shapes, and shares this module's options and body."""

from __future__ import annotations

import argparse

from rich.table import Table

from profiler.cli.console import (
    console,
    dashboard_hint,
    fmt,
    join_ranks,
    measure_with_progress,
    print_round_spread,
    say_shrunk,
    start_capture,
)
from profiler.cli.options import (
    add_allow_mixed,
    add_cuda_graph,
    add_device,
    add_rep_ms,
    add_rounds,
    check_cuda_graph,
    check_fp8,
    check_impl_dtypes,
    impl_list,
)
from profiler.cli.shapes import Default, ShapeOptions, add_shape_arguments, shape_grid

HELP = "measure implementations at one shape into a capture folder"

# The seed benchmark's shape (B4 H32 N8192 D64 fp16) on a GPU; on a CPU, sizes that fit and finish
# in minutes (B1 H2 fp32).
SHAPES = ShapeOptions(
    lists=False,
    seq=Default("sequence length (default 8192)", [8192]),
    batch=Default("default 4 (CPU: 1)", [4], [1]),
    heads=Default("default 32 (CPU: 2)", [32], [2]),
    dim=Default("head_dim (default 64)", [64]),
    dtype=Default("default fp16 (CPU: fp32)", ["fp16"], ["fp32"]),
    causal=Default(None, [False]),
    mode=Default(None, ["fwd"]),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_capture_arguments(p, SHAPES)


def run(args) -> int:
    return measure_grid(args, SHAPES, kind="capture")


def add_capture_arguments(p: argparse.ArgumentParser, shapes: ShapeOptions) -> None:
    """capture's and sweep's options: the shape grid as ``shapes`` spells it, then the rest."""
    add_shape_arguments(p, shapes)
    p.add_argument("--impl", type=impl_list, default=None, help="comma-separated names or 'all' (default)")
    p.add_argument("--out", default=None, help="capture folder (default reports/<device>-<time>)")
    p.add_argument("--trace", choices=("torch", "none"), default=None,
                   help="torch-profiler trace per implementation (default: torch on a GPU, none on a CPU)")
    p.add_argument("--resume", action="store_true", help="keep the rows already in --out, measure the rest")
    add_rep_ms(p)
    add_rounds(p)
    add_cuda_graph(p)
    add_device(p)
    add_allow_mixed(p)


def measure_grid(args, shapes: ShapeOptions, kind: str) -> int:
    """Measure every implementation at every shape of the grid into a capture folder (``kind`` goes
    to meta.json) and print a table per shape."""
    from profiler.measure.ceilings import device_name
    from profiler.registry import BUILTIN, get_impl
    from profiler.views.tables import summary_frame

    join_ranks(args, args.device)
    on_gpu = args.device.startswith("cuda")
    grid = shape_grid(args, shapes, on_gpu)
    shape_list = grid.shapes()
    impls = [get_impl(n) for n in (args.impl or BUILTIN)]
    check_impl_dtypes(args.impl or (), grid.dtypes)
    check_fp8(grid.dtypes, grid.modes, args.device)
    timer = check_cuda_graph(args, grid.modes)
    label = device_name(args.device)
    trace = args.trace or ("torch" if on_gpu else "none")
    # A capture traces each implementation at its shape; a sweep only at its middle sequence length
    # and its first dtype, head_dim, causal setting and mode, so the folder stays a few MB.
    traced = None
    if trace == "torch":
        traced = (grid.seqs_q[len(grid.seqs_q) // 2], grid.dtypes[0], grid.dims[0], grid.causals[0], grid.modes[0])
    notes = list(grid.shrunk)
    store, roofs = start_capture(args, label, grid.dtypes, {
        "kind": kind, "shapes": len(shape_list), "impls": [i.name for i in impls],
        "trace": trace, "defaults_shrunk": notes, "rep_ms": args.rep_ms, "rounds": args.rounds,
        "warmup_ms": args.warmup_ms,
        "flops_convention": "totals: 4·B·H·Nq·Nk·D, x0.5 causal, x2.5 bwd; naive steps: profiler.model.naive",
        **timer}, impls=impls, head_dims=grid.dims)
    say_shrunk(notes)
    if roofs.datasheet is None:
        console.print(f"'{label}' is not in the datasheet table: rows are judged against measured ceilings only.")
    rows = measure_with_progress(store, shape_list, impls, args.device, roofs, args.rep_ms,
                                 trace_filter=None if traced is None else
                                 (lambda s: (s.seq_q, s.dtype, s.head_dim, s.causal, s.mode) == traced),
                                 ranks=args.ranks, graph=args.cuda_graph, rounds=args.rounds,
                                 warmup_ms=args.warmup_ms)
    if args.ranks is not None and not args.ranks.main:
        return 0  # rank 0 merged the parts and prints for every rank
    folder = store.folder
    _print_summary(summary_frame(store.rows if args.resume or args.ranks is not None else rows))
    if args.rounds > 1:
        from profiler.store import to_frame

        console.print(f"Each row is the median of {args.rounds} interleaved rounds.")
        print_round_spread(to_frame(store.rows), [i.name for i in impls])
    console.print(f"Capture written to {folder}/ (results.parquet, meta.json"
                  f"{', kernels.parquet, traces/' if traced else ''}).")
    dashboard_hint(folder)
    return 0


def _print_summary(frame) -> None:
    """One table per shape. Rows whose status is not ok print '-' for times, rates and bound (a
    'wrong' row's time is in results.parquet, but it is no point on the roofline); the error
    against naive fp32 attention is shown for every row that has one. Each message is printed
    whole below its table, where it has the console's width."""
    from attention_core.shape import Shape

    if frame.empty:
        return
    for _, group in frame.groupby(list(Shape.KEY), sort=False):  # in the order the shapes were measured
        shape = Shape.from_row(group.iloc[0])
        table = Table(title=f"{shape.label} {'' if shape.causal else 'full '}{shape.mode}")
        table.add_column("impl", overflow="fold")
        # two-line headers keep the table within 100 columns, where rich would otherwise cut cells
        for header in ("ms", "TFLOP/s", "GB/s", "speedup\nvs naive", "peak\nMiB", "max rel\nerr", "bound"):
            table.add_column(header)
        table.add_column("status", overflow="fold")
        messages = []
        for _, r in group.iterrows():
            ok = r["status"] == "ok"
            peak = r["peak_mem_bytes"]
            if not ok and isinstance(r["message"], str) and r["message"]:
                messages.append(f"{r['impl']}: {r['status']}: {r['message']}")
            table.add_row(
                r["impl"], fmt(r["time_ms"] if ok else None, ".3f"), fmt(r["tflops"] if ok else None, ".4g"),
                fmt(r["gbps"] if ok else None, ",.4g"),
                fmt(r["speedup_vs_naive"] if ok else None, ".1f"),
                fmt(peak / 2**20 if ok and peak is not None else None, ",.0f"),
                fmt(r["max_rel_err"], ".1e"),
                r["bound"] if ok and isinstance(r["bound"], str) else "-",
                r["status"],
            )
        console.print(table)
        for message in messages:
            console.print(f"  {message}", overflow="fold")
