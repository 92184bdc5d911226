"""``remodel``: join a stored capture's times with the current cost model after the model changed:
rows whose FLOPs or bytes differ get their intensity, rates, bound and roof fractions recomputed
(profiler.remodel); ``--dry-run`` lists them, ``--reason`` records why in meta.json."""

from __future__ import annotations

import argparse
from pathlib import Path

from profiler.cli import UsageError
from profiler.cli.console import console

HELP = "join a stored capture's times with the current cost model (no GPU)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("capture", help="a capture folder")
    p.add_argument("--dry-run", action="store_true", help="print what would change, write nothing")
    p.add_argument("--reason", default=None, help="why the model changed, recorded in meta.json")


def run(args) -> int:
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
