"""``nsys``: read Nsight Systems SQLite exports. ``nsys summarize EXPORT`` projects the GPU time of
any export onto its NVTX ranges; ``nsys ingest CAPTURE`` joins a capture's profile.sqlite
(scripts/nsys_profile.sh makes one) into its results as ``nsys_gpu_ms`` (and ``nsys_match``: joined on
the row key, or by order for a capture whose range names lack it)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.table import Table

from profiler.cli import UsageError
from profiler.cli.console import console

HELP = "read Nsight Systems SQLite exports"


def add_arguments(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(dest="nsys_command", required=True, metavar="NSYS_COMMAND")
    summarize = actions.add_parser("summarize", help="per-range projected GPU time of any nsys SQLite export")
    summarize.add_argument("export", help="a file from `nsys export --type sqlite` (.sqlite or .sqlite.xz)")
    summarize.add_argument("--json", action="store_true", help="print a JSON list of objects")
    summarize.set_defaults(nsys_run=_summarize)
    ingest = actions.add_parser("ingest", help="join a capture's profile.sqlite into its results (nsys_gpu_ms; "
                                               "an observe --trace nsys capture: each call's time)")
    ingest.add_argument("capture", help="a capture folder holding profile.sqlite or profile.sqlite.xz "
                                        "(scripts/nsys_profile.sh makes one)")
    ingest.set_defaults(nsys_run=_ingest)


def run(args) -> int:
    return args.nsys_run(args)


def _summarize(args) -> int:
    from profiler.nsight import nsys as nsys_export

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


def _ingest(args) -> int:
    from profiler.nsight import nsys as nsys_export
    from profiler.observer import nsys_times
    from profiler.store import CaptureError

    folder = Path(args.capture)
    if (folder / nsys_times.NSYS_CALLS).is_file():  # an observation under nsys whose calls were not timed yet
        try:
            summary = nsys_times.fill(folder)
        except (CaptureError, nsys_export.NsysExportError) as err:
            raise UsageError(str(err)) from None
        console.print(f"Timed the {summary['calls'] - summary['compiled_calls_untimed']} observed calls of {folder} "
                      f"from its Nsight Systems export ({summary['calls_without_ranges']} without a range)",
                      soft_wrap=True)
        return 0
    try:
        results = nsys_export.ingest_capture(folder)
    except (CaptureError, nsys_export.NsysExportError) as err:
        raise UsageError(str(err)) from None
    joined = results[results.nsys_gpu_ms.notna()]
    table = Table("impl", "step", "mode", "N", "CUDA events ms", "nsys GPU ms", "nsys / events", "idle µs",
                  title=f"{folder}: CUDA-event median vs Nsight Systems median projected GPU time per repetition; "
                        "idle µs: of that time, none of the repetition's own GPU ops (kernels, memsets, copies) ran")
    for r in joined.itertuples():
        table.add_row(r.impl, r.step, r.mode, str(r.seq_q), f"{r.time_ms:.4f}", f"{r.nsys_gpu_ms:.4f}",
                      f"{r.nsys_gpu_ms / r.time_ms:.3f}", f"{r.nsys_idle_ms * 1e3:.1f}")
    console.print(table)
    by_order = int((results.nsys_match == nsys_export.MATCH_ORDER).sum())
    if by_order:
        console.print(f"Note: {by_order} of {len(results)} rows were matched to their ranges by order (k-th range, "
                      "k-th row): the export's range names hold implementation, mode and lengths only, not the row's "
                      "whole key (a capture from before they did). results.parquet's nsys_match says which.",
                      soft_wrap=True)
    console.print("Wrote nsys_ranges.parquet, nsys_gpu_ops.parquet and results.parquet's nsys_gpu_ms, nsys_idle_ms "
                  f"and nsys_match in {folder}/", soft_wrap=True)
    return 0
