"""``model``: FLOPs, HBM bytes, arithmetic intensity and the roof per step of each implementation at one
shape, from the cost model and a GPU's datasheet (profiler.model); no GPU needed."""

from __future__ import annotations

import argparse
import json
import math
import re

from rich.table import Table

from attention_core import split_kv
from attention_core.shape import TENSOR_DTYPES
from profiler.cli import UsageError
from profiler.cli.console import console, fmt
from profiler.cli.options import check_fp8, impl_list
from profiler.cli.shapes import Default, ShapeOptions, add_shape_arguments, shape_grid
from profiler.model import hardware
from profiler.model.cost import kernel_path as path_of_row
from profiler.model.fused import SPLIT_TAIL_PATH
from profiler.model.roofs import exp_ceiling, ridge_point

HELP = "FLOPs, bytes and intensity per step from the cost model (no GPU)"

SHAPES = ShapeOptions(
    lists=False,
    seq=Default("sequence length", [4096]),
    batch=Default("batch size (default 4)", [4]),
    heads=Default("query heads (default 32)", [32]),
    dim=Default("head_dim (default 64)", [64]),
    dtype=Default(None, ["fp16"]),
    causal=Default(None, [False]),
    mode=Default(None, ["fwd"]),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_shape_arguments(p, SHAPES)
    p.add_argument("--device-name", dest="device_name", default="H100-SXM",
                   help="a GPU from the datasheet table (see --list-devices) or a name as torch prints it")
    p.add_argument("--list-devices", action="store_true", help="print the datasheet table and exit")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    p.add_argument("--impl", type=impl_list, default=None, help="comma-separated names (default: all of ours)")
    p.add_argument("--path", type=kernel_path, default=None,
                   help="the kernel path to cost, as a capture's path column names it: 'gluon-ws' (the sm_90 Gluon "
                        "kernels' tiles), 'gluon-ws split-tail AxS' (and the forward's tail cut in chunks), "
                        "'split-kv xS', 'X fwd, Y bwd', or 'auto': the path our kernels take on --device-name for "
                        "this shape (default: the portable kernels'); implementations with one path ignore it")


# A row's path (profiler.store SCHEMA "path"): a forward's, or 'X fwd, Y bwd' where both passes ran
_PASS = rf"(?:tiled|gluon-ws(?: {SPLIT_TAIL_PATH.pattern})?|split-kv x\d+)"
_PATH = re.compile(rf"{_PASS}(?: fwd, (?:tiled|gluon-ws) bwd)?")


def kernel_path(text: str) -> str:
    """``--path``: a path as the store's ``path`` column writes it, or 'auto', or argparse's error naming what is
    allowed (a cut tail of at least one tile in at least two chunks: kernels.tile_schedule.split_tail)."""
    if text != "auto" and not _PATH.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a kernel path: tiled, gluon-ws, 'gluon-ws split-tail AxS', 'split-kv xS', "
            "'X fwd, Y bwd' with Y tiled or gluon-ws, or auto")
    cut = SPLIT_TAIL_PATH.search(text)
    if cut and (int(cut[1]) < 1 or int(cut[2]) < 2):
        raise argparse.ArgumentTypeError(f"'{cut[0]}': a cut tail is A >= 1 tiles in S >= 2 chunks each")
    return text


def check_path(path: str, shape) -> None:
    """A path the forward takes for this shape: it cuts its last wave only without a mask, in fp16 or bf16
    (kernels.flash_fwd_hopper._cut), so a split-tail path with a causal mask or fp8 is refused; and a split-KV path
    names the splits of the shape's own plan (attention_core.split_kv.plan, which the model costs whatever the path
    says)."""
    if SPLIT_TAIL_PATH.search(path) and (shape.causal or shape.dtype not in ("fp16", "bf16")):
        raise UsageError(f"--path '{path}': the forward cuts its last wave only without a mask, in fp16 or bf16 "
                         f"(here {'causal' if shape.causal else 'no mask'}, {shape.dtype})")
    named = re.search(r"split-kv x(\d+)", path)
    if named:
        plan = split_kv.plan(shape.batch, shape.kv_heads, shape.group, shape.seq_q, shape.seq_kv)
        if plan is None or plan.splits != int(named[1]):
            raise UsageError(f"--path '{path}': this shape's split-KV plan is "
                             f"{plan.label if plan else 'none (it runs whole tiles)'}")


def planned_path(shape, device: hardware.Device) -> str:
    """The path our kernels take for ``shape`` on ``device`` (its compute capability and SM count, from the datasheet
    table), as a capture's ``path`` column would name it: kernels.flash_fwd.planned_forward_path and
    kernels.flash_bwd.planned_backward_path, joined by profiler.model.cost.kernel_path."""
    from kernels.flash_bwd import planned_backward_path
    from kernels.flash_fwd import planned_forward_path
    from profiler.registry import get_impl

    if shape.dtype not in ("fp16", "bf16"):  # the fp8 forward has paths of its own (kernels.flash_fwd_fp8)
        raise UsageError(f"--path auto plans our fp16 and bf16 kernels, not {shape.dtype}: name a path instead")
    # the SM count sets where an sm_90 forward cuts its last wave (kernels.flash_fwd_hopper.planned_cut)
    missing = [what for what, value in (("compute capability", device.compute_capability),
                                         ("SM count", device.sm_count if device.compute_capability == (9, 0) else 0))
               if value is None]
    if missing:
        raise UsageError(f"--path auto needs {device.name}'s {' and '.join(missing)}, which the datasheet table lacks; "
                         "name a path instead (tiled, gluon-ws, ...)")
    return path_of_row(get_impl("triton_flash").costing, shape,
                       forward=planned_forward_path(shape, device.compute_capability, device.sm_count),
                       backward=planned_backward_path(shape, device.compute_capability))


def run(args) -> int:
    from profiler.registry import BUILTIN, get_impl
    from profiler.views.tables import model_table

    grid = shape_grid(args, SHAPES)
    if args.list_devices:
        table = Table("device", "fp16/bf16 TFLOP/s", "fp8 TFLOP/s", "fp32 TFLOP/s", "HBM TB/s", "L2 MB", "SMs",
                      "ridge fp16")
        for d in hardware.DEVICES.values():
            table.add_row(d.name, fmt(d.tensor_tflops["fp16"]), fmt(d.tensor_tflops.get("fp8"), ",.0f"),
                          fmt(d.fp32_tflops), fmt(d.hbm_tbps),
                          fmt(d.l2_bytes / 1e6 if d.l2_bytes else None), fmt(d.sm_count),
                          fmt(ridge_point(d.peak_flops("fp16"), d.hbm_bytes_per_s), ".0f"))
        console.print(table)
        return 0
    device = hardware.lookup(args.device_name)
    if device is None:
        raise UsageError(f"unknown --device-name '{args.device_name}'; known: {', '.join(hardware.DEVICES)}")
    (shape,) = grid.shapes()
    try:
        peak, bw = device.peak_flops(shape.dtype), device.hbm_bytes_per_s
    except ValueError as err:
        raise UsageError(str(err)) from None
    except KeyError:
        have = [d for d in TENSOR_DTYPES if d in device.tensor_tflops] + ["fp32"] * bool(device.fp32_tflops)
        raise UsageError(f"{device.name} has no {shape.dtype} figure in the datasheet table; "
                         f"--dtype {', '.join(have)}") from None
    check_fp8((shape.dtype,), (shape.mode,))  # the model needs no device
    # Without --impl, the implementations that take this dtype and head_dim (fp32 lists neither FA4 nor cuDNN)
    impls = [get_impl(n) for n in args.impl] if args.impl else [
        impl for impl in map(get_impl, BUILTIN)
        if shape.dtype in impl.dtypes and (impl.head_dims is None or shape.head_dim in impl.head_dims)]
    path = planned_path(shape, device) if args.path == "auto" else args.path
    check_path(path or "", shape)
    rows = model_table(shape, device, impls, path or "")
    # The exp roof (profiler.model.roofs.exp_ceiling) of a fused kernel's whole step on the datasheet: None elsewhere
    exp = (exp_ceiling(peak, device.exp2_per_s, shape.head_dim, shape.mode)
           if device.exp2_per_s is not None and shape.dtype in TENSOR_DTYPES else None)
    fused = {impl.name for impl in impls if impl.costing.fused}
    if args.json:  # JSON has no NaN: a quantity the model does not give is null
        print(json.dumps([{**{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()},
                           "exp_roof_tflops": exp / 1e12 if exp and r["impl"] in fused and r["step"] == "total"
                           else None} for r in rows], indent=2))
        return 0
    ridge = ridge_point(peak, bw)
    table = Table(
        "impl", "step", "GFLOP", "HBM MB (compulsory)", "MB (tile)", "FLOP/B", "FLOP/B (tile)", "roof TFLOP/s",
        "bound",
        title=(f"{shape.label} {'' if shape.causal else 'full '}{shape.mode}{f' ({path})' if path else ''} "
               f"on {device.name} (datasheet): "
               f"peak {peak / 1e12:.0f} TFLOP/s, {bw / 1e12:.2f} TB/s, ridge {ridge:.0f} FLOP/B"),
    )
    for r in rows:
        table.add_row(r["impl"], r["step"], f"{r['flops'] / 1e9:,.1f}", f"{r['hbm_bytes'] / 1e6:,.1f}",
                      fmt(r["tile_bytes"] / 1e6, ",.1f"), f"{r['arithmetic_intensity']:,.2f}",
                      fmt(r["tile_intensity"], ",.2f"), f"{r['attainable_tflops']:,.1f}", r["bound"])
    console.print(table)
    console.print("MB (tile): bytes when each block re-reads what it shares (profiler.model.fused.tile_bytes); "
                  "'-' where an implementation's tiles are not declared.")
    ours = [impl for impl in impls if impl.name == "triton_flash"]  # the kernels --path auto plans
    if not path and ours:
        try:
            taken = planned_path(shape, device)
        except UsageError:  # a dtype or a GPU it cannot plan for: no note
            taken = path_of_row(ours[0].costing, shape)
        if taken != path_of_row(ours[0].costing, shape):  # not what the table costs already (a decode's split plan)
            console.print(f"Our kernels' rows are costed on the portable path; on {device.name} they take '{taken}' "
                          "here: --path auto costs that.")
    # The roof a fused kernel's whole step has here without the exponentials: where none reaches the exp roof (a
    # memory-bound decode step), the exp roof does not bind and the note says only that.
    fused_roofs = [r["attainable_tflops"] * 1e12 for r in rows if r["step"] == "total" and r["impl"] in fused]
    if exp is not None and fused_roofs and max(fused_roofs) <= exp:
        console.print(f"exp roof: {exp / 1e12:,.0f} TFLOP/s on the datasheet (softmax's exponentials run after the "
                      "matmuls: profiler.model.roofs.exp_ceiling), above every fused kernel's roof in the table: it "
                      "does not bind this shape.")
    elif exp is not None:
        console.print(f"exp roof: softmax's exponentials at {device.exp2_per_s / 1e12:.2f}·10¹² exp2/s, run after "
                      f"the matmuls, cap a fused kernel at {exp / 1e12:,.0f} TFLOP/s here ({exp / peak:.2f} of the "
                      f"{shape.dtype} peak) on the datasheet, below the compute roof of the table: a fused kernel that "
                      "does not overlap the two is bound by it (profiler.model.roofs.exp_ceiling). A capture draws "
                      "it from the matmul it measured, lower than the datasheet's, so its figure is lower.")
    return 0
