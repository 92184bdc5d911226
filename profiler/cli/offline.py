"""``model``, ``ceilings`` and ``remodel``: the cost model and the roofs, no kernels run."""

from __future__ import annotations

import json
import math
from pathlib import Path

from rich.table import Table

from attention_core.shape import Shape
from profiler.cli import UsageError
from profiler.cli.console import console, fmt
from profiler.model import hardware
from profiler.model.roofs import ridge_point

# --------------------------------------------------------------------------------------------- model


def model(args) -> int:
    from profiler.registry import BUILTIN, get_impl
    from profiler.views.tables import model_table

    if args.list_devices:
        table = Table("device", "fp16/bf16 TFLOP/s", "fp32 TFLOP/s", "HBM TB/s", "L2 MB", "SMs", "ridge fp16")
        for d in hardware.DEVICES.values():
            table.add_row(d.name, fmt(d.tensor_tflops["fp16"]), fmt(d.fp32_tflops), fmt(d.hbm_tbps),
                          fmt(d.l2_bytes / 1e6 if d.l2_bytes else None), fmt(d.sm_count),
                          fmt(ridge_point(d.peak_flops("fp16"), d.hbm_bytes_per_s), ".0f"))
        console.print(table)
        return 0
    device = hardware.lookup(args.device_name)
    if device is None:
        raise UsageError(f"unknown --device-name '{args.device_name}'; known: {', '.join(hardware.DEVICES)}")
    try:
        seq_q = args.seq if args.seq_q is None else args.seq_q
        seq_kv = args.seq if args.seq_kv is None else args.seq_kv
        shape = Shape(args.batch, args.heads or 32, seq_q, seq_kv, args.dim or 64, args.dtype, args.causal,
                         args.mode, args.kv_heads)
        peak, bw = device.peak_flops(shape.dtype), device.hbm_bytes_per_s
    except ValueError as err:
        raise UsageError(str(err)) from None
    rows = model_table(shape, device, [get_impl(n) for n in (args.impl or BUILTIN)])
    if args.json:  # JSON has no NaN: a quantity the model does not give is null
        print(json.dumps([{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()}
                          for r in rows], indent=2))
        return 0
    ridge = ridge_point(peak, bw)
    table = Table(
        "impl", "step", "GFLOP", "HBM MB (compulsory)", "MB (tile)", "FLOP/B", "FLOP/B (tile)", "roof TFLOP/s",
        "bound",
        title=(f"{shape.label} {'' if shape.causal else 'full '}{shape.mode} on {device.name} (datasheet): "
               f"peak {peak / 1e12:.0f} TFLOP/s, {bw / 1e12:.2f} TB/s, ridge {ridge:.0f} FLOP/B"),
    )
    for r in rows:
        table.add_row(r["impl"], r["step"], f"{r['flops'] / 1e9:,.1f}", f"{r['hbm_bytes'] / 1e6:,.1f}",
                      fmt(r["tile_bytes"] / 1e6, ",.1f"), f"{r['arithmetic_intensity']:,.2f}",
                      fmt(r["tile_intensity"], ",.2f"), f"{r['attainable_tflops']:,.1f}", r["bound"])
    console.print(table)
    console.print("MB (tile): bytes when each block re-reads what it shares (profiler.model.fused.tile_bytes); "
                  "'-' where an implementation's tiles are not declared.")
    return 0


# ------------------------------------------------------------------------------------------ ceilings


def ceilings(args) -> int:
    from profiler.measure.ceilings import measure_ceilings

    with console.status(f"timing a large matmul per dtype and a large copy on {args.device} ..."):
        measured = measure_ceilings(args.device, use_cache=not args.no_cache)
    sheet = hardware.lookup(measured.device)
    rows = []
    for dtype, tflops in measured.matmul_tflops.items():
        datasheet = sheet.peak_flops(dtype) / 1e12 if sheet else None
        rows.append({"what": f"matmul {dtype} (n={measured.matmul_n})", "unit": "TFLOP/s", "measured": tflops,
                     "datasheet": datasheet, "ratio": tflops / datasheet if datasheet else None})
    datasheet_bw = sheet.hbm_tbps * 1e3 if sheet else None
    rows.append({"what": f"copy {measured.copy_bytes >> 20} MiB (read+write)", "unit": "GB/s",
                 "measured": measured.copy_gbps, "datasheet": datasheet_bw,
                 "ratio": measured.copy_gbps / datasheet_bw if datasheet_bw else None})
    if measured.l2_copy_gbps is not None:  # no datasheet gives an L2 bandwidth
        rows.append({"what": f"L2 copy {measured.l2_copy_bytes >> 10} KiB (read+write)", "unit": "GB/s",
                     "measured": measured.l2_copy_gbps, "datasheet": None, "ratio": None})
    if args.json:
        print(json.dumps({"device": measured.device, "datasheet_entry": sheet.name if sheet else None,
                          "measured_at": measured.measured_at, "rows": rows}, indent=2))
        return 0
    title = f"{measured.device}: measured {measured.measured_at}"
    if sheet is None:
        title += " (not in the datasheet table: measured ceilings only)"
    table = Table("ceiling", "unit", "measured", "datasheet", "measured / datasheet", title=title)
    for r in rows:
        table.add_row(r["what"], r["unit"], f"{r['measured']:,.1f}", fmt(r["datasheet"], ",.1f"),
                      fmt(r["ratio"], ".2f"))
    console.print(table)
    return 0


# ------------------------------------------------------------------------------------------- remodel


def remodel(args) -> int:
    """Re-join a capture's stored times with the current cost model, after the model changed."""
    from profiler.remodel import remodel_capture
    from profiler.store import RESULTS, CaptureError

    folder = Path(args.capture)
    try:
        frame, changed = remodel_capture(folder, write=not args.dry_run, reason=args.reason)
    except (CaptureError, ValueError) as err:
        raise UsageError(str(err)) from None
    if not changed.any():
        console.print(f"{folder}: every row already matches the current model.")
        return 0
    console.print(f"{folder}: the model gives other FLOPs or bytes for {int(changed.sum())} of {len(frame)} rows:")
    for (impl, step, mode, causal), count in frame[changed].groupby(["impl", "step", "mode", "causal"]).size().items():
        console.print(f"  {impl} {step} {mode}{' causal' if causal else ''}: {count}")
    if not args.dry_run:
        console.print(f"Wrote {folder / RESULTS}; meta.json records the remodel.")
    return 0
