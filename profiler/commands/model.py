"""``model``, ``ceilings`` and ``remodel``: the cost model and the roofs, no kernels run."""

from __future__ import annotations

import json
from pathlib import Path

from rich.table import Table

from profiler import cost_model as cm
from profiler import hardware, roofline
from profiler.cli import UsageError
from profiler.commands._shared import console, fmt

# --------------------------------------------------------------------------------------------- model


def model_rows(shape: cm.Shape, device: hardware.Device) -> list[dict]:
    """One row per implementation step: FLOPs, bytes, intensity, bound on ``device``'s datasheet roof."""
    from kernels.registry import REGISTRY

    peak, bw = device.peak_flops(shape.dtype), device.hbm_bytes_per_s
    rows = []
    for impl in REGISTRY.values():
        if impl.name == "naive":
            for step in impl.steps:
                flops, nbytes = cm.naive_step_flops(shape, step), cm.naive_step_bytes(shape, step)
                rows.append(_model_row(impl.name, step, flops, nbytes, nbytes, peak, bw))
        elif impl.name == "sdpa_math":
            # The math backend runs the same unfused steps (its own kernels): sum of the naive steps.
            flops = sum(cm.naive_step_flops(shape, s) for s in cm.NAIVE_STEPS)
            nbytes = sum(cm.naive_step_bytes(shape, s) for s in cm.NAIVE_STEPS)
            rows.append(_model_row(impl.name, "total", flops, nbytes, nbytes, peak, bw))
        elif impl.name == "triton_naive":
            # One program per query row: every row re-reads all of K and V (no reuse across rows).
            if shape.mode != "fwd":
                continue
            flops = cm.fused_flops(shape)
            reread = shape.bh * shape.seq_q * (2 * shape.seq_kv * shape.head_dim * shape.elem_bytes)
            if shape.causal:
                reread //= 2
            rows.append(_model_row(impl.name, "total", flops, cm.compulsory_bytes(shape),
                                   reread + cm.compulsory_bytes(shape), peak, bw))
        else:
            if shape.mode != "fwd" and not impl.supports_backward:
                continue
            flops = cm.fused_flops(shape)
            rows.append(_model_row(impl.name, "total", flops, cm.compulsory_bytes(shape), cm.tile_bytes(shape),
                                   peak, bw))
    return rows


def _model_row(impl, step, flops, compulsory, tile, peak, bw) -> dict:
    ai = cm.arithmetic_intensity(flops, compulsory)
    return {
        "impl": impl, "step": step, "flops": flops, "hbm_bytes": compulsory, "tile_bytes": tile,
        "arithmetic_intensity": ai, "tile_intensity": cm.arithmetic_intensity(flops, tile),
        "attainable_tflops": roofline.attainable_flops(ai, peak, bw) / 1e12,
        "bound": roofline.bound(ai, peak, bw),
    }


def model(args) -> int:
    if args.list_devices:
        table = Table("device", "fp16/bf16 TFLOP/s", "fp32 TFLOP/s", "HBM TB/s", "L2 MB", "SMs", "ridge fp16")
        for d in hardware.DEVICES.values():
            table.add_row(d.name, fmt(d.tensor_tflops["fp16"]), fmt(d.fp32_tflops), fmt(d.hbm_tbps),
                          fmt(d.l2_bytes / 1e6 if d.l2_bytes else None), fmt(d.sm_count),
                          fmt(roofline.ridge_point(d.peak_flops("fp16"), d.hbm_bytes_per_s), ".0f"))
        console.print(table)
        return 0
    device = hardware.lookup(args.device_name)
    if device is None:
        raise UsageError(f"unknown --device-name '{args.device_name}'; known: {', '.join(hardware.DEVICES)}")
    try:
        shape = cm.Shape(args.batch, args.heads, args.seq, args.seq, args.dim, args.dtype, args.causal, args.mode)
    except ValueError as err:
        raise UsageError(str(err)) from None
    rows = model_rows(shape, device)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    peak, bw = device.peak_flops(shape.dtype), device.hbm_bytes_per_s
    ridge = roofline.ridge_point(peak, bw)
    table = Table(
        "impl", "step", "GFLOP", "HBM MB (compulsory)", "MB (tile)", "FLOP/B", "FLOP/B (tile)", "roof TFLOP/s",
        "bound",
        title=(f"B={shape.batch} H={shape.heads} N={shape.seq_q} D={shape.head_dim} {shape.dtype} "
               f"{'causal' if shape.causal else 'full'} {shape.mode} on {device.name} (datasheet): "
               f"peak {peak / 1e12:.0f} TFLOP/s, {bw / 1e12:.2f} TB/s, ridge {ridge:.0f} FLOP/B"),
    )
    for r in rows:
        table.add_row(r["impl"], r["step"], f"{r['flops'] / 1e9:,.1f}", f"{r['hbm_bytes'] / 1e6:,.1f}",
                      f"{r['tile_bytes'] / 1e6:,.1f}", f"{r['arithmetic_intensity']:,.2f}",
                      f"{r['tile_intensity']:,.2f}", f"{r['attainable_tflops']:,.1f}", r["bound"])
    console.print(table)
    return 0


# ------------------------------------------------------------------------------------------ ceilings


def ceilings(args) -> int:
    from profiler.ceilings import measure_ceilings

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
    import time

    from profiler.capture import Roofs
    from profiler.capture import remodel as remodel_frame
    from profiler.store import RESULTS, CaptureError, load_capture, write_bytes_atomic, write_json_atomic

    folder = Path(args.capture)
    try:
        meta, frame = load_capture(folder)
    except CaptureError as err:
        raise UsageError(str(err)) from None
    new, changed = remodel_frame(frame, Roofs.from_meta(meta))
    if not changed.any():
        console.print(f"{folder}: every row already matches the current model.")
        return 0
    console.print(f"{folder}: the model gives other FLOPs or bytes for {int(changed.sum())} of {len(frame)} rows:")
    for (impl, step, mode, causal), count in frame[changed].groupby(["impl", "step", "mode", "causal"]).size().items():
        console.print(f"  {impl} {step} {mode}{' causal' if causal else ''}: {count}")
    if args.dry_run:
        return 0
    write_bytes_atomic(folder / RESULTS, new.to_parquet(index=False))
    meta.setdefault("remodelled", []).append({
        "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "rows_changed": int(changed.sum()),
        "note": "FLOPs, bytes, intensity, rates, bound and roof fractions of these rows recomputed from their "
                "stored times with the cost model of this time, against this meta's roofs"})
    write_json_atomic(folder / "meta.json", meta)
    console.print(f"Wrote {folder / RESULTS}; meta.json records the remodel.")
    return 0
