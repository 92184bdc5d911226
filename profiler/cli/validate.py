"""``validate``: DRAM and L2 bytes and tensor-core FLOPs read by Nsight Compute, per kernel, against
the cost model (profiler.nsight.validate), into a capture folder; ``--rebuild`` re-reads a stored
validation's ncu/*.csv with the current model, no GPU needed."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from profiler.cli import UsageError
from profiler.cli.console import console, fmt, join_ranks, start_capture
from profiler.cli.options import impl_list
from profiler.cli.shapes import Default, ShapeOptions, add_shape_arguments, shape_grid

HELP = "DRAM/L2 bytes and tensor FLOPs from Nsight Compute vs the model"

# Two lengths, two head_dims, both half-precision dtypes, causal and not: each shape is one Nsight
# Compute run of every implementation, minutes each. --mode fwd (default), bwd or both as
# fwd,bwd: a profiled run is one pass, so not fwd+bwd.
SHAPES = ShapeOptions(
    lists=True,
    seq=Default(None, [1024, 4096]),
    batch=Default(None, [1]),
    heads=Default("default 16", [16]),
    dim=Default("head_dim(s) (default 64,128)", [64, 128]),
    dtype=Default(None, ["fp16", "bf16"]),
    causal=Default("true, false or both", [False, True]),
    mode=Default("fwd, bwd or fwd,bwd: the pass Nsight Compute profiles (default fwd)", ["fwd"]),
    dtypes=("fp16", "bf16"),
    one_batch=True,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from profiler.registry import VALIDATE, default_impls

    add_shape_arguments(p, SHAPES)
    p.add_argument("--impl", type=impl_list, default=default_impls(VALIDATE))
    p.add_argument("--out", default=None, help="capture folder (default reports/validate-<device>-<time>)")
    p.add_argument("--rebuild", metavar="FOLDER", default=None,
                   help="no GPU: re-read FOLDER's ncu/*.csv and compare them with the current model, into "
                        "--out (default FOLDER-rebuilt-<time>)")
    p.add_argument("--in-place", action="store_true", help="with --rebuild: rewrite FOLDER's own tables")


def run(args) -> int:
    import torch

    if not args.rebuild:  # under torchrun each rank profiles on its own GPU
        join_ranks(args, "cuda")
    grid = shape_grid(args, SHAPES)
    if "fwd+bwd" in grid.modes:
        raise UsageError("validate --mode takes fwd and bwd (Nsight Compute profiles one pass at a time), "
                         "not 'fwd+bwd'")
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
    shapes = grid.shapes()
    impls = [get_impl(n) for n in args.impl]
    # validate takes no --device: the GPU is "cuda", or under torchrun this rank's own (join_ranks)
    args.device = getattr(args, "device", None) or "cuda"
    label = device_name(args.device)
    store, roofs = start_capture(args, label, ("fp16", "bf16", "fp32"), {"kind": "validate", "impls": args.impl},
                                 impls=impls, head_dims=grid.dims, resumable=False, prefix="validate-")
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
        from profiler.store import NCU

        distributed.barrier()  # every rank's CSVs are written
        distributed.collect_files(ranks, store.folder, f"{NCU}/*.csv")  # from hosts that do not share the folder
        distributed.barrier()
        distributed.release_view(ranks, store.folder, (f"{NCU}/*.csv",))
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
    out = Table("impl", "step", "mode", "N", "D", "dtype", "causal", "DRAM MB (ncu)", "model", "ratio", "L2 MB (ncu)",
                "L2 model", "ratio", "L2 reads ratio", "tensor GFLOP (ncu)", "model", "ratio",
                title="Nsight Compute vs the cost model (DRAM and L2 bytes, tensor-core FLOPs)")
    for r in table.itertuples():
        out.add_row(r.impl, r.step, r.mode, str(r.seq_q), str(r.head_dim), r.dtype, str(r.causal),
                    f"{r.dram_bytes / 1e6:,.1f}", f"{r.model_dram_bytes / 1e6:,.1f}", fmt(r.dram_ratio, ".3f"),
                    f"{r.l2_bytes / 1e6:,.1f}", f"{r.model_l2_bytes / 1e6:,.1f}", fmt(r.l2_ratio, ".3f"),
                    fmt(getattr(r, "l2_read_ratio", float("nan")), ".3f"),
                    f"{r.tensor_flops / 1e9:,.2f}", f"{r.model_tensor_flops / 1e9:,.2f}",
                    fmt(r.tensor_flops_ratio, ".3f"))
    console.print(out)
