"""``capture`` and ``sweep`` (measure into a capture folder) and ``report`` (its HTML page)."""

from __future__ import annotations

from rich.table import Table

from profiler.cli import UsageError, check_cuda_graph, lengths
from profiler.cli.console import (
    console,
    dashboard_hint,
    fmt,
    measure_with_progress,
    pick_default,
    say_shrunk,
    start_capture,
)

# ------------------------------------------------------------------------------------ capture, sweep


def _resolve_capture_args(args, lists: bool) -> tuple[dict, list[str]]:
    """Fill defaults: the seed benchmark (B4 H32 D64 fp16) on a GPU; on a CPU, sizes that fit and
    finish in minutes (B1 H2 fp32). Returns the values and notes on what was shrunk."""
    on_gpu = args.device.startswith("cuda")
    notes: list[str] = []

    def pick(value, gpu_default: list, cpu_default: list, name: str) -> list:
        return pick_default(value, gpu_default, cpu_default, name, on_gpu, notes)

    values = {
        "seqs": pick(args.seq, [512, 1024, 2048, 4096, 8192, 16384] if lists else [8192],
                     [256, 512, 1024] if lists else [8192], "seq"),
        "batches": pick(args.batch, [4], [1], "batch"),
        "heads": pick(args.heads, [32], [2], "heads"),
        "dims": pick(args.dim, [64], [64], "head_dim"),
        "dtypes": pick(args.dtype, ["fp16"], ["fp32"], "dtype"),
        "causals": args.causal if lists else [args.causal],
        "modes": args.mode if lists else [args.mode],
    }
    values["seqs"], values["seqs_kv"] = lengths(args, values["seqs"])
    kv_heads = args.kv_heads
    values["kv_heads"] = None if kv_heads is None else kv_heads if isinstance(kv_heads, list) else [kv_heads]
    return values, notes


def _run_capture_command(args, lists: bool) -> int:
    from profiler.measure.cases import shapes_of
    from profiler.measure.ceilings import device_name
    from profiler.registry import BUILTIN, get_impl
    from profiler.views.tables import summary_frame

    values, notes = _resolve_capture_args(args, lists)
    try:
        shapes = shapes_of(values["batches"], values["heads"], values["seqs"], values["dims"], values["dtypes"],
                           values["causals"], values["modes"], values["seqs_kv"], values["kv_heads"])
    except ValueError as err:
        raise UsageError(str(err)) from None
    impls = [get_impl(n) for n in (args.impl or BUILTIN)]
    timer = check_cuda_graph(args, values["modes"])
    label = device_name(args.device)
    trace = args.trace or ("torch" if args.device.startswith("cuda") else "none")
    seqs = values["seqs"]
    # A capture traces each implementation at its shape; a sweep only at its middle sequence length
    # and its first dtype, head_dim, causal setting and mode, so the folder stays a few MB.
    traced = None
    if trace == "torch":
        traced = (seqs[len(seqs) // 2], values["dtypes"][0], values["dims"][0], values["causals"][0],
                  values["modes"][0])
    store, roofs = start_capture(args, label, values["dtypes"], {
        "kind": "sweep" if lists else "capture", "shapes": len(shapes), "impls": [i.name for i in impls],
        "trace": trace, "defaults_shrunk": notes, "rep_ms": args.rep_ms,
        "flops_convention": "totals: 4·B·H·Nq·Nk·D, x0.5 causal, x2.5 bwd; naive steps: profiler.model.naive",
        **timer}, impls=impls, head_dims=values["dims"])
    say_shrunk(notes)
    if roofs.datasheet is None:
        console.print(f"'{label}' is not in the datasheet table: rows are judged against measured ceilings only.")
    rows = measure_with_progress(store, shapes, impls, args.device, roofs, args.rep_ms,
                                 trace_filter=None if traced is None else
                                 (lambda s: (s.seq_q, s.dtype, s.head_dim, s.causal, s.mode) == traced),
                                 ranks=args.ranks, graph=args.cuda_graph)
    if args.ranks is not None and not args.ranks.main:
        return 0  # rank 0 merged the parts and prints for every rank
    folder = store.folder
    _print_summary(summary_frame(store.rows if args.resume or args.ranks is not None else rows))
    console.print(f"Capture written to {folder}/ (results.parquet, meta.json"
                  f"{', kernels.parquet, traces/' if traced else ''}).")
    dashboard_hint(folder)
    return 0


def _print_summary(frame) -> None:
    """One table per shape. Rows whose status is not ok print '-' for times, rates and bound (a
    'wrong' row's time is in results.parquet, but it is no point on the roofline); the error
    against naive fp32 attention is shown for every row that has one. Each message is printed
    whole below its table, where it has the console's width."""
    from profiler.views.tables import SUMMARY_SHAPE

    if frame.empty:
        return
    from attention_core.shape import Shape

    for key, group in frame.groupby(SUMMARY_SHAPE, sort=False):
        mode, dtype, d, causal, b, h, kvh, n, nk = key
        shape = Shape(int(b), int(h), int(n), int(nk), int(d), dtype, bool(causal), mode, int(kvh))
        table = Table(title=f"{shape.label} {'' if causal else 'full '}{mode}")
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


def capture(args) -> int:
    return _run_capture_command(args, lists=False)


def sweep(args) -> int:
    return _run_capture_command(args, lists=True)


# -------------------------------------------------------------------------------------------- report


def report(args) -> int:
    from profiler.store import CaptureError
    from profiler.views.report import write_report

    try:
        out = write_report(args.capture, args.out, family=args.family)
    except CaptureError as err:
        raise UsageError(str(err)) from None
    except OSError as err:
        raise UsageError(f"cannot write the report to '{err.filename or args.out}': {err.strerror or err}") from None
    console.print(f"Wrote {out} ({out.stat().st_size / 1e6:.1f} MB, opens offline)")
    return 0
