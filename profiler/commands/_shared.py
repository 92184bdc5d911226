"""What the command modules share: the console, number formatting, capture folders and their
start (roofs measured, meta written) and the measuring loop with its progress bar."""

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


def capture_folder(args, device_label: str) -> Path:
    """--out, or reports/<device>-<time> when it is not given."""
    if args.out:
        return Path(args.out)
    slug = "".join(ch if ch.isalnum() else "-" for ch in device_label.lower()).strip("-")
    import time

    return Path("reports") / f"{slug[:40]}-{time.strftime('%Y%m%d-%H%M%S')}"


def open_capture(device: str, folder: Path, label: str, dtypes, meta: dict, *, resume: bool = False,
                 resumable: bool = True):
    """Refuse a folder that already holds a capture (unless resuming), measure this machine's roofs
    for ``dtypes`` and write the folder's meta.json: the run's metadata, the roofs and ``meta``.
    Returns (store, roofs)."""
    from profiler import hardware
    from profiler.capture import Roofs
    from profiler.ceilings import measure_ceilings
    from profiler.meta import run_metadata
    from profiler.store import RESULTS, ResultStore

    if (folder / RESULTS).exists() and not resume:
        hint = "pass --resume to add to it or choose another" if resumable else "choose another folder"
        raise UsageError(f"--out '{folder}' already holds a capture; {hint}")
    with console.status("measuring the roofs (matmul per dtype, device copy) ..."):
        measured = measure_ceilings(device, dtypes=tuple(sorted(set(dtypes))))
    roofs = Roofs(hardware.lookup(label), measured)
    store = ResultStore(folder, run_metadata(device) | roofs.as_meta() | meta, resume=resume)
    return store, roofs


def measure_into(store, shapes, impls, device: str, roofs, rep_ms: int, trace_filter=None) -> list[dict]:
    """profiler.capture.run_capture with a progress bar; marks the capture finished."""
    from profiler.capture import run_capture

    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("measuring", total=len(shapes) * len(impls))

        def advance(description):
            progress.update(task, description=description)
            progress.advance(task)

        rows = run_capture(store, shapes, impls, device, roofs, rep_ms=rep_ms, progress=advance,
                           trace_filter=trace_filter)
    store.update_meta(finished=True)
    return rows
