"""What the command modules share: the console, number formatting, and the start and the measuring
loop of a capture folder with their progress display."""

from __future__ import annotations

import shutil
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from profiler.cli import UsageError


class _Console(Console):
    """rich's console, but a closed stdout raises BrokenPipeError for profiler.cli.main to end
    quietly with one exit status (rich's own handler exits with status 1)."""

    def on_broken_pipe(self) -> None:  # noqa: D102
        self.quiet = True
        raise BrokenPipeError


# Wide enough for the tables when output goes to a file or a CI log (rich assumes 80 there).
# Markup and emoji codes are off: what is printed holds paths, implementation names and exception
# messages ("needs [cuda]", "mod:fn:"), which rich would otherwise read as tags and drop; colour is
# given with style= where it is wanted.
console = _Console(width=max(shutil.get_terminal_size((160, 40)).columns, 100), markup=False, emoji=False)


def fmt(x, spec=".3g", missing="-"):
    """A number for a table cell; ``missing`` for None and NaN."""
    return missing if x is None or x != x else format(x, spec)  # x != x: NaN


def start_capture(args, device_label: str, dtypes, meta: dict, impls=(), head_dims=(), resumable: bool = True,
                  prefix: str = ""):
    """The capture folder of a measuring command (--out, or reports/<prefix><device>-<time>) with
    its meta.json written and this machine's roofs measured. Returns (store, roofs). Under torchrun
    (``args.ranks``) rank 0 starts the folder and every rank gets a store of its own part file."""
    from profiler.measure import distributed
    from profiler.measure.folder import FolderError, default_folder, open_capture

    ranks = getattr(args, "ranks", None)
    folder = Path(args.out) if args.out else default_folder(prefix + device_label)
    common = {"impls": list(impls), "head_dims": head_dims, "resume": getattr(args, "resume", False),
              "resumable": resumable, "status": console.status}
    try:
        if ranks is None:
            return open_capture(args.device, folder, device_label, dtypes, meta, **common)
        return distributed.open_shared_capture(ranks, args.device, folder, device_label, dtypes, meta,
                                               allow_mixed=args.allow_mixed, **common)
    except FolderError as err:
        raise UsageError(str(err)) from None


def measure_with_progress(store, shapes, impls, device: str, roofs, rep_ms: int, trace_filter=None,
                          ranks=None, graph: bool = False) -> list[dict]:
    """profiler.measure.cases.measure_cases with a progress bar; marks the capture finished. Under
    torchrun each rank measures its share of the plan (profiler.measure.distributed) and rank 0
    merges the parts; rank 0 returns every row of the capture, the others their own."""
    from profiler.measure import distributed
    from profiler.measure.cases import cases_of, measure_cases

    cases = cases_of(shapes, impls)
    mine = cases
    if ranks is not None:
        plan = distributed.share(ranks, [(shape, impl.name) for shape, impl in cases],
                                 [distributed.predicted_seconds(impl, shape, roofs, rep_ms) for shape, impl in cases])
        mine = [cases[i] for i in plan.mine]
    with Progress(console=console, transient=True, disable=ranks is not None and not ranks.main) as progress:
        label = "" if ranks is None else f"rank 0 of {ranks.world}: "
        task = progress.add_task("measuring", total=len(mine))

        def advance(description):
            progress.update(task, description=label + description)
            progress.advance(task)

        rows = measure_cases(store, mine, device, roofs, rep_ms=rep_ms, progress=advance, trace_filter=trace_filter,
                             write_kernels=ranks is None, graph=graph)
    if ranks is not None:
        return distributed.finish_capture(ranks, store, plan.as_meta())
    store.update_meta(finished=True)
    return rows
