"""``report``: a capture as one self-contained report.html (the dashboard's figures per family,
plotly inlined, so it opens offline)."""

from __future__ import annotations

import argparse

from profiler.cli import UsageError
from profiler.cli.console import console

HELP = "write a self-contained report.html for a capture (works offline)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("capture", help="a capture folder")
    p.add_argument("--out", default=None, help="output file (default <capture>/report.html)")
    p.add_argument("--family", action="append", default=None, metavar="TOKENS",
                   help="only the families whose label holds every space-separated token, e.g. "
                        "'D64 fp16 causal fwd' (repeatable; default: every family)")


def run(args) -> int:
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
