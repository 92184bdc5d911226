"""``ceilings``: this machine's measured roofs (a large matmul per dtype, a large copy and a copy that
stays in the L2) beside its datasheet's peaks; cached per device and software versions
(profiler.measure.ceilings), ``--no-cache`` measures again. Then the copy rate by size (measured each
time, as every capture measures it), with Hockney's r∞ and n½ (profiler.model.roofs.CopyCurve)."""

from __future__ import annotations

import argparse
import json

from rich.table import Table

from profiler.cli.console import console, fmt
from profiler.cli.options import add_device
from profiler.model import hardware

HELP = "measure this machine's matmul and copy roofs"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_device(p)
    p.add_argument("--no-cache", action="store_true", help="measure again even if cached")
    p.add_argument("--json", action="store_true")


def run(args) -> int:
    from profiler.measure.ceilings import measure_ceilings, measure_copy_curve

    with console.status(f"timing a large matmul per dtype and a large copy on {args.device} ..."):
        measured = measure_ceilings(args.device, use_cache=not args.no_cache)
    with console.status(f"timing device copies from 64 KiB up on {args.device} ..."):
        curve = measure_copy_curve(args.device)
    r_inf, n_half = curve.hockney()
    by_size = [{"bytes": n, "us": t * 1e6, "gbps": n / t / 1e9} for n, t in zip(curve.nbytes, curve.seconds)]
    sheet = hardware.lookup(measured.device)
    rows = []
    for dtype, tflops in measured.matmul_tflops.items():
        peak = sheet.peak_flops_or_none(dtype) if sheet else None  # None: no figure for it in the table
        datasheet = peak / 1e12 if peak else None
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
                          "measured_at": measured.measured_at, "rows": rows,
                          "copy_by_size": {"timing": curve.timing, "r_inf_gbps": r_inf / 1e9, "n_half_bytes": n_half,
                                           "points": by_size}}, indent=2))
        return 0
    title = f"{measured.device}: measured {measured.measured_at}"
    if sheet is None:
        title += " (not in the datasheet table: measured ceilings only)"
    table = Table("ceiling", "unit", "measured", "datasheet", "measured / datasheet", title=title)
    for r in rows:
        table.add_row(r["what"], r["unit"], f"{r['measured']:,.1f}", fmt(r["datasheet"], ",.1f"),
                      fmt(r["ratio"], ".2f"))
    console.print(table)
    sizes = Table("bytes moved (read+write)", "µs", "GB/s", "of the largest",
                  title=f"device copy by size ({curve.timing}): r∞ {r_inf / 1e9:,.0f} GB/s (the largest), half of "
                        f"it at n½ {_size(n_half)} (Hockney's t = (n + n½) / r∞)")
    if not str(args.device).startswith("cuda"):
        console.print("On a CPU the small copies run from its caches (nothing flushes them between repetitions), so "
                      "they outrun the large one: the curve does not have a GPU's shape.", soft_wrap=True)
    for point in by_size:
        sizes.add_row(_size(point["bytes"]), f"{point['us']:,.1f}", f"{point['gbps']:,.0f}",
                      f"{point['gbps'] / by_size[-1]['gbps']:.2f}")
    console.print(sizes)
    return 0


def _size(nbytes: float) -> str:
    """64 KiB, 3.5 MiB, 2 GiB."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.3g} {unit}"
    return f"{nbytes:.0f} B"
