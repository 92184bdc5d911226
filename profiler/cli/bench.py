"""``bench``: our kernels beside PyTorch's SDPA backends over a grid of shapes, into a capture
folder; prints TFLOP/s (GB/s where every shape is memory-bound) and the ratio of the baseline to
each peer."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from attention_core.shape import Shape
from profiler.cli import UsageError
from profiler.cli.console import (
    console,
    dashboard_hint,
    fmt,
    join_ranks,
    measure_with_progress,
    pick_default,
    print_round_spread,
    say_shrunk,
    shape_words,
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
    positive_int,
)
from profiler.cli.shapes import Default, ShapeOptions, add_shape_arguments, shape_grid

HELP = "our kernels beside PyTorch's SDPA backends, TFLOP/s and ratios"

# bench's defaults, on a GPU and on a CPU. On a GPU: the seed benchmark. On a CPU a shape that runs
# in seconds. The implementations are the registry's default lists (attention_core.implementations:
# BENCH, BENCH_CPU): on a GPU our kernel against SDPA's FlashAttention-2 and cuDNN backends; on a CPU
# those that run there (our Triton kernel needs a GPU, or the interpreter, which is for tests: far
# too slow to time; SDPA's cuDNN and efficient backends need CUDA), led by sdpa_flash, PyTorch's
# fused FlashAttention-style CPU kernel, with naive (four steps through memory) and SDPA's unfused
# math backend to show what fusing buys. Ratios are to the first of each list.
SHAPES = ShapeOptions(
    lists=True,
    seq=Default("sequence lengths (default 8192; CPU 1024)", [8192], [1024]),
    batch=Default("default 4 (CPU: 1)", [4], [1]),
    heads=Default("query heads (default 32; CPU: 2)", [32], [2]),
    dim=Default("head_dim (default 64)", [64]),
    dtype=Default("default fp16 (CPU: fp32)", ["fp16"], ["fp32"]),
    causal=Default("true, false or both", [False]),
    mode=Default("fwd, bwd, fwd+bwd (list)", ["fwd"]),
)


def impl_defaults() -> tuple[Default, Default]:
    """--impl's and --baseline's defaults on a GPU and on a CPU, from the registry's default lists
    (read when asked, so an entry added after import is in them)."""
    from profiler.registry import BENCH, BENCH_CPU, default_impls

    gpu, cpu = default_impls(BENCH), default_impls(BENCH_CPU)
    impls = Default(f"implementations, comma-separated, or 'all' (default {','.join(gpu)}; CPU: {','.join(cpu)})",
                    gpu, cpu)
    baseline = Default(f"ratios are this one / each peer (default {gpu[0]}; CPU: {cpu[0]}; with an --impl list "
                       "that lacks it, the list's first)", gpu[:1], cpu[:1])
    return impls, baseline


def add_arguments(p: argparse.ArgumentParser) -> None:
    impls, baseline = impl_defaults()
    add_shape_arguments(p, SHAPES)
    p.add_argument("--impl", type=impl_list, default=None, help=impls.help)
    p.add_argument("--baseline", default=None, help=baseline.help)
    p.add_argument("--tokens", type=positive_int, default=None,
                   help="batch = tokens // seq_q for each query length (overrides --batch), e.g. 32768")
    p.add_argument("--out", default=None, help="capture folder (default reports/bench-<device>-<time>)")
    p.add_argument("--resume", action="store_true", help="keep the rows already in --out, measure the rest")
    add_rep_ms(p)
    add_rounds(p)
    add_cuda_graph(p)
    p.add_argument("--json", metavar="FILE", help="also write the ratio table as JSON to FILE")
    add_device(p)
    add_allow_mixed(p)


def impls_and_baseline(args, on_gpu: bool, notes: list[str]) -> tuple[list[str], str]:
    """--impl and --baseline, or their defaults for this device (a CPU default that differs from the
    GPU's is added to ``notes``). A list of the user's own takes the default baseline when it holds
    it, else its first name."""
    defaults, baseline = impl_defaults()
    impls = pick_default(args.impl, defaults.gpu, defaults.cpu, "impl", on_gpu, notes)
    if args.baseline is not None:
        return impls, args.baseline
    if args.impl is not None:
        default = baseline.gpu[0] if on_gpu else baseline.cpu[0]
        return impls, default if default in args.impl else args.impl[0]
    return impls, pick_default(None, baseline.gpu, baseline.cpu, "baseline", on_gpu, notes)[0]


def run(args) -> int:
    from profiler.measure.ceilings import device_name
    from profiler.registry import get_impl
    from profiler.store import to_frame
    from profiler.views.tables import bench_table

    join_ranks(args, args.device)
    on_gpu = args.device.startswith("cuda")
    grid = shape_grid(args, SHAPES, on_gpu, tokens=args.tokens)
    notes = list(grid.shrunk)
    names, baseline_given = impls_and_baseline(args, on_gpu, notes)
    try:
        baseline = get_impl(baseline_given).name
    except ValueError as err:
        raise UsageError(f"--baseline: {err}") from None
    if baseline not in names:
        raise UsageError(f"--baseline '{baseline_given}' must be one of --impl ({', '.join(names)})")
    if args.tokens is not None and args.tokens < max(grid.seqs_q):
        raise UsageError(f"--tokens {args.tokens} is below the longest query length ({max(grid.seqs_q)}): "
                         "batch = tokens // seq_q must be at least 1")
    shapes = grid.shapes()
    check_impl_dtypes(args.impl or (), grid.dtypes)
    check_fp8(grid.dtypes, grid.modes, args.device)
    timer = check_cuda_graph(args, grid.modes)
    label = device_name(args.device)
    impls = [get_impl(n) for n in names]
    names = [i.name for i in impls]
    store, roofs = start_capture(args, label, grid.dtypes, {
        "kind": "bench", "shapes": len(shapes), "impls": names, "baseline": baseline, "trace": "none",
        "defaults_shrunk": notes, "rep_ms": args.rep_ms, "rounds": args.rounds, "warmup_ms": args.warmup_ms,
        "flops_convention": "totals: 4·B·H·Nq·Nk·D, x0.5 causal, x2.5 bwd", **timer,
    }, impls=impls, head_dims=grid.dims, prefix="bench-")
    say_shrunk(notes)
    measure_with_progress(store, shapes, impls, args.device, roofs, args.rep_ms, ranks=args.ranks,
                          graph=args.cuda_graph, rounds=args.rounds, warmup_ms=args.warmup_ms)
    if args.ranks is not None and not args.ranks.main:
        return 0  # rank 0 merged the parts and prints for every rank
    copy_gbps = roofs.measured.copy_gbps if roofs.measured is not None else None
    table = bench_table(to_frame(store.rows), names, baseline, copy_gbps)
    clock = "torch.utils.benchmark" if not on_gpu else \
        "do_bench of CUDA-graph replays" if args.cuda_graph else "do_bench"
    if args.rounds > 1:
        clock += f", the median of {args.rounds} interleaved rounds"
    _print_bench(table, names, baseline, f"{label}: median {clock}, FLOPs = 4·B·H·Nq·Nkv·D (x0.5 causal, x2.5 bwd)")
    if args.rounds > 1:
        print_round_spread(to_frame(store.rows), names)
    for r in store.rows:
        if r["status"] != "ok" and r["impl"] in names and r["step"] == "total":
            console.print(f"{r['impl']} {r['mode']} {Shape.from_row(r).label}: {r['status']}: {r['message']}",
                          style="yellow", overflow="fold")
    if args.json:
        from profiler.store import write_json_atomic

        write_json_atomic(Path(args.json), {"device": label, "meta": store.meta,
                                            "rows": table.to_dict("records")})
    console.print(f"Results written to {store.folder}/ (results.parquet, meta.json).")
    dashboard_hint(store.folder)
    return 0


def _shape_columns(table) -> tuple[list[tuple[str, object]], str]:
    """The shape fields that differ between the rows, as (header, row -> cell) columns, and the
    ones every row shares, as one line for the title: a narrow table whose headers are not cut.
    The lengths always get a column (N when every row is square), so each row says what it is."""
    records = table.to_dict("records")
    square = all(r["seq_q"] == r["seq_kv"] for r in records)
    fields = [
        ("mode", lambda r: r["mode"], lambda v: v),
        ("dtype", lambda r: r["dtype"], lambda v: v),
        ("D", lambda r: str(r["head_dim"]), lambda v: f"D{v}"),
        ("causal", lambda r: "yes" if r["causal"] else "no", lambda v: "causal" if v == "yes" else "full"),
        *([("N", lambda r: str(r["seq_q"]), None)] if square else
          [("Nq", lambda r: str(r["seq_q"]), lambda v: f"Nq{v}"), ("Nkv", lambda r: str(r["seq_kv"]), None)]),
        ("B", lambda r: str(r["batch"]), lambda v: f"B{v}"),
        ("H/KV", lambda r: f"{r['heads']}/{r['kv_heads']}",
         lambda v: f"H{v.split('/')[0]}" + ("" if len(set(v.split("/"))) == 1 else f" KV{v.split('/')[1]}")),
    ]
    columns, shared = [], []
    for header, cell, as_title in fields:
        values = {cell(r) for r in records}
        if as_title is None or len(values) > 1:
            columns.append((header, cell))
        else:
            shared.append(as_title(values.pop()))
    return columns, " ".join(shared)


def _print_bench(table, impls: list[str], baseline: str, title: str) -> None:
    """TFLOP/s per implementation, or, where every shape is memory-bound by the model (decode), GB/s
    at the compulsory bytes with the fraction of the measured copy bandwidth; then, in a second
    table, the ratios. Shape fields every row shares go to the titles, so the tables stay narrow
    enough that no header is cut at 100 columns. Only rows with status ok have rates and ratios:
    the others print '-' (the lines below the tables say why)."""
    if table.empty:
        return
    peers = [n for n in impls if n != baseline]
    memory = bool((table["bound"] == "memory").all())
    metric = "GB/s (fraction of copy)" if memory else "TFLOP/s"
    columns, shared = _shape_columns(table)
    records = table.to_dict("records")
    console.print(title, soft_wrap=True)
    rates = Table(*[header for header, _ in columns], title=f"{metric}: {shared}")
    for n in impls:
        rates.add_column(n, overflow="fold")
    for r in records:
        if memory:
            cells = [fmt(r[f"{n}_gbps"], ",.0f")
                     + ("" if r[f"{n}_copy_fraction"] is None else f" ({r[f'{n}_copy_fraction']:.2f})")
                     for n in impls]
        else:
            cells = [fmt(r[f"{n}_tflops"], ".4g") for n in impls]
        rates.add_row(*[cell(r) for _, cell in columns], *cells)
    console.print(rates)
    if not peers:
        return
    ratios = Table(*[header for header, _ in columns],
                   title=f"Ratios {baseline} / peer, above 1: {baseline} faster ({shared})")
    for n in peers:
        ratios.add_column(ratio_header(baseline, n), overflow="fold")
    for r in records:
        ratios.add_row(*[cell(r) for _, cell in columns], *[fmt(r[f"{baseline}/{n}"], ".2f") for n in peers])
    console.print(ratios)
    for n in peers:
        values = table[f"{baseline}/{n}"].dropna()
        if len(values):
            worst = table.loc[values.idxmin()]
            # three decimals: a target such as 0.97 is not to be met by rounding (0.966 printed as 0.97)
            console.print(f"{baseline}/{n}: lowest {values.min():.3f} ({shape_words(worst)}), "
                          f"highest {values.max():.3f}, {int((values >= 1).sum())} of {len(values)} at or above 1.0")


def ratio_header(baseline: str, peer: str) -> str:
    """A ratio column's header on two lines, each a whole name, so a narrow column wraps it there."""
    return f"{baseline}/\n{peer}"
