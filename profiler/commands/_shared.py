"""What the command modules share: the console, number formatting, capture folder names."""

from __future__ import annotations

import shutil
from pathlib import Path

from rich.console import Console

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
