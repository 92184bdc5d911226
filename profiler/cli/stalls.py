"""``stalls``: where one kernel's warps wait, from an Nsight Compute source page (profiler.nsight.stalls): the
samples by stall reason, by code section (instructions executed equally often: a loop's body, a block's prologue
and epilogue) and the hottest instructions. No GPU needed; the page comes from ``ncu --set full`` on any machine."""

from __future__ import annotations

import argparse
import json

from rich.table import Table

from profiler.cli import UsageError
from profiler.cli.console import console
from profiler.cli.options import positive_int

HELP = "where a kernel's warps wait, from an Nsight Compute source page"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("page", help="the CSV of: ncu -i REPORT.ncu-rep --page source --csv --print-source sass "
                                "(one kernel, profiled with --set full)")
    p.add_argument("--top", type=positive_int, default=15, metavar="N",
                   help="instructions and code sections to list (default 15)")
    p.add_argument("--json", action="store_true", help="print the three tables as one JSON object")


def run(args) -> int:
    from profiler.nsight.stalls import REASONS, SourcePageError, hottest, read_source_page, reason_shares, sections

    try:
        kernel, page = read_source_page(args.page)
    except SourcePageError as err:
        raise UsageError(str(err)) from None
    reasons, parts, top = reason_shares(page), sections(page).head(args.top), hottest(page, args.top)
    if args.json:
        print(json.dumps({"kernel": kernel, "samples": int(page["samples"].sum()),
                          "reasons": {r: float(v) for r, v in reasons.items()},
                          "sections": parts.to_dict(orient="records"), "hottest": top.to_dict(orient="records")},
                         indent=2))
        return 0
    name = kernel if len(kernel) <= 100 else kernel[:99] + "…"
    console.print(f"{name}: {page['samples'].sum():,.0f} warp samples over {len(page):,} instructions",
                  soft_wrap=True)
    by_reason = Table("stall reason", "share", "what it means", title="samples by stall reason")
    for reason, share in reasons.items():
        if share >= 0.001:
            by_reason.add_row(reason, f"{share:.1%}", REASONS.get(reason, ""))
    console.print(by_reason)
    by_part = Table("executions", "instructions", "share", "its reasons", "its hottest instruction",
                    title="samples by code section (instructions executed equally often)")
    for row in parts.itertuples():
        by_part.add_row(f"{row.executions:,}" if row.executions else "not counted", f"{row.instructions:,}",
                        f"{row.share:.1%}", row.reasons, row.hottest[:60])
    console.print(by_part)
    if (parts["executions"] == 0).any():
        console.print("not counted: instructions with warp samples whose executed-instruction counter reads 0. "
                      "Nsight Compute replays the kernel and takes the samples and the counters in different passes, "
                      "so a path that ran in one pass (a wait that spun) need not have run in the other.")
    by_line = Table("address", "share", "reason", "executions", "SASS", title=f"the {len(top)} hottest instructions")
    for row in top.itertuples():
        by_line.add_row(row.address, f"{row.share:.1%}", row.reason, f"{row.executions:,}", row.sass[:70])
    console.print(by_line)
    return 0
