"""``bench`` (ours beside the peers, with ratios) and ``demo`` (every implementation once)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from rich.progress import Progress
from rich.table import Table

from profiler.cli import UsageError, check_cuda_graph, lengths
from profiler.cli.console import console, fmt, measure_with_progress, start_capture
from profiler.model import cost_model as cm

# --------------------------------------------------------------------------------------------- bench


def bench(args) -> int:
    """Our kernels beside PyTorch's, over a grid of shapes, into a capture folder; prints TFLOP/s
    and the ratio of the baseline (ours) to each peer."""
    from kernels.registry import get_impl
    from profiler.measure.ceilings import device_name
    from profiler.store import to_frame
    from profiler.views.tables import bench_table

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
            cm.Shape(b, h, nq, nk, d, dt, c, m, kvh)
            for m, dt, d, c, (nq, nk) in itertools.product(args.mode, args.dtype, args.dim or [64], args.causal, pairs)
            for b in ([args.tokens // nq] if args.tokens else args.batch)
            for h in args.heads or [32]
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
        "rep_ms": args.rep_ms, "flops_convention": "totals: 4·B·H·Nq·Nk·D, x0.5 causal, x2.5 bwd", **timer,
    }, impls=impls, head_dims=args.dim or [64], prefix="bench-")
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
        if r["status"] != "ok" and r["impl"] in names:
            console.print(f"[yellow]{r['impl']} {r['mode']} {cm.Shape.from_row(r).label}: {r['status']}: "
                          f"{r['message']}")
    if args.json:
        from profiler.store import write_json_atomic

        write_json_atomic(Path(args.json), {"device": label, "meta": store.meta,
                                            "rows": table.to_dict("records")})
    console.print(f"Results written to {store.folder}/ (results.parquet, meta.json).")
    return 0


def _print_bench(table, impls: list[str], baseline: str, title: str) -> None:
    """TFLOP/s per implementation, or, where every shape is memory-bound by the model (decode), GB/s
    at the compulsory bytes with the fraction of the measured copy bandwidth; then the ratios."""
    if table.empty:
        return
    peers = [n for n in impls if n != baseline]
    memory = bool((table["bound"] == "memory").all())
    metric = "GB/s (of copy)" if memory else "TFLOP/s"
    out = Table("mode", "dtype", "D", "causal", "Nq", "Nkv", "B×H/KV", *[f"{n} {metric}" for n in impls],
                *[f"{baseline}/{n}" for n in peers], title=title)
    for r in table.to_dict("records"):
        if memory:
            cells = [fmt(r[f"{n}_gbps"], ",.0f", r[f"{n}_status"])
                     + ("" if r[f"{n}_copy_fraction"] is None else f" ({r[f'{n}_copy_fraction']:.2f})")
                     for n in impls]
        else:
            cells = [fmt(r[f"{n}_tflops"], ".4g", r[f"{n}_status"]) for n in impls]
        out.add_row(r["mode"], r["dtype"], str(r["head_dim"]), "yes" if r["causal"] else "no", str(r["seq_q"]),
                    str(r["seq_kv"]), f"{r['batch']}×{r['heads']}/{r['kv_heads']}", *cells,
                    *[fmt(r[f"{baseline}/{n}"], ".2f") for n in peers])
    console.print(out)
    for n in peers:
        ratios = table[f"{baseline}/{n}"].dropna()
        if len(ratios):
            worst = table.loc[ratios.idxmin()]
            console.print(f"{baseline}/{n}: lowest {ratios.min():.2f} ({worst['mode']} {worst['dtype']} "
                          f"D{worst['head_dim']} Nq{worst['seq_q']} Nkv{worst['seq_kv']} B{worst['batch']}"
                          f"{' causal' if worst['causal'] else ''}), "
                          f"highest {ratios.max():.2f}, {int((ratios >= 1).sum())} of {len(ratios)} at or above 1.0")


# ---------------------------------------------------------------------------------------------- demo


def demo(args) -> int:
    """Every implementation once at a size that suits the machine, with its error and speed."""
    from kernels.registry import BUILTIN, REGISTRY
    from profiler.measure.runner import run_case

    on_gpu = args.device.startswith("cuda")
    # The seed posts' benchmark shape on a GPU; on a CPU a size that runs in seconds.
    shape = cm.Shape(4, 32, 4096, 4096, 64, "fp16") if on_gpu else cm.Shape(1, 4, 512, 512, 64, "fp32")
    results = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("demo", total=len(BUILTIN))
        for impl in (REGISTRY[name] for name in BUILTIN):
            progress.update(task, description=f"running {impl.name}")
            results.append(run_case(impl, shape, args.device, rep_ms=50 if on_gpu else 200))
            progress.advance(task)
    naive_ms = next((r.timing.median_ms for r in results if r.impl == "naive" and r.timing), None)
    table = Table("impl", "ms", "TFLOP/s", "speedup vs naive", "max rel err vs fp32", "peak MiB", "status",
                  title=f"B={shape.batch} H={shape.heads} N={shape.seq_q} D={shape.head_dim} {shape.dtype} "
                        f"forward on {args.device}")
    for r in results:
        ms = r.timing.median_ms if r.timing else None
        table.add_row(r.impl, fmt(ms, ".3f"), fmt(r.tflops, ".2f"),
                      fmt(naive_ms / ms if ms and naive_ms else None, ".1f"), fmt(r.max_rel_err, ".1e"),
                      fmt(r.peak_mem_bytes / 2**20 if r.peak_mem_bytes else None, ".0f"),
                      r.status if r.status == "ok" else f"{r.status}: {r.message}")
    console.print(table)
    if not on_gpu and os.environ.get("TRITON_INTERPRET") != "1":
        console.print("Triton kernels need a GPU; set TRITON_INTERPRET=1 to run them (slowly) on the CPU.")
    return 0
