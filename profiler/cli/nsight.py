"""``nsys`` (Nsight Systems exports) and ``validate`` (Nsight Compute counters against the model)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from attention_core.shape import Shape
from profiler.cli import UsageError
from profiler.cli.console import console, fmt, start_capture

# ---------------------------------------------------------------------------------------------- nsys


def nsys(args) -> int:
    from profiler.nsight import nsys as nsys_export

    if args.nsys_command == "summarize":
        try:
            _, _, projection = nsys_export.read_export(args.export)
        except nsys_export.NsysExportError as err:
            raise UsageError(str(err)) from None
        table = nsys_export.summarize(projection)
        if args.json:
            print(json.dumps(table.to_dict("records"), indent=2, default=int))
            return 0
        if table.empty:
            console.print(f"{args.export}: no NVTX ranges in this export (was it captured with `-t nvtx`?)")
            return 0
        out = Table("range", "instances", "GPU proj ns (total)", "GPU proj median ns", "range ns (total)",
                    "GPU ops", "kernels", title=f"{args.export}: GPU time projected onto NVTX ranges")
        for r in table.itertuples():
            out.add_row(r.range, f"{r.instances:,}", f"{r.gpu_proj_ns:,}", f"{r.gpu_proj_median_ns:,.0f}",
                        f"{r.range_ns:,}", f"{r.gpu_ops:,}", f"{r.kernels:,}")
        console.print(out)
        return 0
    return _nsys_ingest(Path(args.capture))


def _nsys_ingest(folder: Path) -> int:
    from profiler.nsight import nsys as nsys_export
    from profiler.store import CaptureError

    try:
        results = nsys_export.ingest_capture(folder)
    except (CaptureError, nsys_export.NsysExportError) as err:
        raise UsageError(str(err)) from None
    joined = results[results.nsys_gpu_ms.notna()]
    table = Table("impl", "step", "mode", "N", "CUDA events ms", "nsys GPU ms", "nsys / events",
                  title=f"{folder}: CUDA-event median vs Nsight Systems median projected GPU time per repetition")
    for r in joined.itertuples():
        table.add_row(r.impl, r.step, r.mode, str(r.seq_q), f"{r.time_ms:.4f}", f"{r.nsys_gpu_ms:.4f}",
                      f"{r.nsys_gpu_ms / r.time_ms:.3f}")
    console.print(table)
    console.print(f"Wrote nsys_ranges.parquet, nsys_gpu_ops.parquet and results.parquet's nsys_gpu_ms in {folder}/")
    return 0


# ------------------------------------------------------------------------------------------ validate


def validate(args) -> int:
    import torch

    if args.rebuild:
        return _validate_rebuild(args)
    from profiler.measure.ceilings import device_name
    from profiler.nsight.ncu import NcuError, find_ncu
    from profiler.nsight.validate import measure_counters, write_validation
    from profiler.registry import get_impl

    if not torch.cuda.is_available():
        raise UsageError("validate needs a CUDA GPU: Nsight Compute reads its hardware counters")
    try:
        find_ncu()
    except NcuError as err:
        raise UsageError(str(err)) from None
    from profiler.cli import lengths

    seqs_q, seqs_kv = lengths(args, args.seq)
    pairs = [(n, n) for n in seqs_q] if seqs_kv is None else [(nq, nk) for nq in seqs_q for nk in seqs_kv]
    try:
        shapes = [Shape(args.batch, h, nq, nk, d, dt, c, kv_heads=kvh) for dt in args.dtype
                  for d in args.dim or [64, 128] for c in args.causal for h in args.heads or [16]
                  for kvh in args.kv_heads or [None] for nq, nk in pairs]
    except ValueError as err:
        raise UsageError(str(err)) from None
    impls = [get_impl(n) for n in args.impl]
    # validate takes no --device: the GPU is "cuda", or under torchrun this rank's own (profiler.cli.main)
    args.device = getattr(args, "device", None) or "cuda"
    label = device_name(args.device)
    store, roofs = start_capture(args, label, ("fp16", "bf16", "fp32"), {"kind": "validate", "impls": args.impl},
                                 impls=impls, head_dims=args.dim or [64, 128], resumable=False,
                                 prefix="validate-")
    ranks, gpu = args.ranks, None
    if ranks is not None:  # each rank profiles its share of the shapes on its own GPU
        from profiler.measure import distributed

        costs = [sum(distributed.predicted_seconds(i, s, roofs, 0) for i in impls) for s in shapes]
        shapes = [shapes[i] for i in distributed.share(ranks, shapes, costs).mine]
        gpu = torch.cuda.current_device()
    shown = ranks is None or ranks.main
    started = 0
    with Progress(console=console, transient=True, disable=not shown or not console.is_terminal) as progress:
        task = progress.add_task("ncu", total=len(shapes))

        def advance(description):
            nonlocal started
            started += 1
            progress.update(task, description=escape(description))
            progress.advance(task)
            if shown and not console.is_terminal:  # a log: each Nsight Compute run (minutes) as it starts
                console.print(f"[{started}/{len(shapes)}] {description} ...", soft_wrap=True)
                console.file.flush()

        try:
            # the driver runs in another process: a user's implementation travels as its module:function
            measure_counters(shapes, [i.spec or i.name for i in impls], store.folder, progress=advance, gpu=gpu)
        except NcuError as err:
            raise UsageError(str(err)) from None
    if ranks is not None:
        from profiler.measure import distributed

        distributed.barrier()  # every rank's CSVs are written
        if not ranks.main:
            return 0
    try:
        table = write_validation(store.folder, store.meta)
    except NcuError as err:  # e.g. a profiled run that launched no kernel
        raise UsageError(str(err)) from None
    _print_validation(table)
    console.print(f"Wrote {store.folder}/ (validation.parquet, ncu_kernels.parquet, ncu/*.csv, results.parquet)")
    return 0


def _validate_rebuild(args) -> int:
    """Re-read the ncu CSVs of a validation capture and write its tables with the current model:
    into a copy (--out, default <folder>-rebuilt-<time>, which git ignores), or with --in-place
    into the folder itself."""
    from profiler.measure.folder import FolderError, check_folder
    from profiler.nsight.ncu import NcuError
    from profiler.nsight.validate import rebuild_capture
    from profiler.store import CaptureError

    folder = Path(args.rebuild)
    if args.in_place and args.out:
        raise UsageError("--in-place and --out exclude each other: rewrite the folder, or write a copy")
    out = folder if args.in_place else Path(args.out or f"{folder}-rebuilt-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        if not args.in_place:
            check_folder(out, resumable=False)
        table = rebuild_capture(folder, out)
    except (FolderError, CaptureError, NcuError, ValueError) as err:
        raise UsageError(str(err)) from None
    _print_validation(table)
    console.print(f"Wrote {out}/ (validation.parquet, ncu_kernels.parquet, results.parquet, meta.json)")
    return 0


def _print_validation(table) -> None:
    out = Table("impl", "step", "N", "D", "dtype", "causal", "DRAM MB (ncu)", "model", "ratio", "L2 MB (ncu)",
                "L2 model", "ratio", "tensor GFLOP (ncu)", "model", "ratio",
                title="Nsight Compute vs the cost model (DRAM and L2 bytes, tensor-core FLOPs)")
    for r in table.itertuples():
        out.add_row(r.impl, r.step, str(r.seq_q), str(r.head_dim), r.dtype, str(r.causal),
                    f"{r.dram_bytes / 1e6:,.1f}", f"{r.model_dram_bytes / 1e6:,.1f}", fmt(r.dram_ratio, ".3f"),
                    f"{r.l2_bytes / 1e6:,.1f}", f"{r.model_l2_bytes / 1e6:,.1f}", fmt(r.l2_ratio, ".3f"),
                    f"{r.tensor_flops / 1e9:,.2f}", f"{r.model_tensor_flops / 1e9:,.2f}",
                    fmt(r.tensor_flops_ratio, ".3f"))
    console.print(out)
