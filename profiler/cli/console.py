"""What the command modules share: the console, number formatting, and the start and the measuring
loop of a capture folder with their progress display."""

from __future__ import annotations

import shutil
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from profiler.cli import UsageError

# Wide enough for the tables when output goes to a file or a CI log (rich assumes 80 there).
console = Console(width=max(shutil.get_terminal_size((160, 40)).columns, 100))


def fmt(x, spec=".3g", missing="-"):
    """A number for a table cell; ``missing`` for None and NaN."""
    return missing if x is None or x != x else format(x, spec)  # x != x: NaN


def start_capture(args, device_label: str, dtypes, meta: dict, impls=(), head_dims=(), resumable: bool = True,
                  prefix: str = ""):
    """The capture folder of a measuring command (--out, or reports/<prefix><device>-<time>) with
    its meta.json written and this machine's roofs measured. Returns (store, roofs)."""
    from profiler.measure.folder import FolderError, default_folder, open_capture

    folder = Path(args.out) if args.out else default_folder(prefix + device_label)
    try:
        return open_capture(args.device, folder, device_label, dtypes, meta, impls=list(impls), head_dims=head_dims,
                            resume=getattr(args, "resume", False), resumable=resumable, status=console.status)
    except FolderError as err:
        raise UsageError(str(err)) from None


def measure_with_progress(store, shapes, impls, device: str, roofs, rep_ms: int, trace_filter=None) -> list[dict]:
    """profiler.measure.cases.measure_cases with a progress bar; marks the capture finished."""
    from profiler.measure.cases import measure_cases

    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("measuring", total=len(shapes) * len(impls))

        def advance(description):
            progress.update(task, description=description)
            progress.advance(task)

        rows = measure_cases(store, shapes, impls, device, roofs, rep_ms=rep_ms, progress=advance,
                             trace_filter=trace_filter)
    store.update_meta(finished=True)
    return rows
