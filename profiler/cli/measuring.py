"""``bench`` (ours beside the peers, with ratios) and ``demo`` (every implementation once)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from attention_core.shape import Shape
from profiler.cli import UsageError, check_cuda_graph, lengths
from profiler.cli.console import (
    case_line,
    console,
    dashboard_hint,
    fmt,
    measure_with_progress,
    pick_default,
    say_shrunk,
    start_capture,
)

# --------------------------------------------------------------------------------------------- bench

# bench's defaults, (GPU, CPU) per option. On a GPU: the seed benchmark, our kernel against SDPA's
# FlashAttention-2 and cuDNN backends. On a CPU a shape that runs in seconds, and implementations
# that run there: our Triton kernel needs a GPU (or the interpreter, which is for tests: far too
# slow to time), and SDPA's cuDNN and efficient backends need CUDA. The baseline is sdpa_flash,
# PyTorch's fused FlashAttention-style CPU kernel, the nearest native peer of ours there; its ratios
# to naive (four steps through memory) and SDPA's unfused math backend show what fusing buys.
BENCH_DEFAULTS = {
    "seq": ([8192], [1024]),
    "batch": ([4], [1]),
    "heads": ([32], [2]),
    "dim": ([64], [64]),
    "dtype": (["fp16"], ["fp32"]),
    "impl": (["triton_flash", "sdpa_flash", "sdpa_cudnn"], ["sdpa_flash", "naive", "sdpa_math"]),
    "baseline": (["triton_flash"], ["sdpa_flash"]),
}


def _resolve_bench_args(args) -> list[str]:
    """Fill the options left unset from BENCH_DEFAULTS for this device (``args`` in place); the
    notes on what was shrunk. With --tokens the batch follows from it and has no default."""
    on_gpu = args.device.startswith("cuda")
    notes: list[str] = []
    own_impls = args.impl is not None
    for name, (gpu, cpu) in BENCH_DEFAULTS.items():
        if name == "batch" and args.tokens is not None:
            continue
        if name == "baseline" and args.baseline is None and own_impls:
            # the user's own list: the default baseline when it is in the list, else the first named
            default = gpu if on_gpu else cpu
            args.baseline = default[0] if default[0] in args.impl else args.impl[0]
            continue
        value = pick_default(getattr(args, name), gpu, cpu, name, on_gpu, notes)
        setattr(args, name, value[0] if name == "baseline" else value)
    return notes


def bench(args) -> int:
    """Our kernels beside PyTorch's, over a grid of shapes, into a capture folder; prints TFLOP/s
    and the ratio of the baseline (ours) to each peer."""
    from profiler.measure.ceilings import device_name
    from profiler.registry import get_impl
    from profiler.store import to_frame
    from profiler.views.tables import bench_table

    notes = _resolve_bench_args(args)
    try:
        baseline = get_impl(args.baseline).name
    except ValueError as err:
        raise UsageError(f"--baseline: {err}") from None
    if baseline not in args.impl:
        raise UsageError(f"--baseline '{args.baseline}' must be one of --impl ({', '.join(args.impl)})")
    seqs_q, seqs_kv = lengths(args, args.seq)
    if args.tokens is not None and args.tokens < max(seqs_q):
        raise UsageError(f"--tokens {args.tokens} is below the longest query length ({max(seqs_q)}): "
                         "batch = tokens // seq_q must be at least 1")
    pairs = [(n, n) for n in seqs_q] if seqs_kv is None else list(itertools.product(seqs_q, seqs_kv))
    try:
        shapes = [
            Shape(b, h, nq, nk, d, dt, c, m, kvh)
            for m, dt, d, c, (nq, nk) in itertools.product(args.mode, args.dtype, args.dim, args.causal, pairs)
            for b in ([args.tokens // nq] if args.tokens else args.batch)
            for h in args.heads
            for kvh in args.kv_heads or [None]
        ]
    except ValueError as err:
        raise UsageError(str(err)) from None
    timer = check_cuda_graph(args, args.mode)
    label = device_name(args.device)
    impls = [get_impl(n) for n in args.impl]
    names = [i.name for i in impls]
    store, roofs = start_capture(args, label, args.dtype, {
        "kind": "bench", "shapes": len(shapes), "impls": names, "baseline": baseline, "trace": "none",
        "defaults_shrunk": notes, "rep_ms": args.rep_ms,
        "flops_convention": "totals: 4·B·H·Nq·Nk·D, x0.5 causal, x2.5 bwd", **timer,
    }, impls=impls, head_dims=args.dim, prefix="bench-")
    say_shrunk(notes)
    measure_with_progress(store, shapes, impls, args.device, roofs, args.rep_ms, ranks=args.ranks,
                          graph=args.cuda_graph)
    if args.ranks is not None and not args.ranks.main:
        return 0  # rank 0 merged the parts and prints for every rank
    copy_gbps = roofs.measured.copy_gbps if roofs.measured is not None else None
    table = bench_table(to_frame(store.rows), names, baseline, copy_gbps)
    clock = "torch.utils.benchmark" if not args.device.startswith("cuda") else \
        "do_bench of CUDA-graph replays" if args.cuda_graph else "do_bench"
    _print_bench(table, names, baseline, f"{label}: median {clock}, FLOPs = 4·B·H·Nq·Nkv·D (x0.5 causal, x2.5 bwd)")
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
            console.print(f"{baseline}/{n}: lowest {values.min():.2f} ({worst['mode']} {worst['dtype']} "
                          f"D{worst['head_dim']} Nq{worst['seq_q']} Nkv{worst['seq_kv']} B{worst['batch']}"
                          f"{' causal' if worst['causal'] else ''}), "
                          f"highest {values.max():.2f}, {int((values >= 1).sum())} of {len(values)} at or above 1.0")


def ratio_header(baseline: str, peer: str) -> str:
    """A ratio column's header on two lines, each a whole name, so a narrow column wraps it there."""
    return f"{baseline}/\n{peer}"


# ---------------------------------------------------------------------------------------------- demo


def demo(args) -> int:
    """Every implementation once at a size that suits the machine, with its error and speed."""
    from profiler.measure.runner import run_case
    from profiler.registry import BUILTIN, REGISTRY

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
    naive_ms = next((r.timing.median_ms for r in results if r.impl == "naive" and r.status == "ok" and r.timing), None)
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
