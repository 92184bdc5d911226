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
    its meta.json written and this machine's roofs measured. Returns (store, roofs). Under torchrun
    (``args.ranks``) rank 0 starts the folder and every rank gets a store of its own part file."""
    from profiler.measure.folder import FolderError, default_folder, open_capture

    ranks = getattr(args, "ranks", None)
    folder = Path(args.out) if args.out else default_folder(prefix + device_label)
    resume = getattr(args, "resume", False)
    if ranks is None:
        try:
            return open_capture(args.device, folder, device_label, dtypes, meta, impls=list(impls), head_dims=head_dims,
                                resume=resume, resumable=resumable, status=console.status)
        except FolderError as err:
            raise UsageError(str(err)) from None
    return _start_distributed(args, ranks, folder, device_label, dtypes, meta, list(impls), head_dims, resume,
                              resumable)


def _start_distributed(args, ranks, folder, device_label, dtypes, meta, impls, head_dims, resume, resumable):
    from profiler.measure import distributed
    from profiler.measure.folder import FolderError, open_capture
    from profiler.store import ResultStore

    devices = distributed.gather(device_label)
    if len(set(devices)) > 1 and not args.allow_mixed:
        raise UsageError(f"the ranks run on different devices ({', '.join(sorted(set(devices)))}); one capture "
                         "compares like with like: pass --allow-mixed to measure across them anyway")
    folder = Path(distributed.broadcast(str(folder)))  # one default name for all ranks
    error = roofs = stored_meta = None
    if ranks.main:
        try:
            store, roofs = open_capture(args.device, folder, device_label, dtypes,
                                        meta | {"ranks": [{"rank": r, "device": d} for r, d in enumerate(devices)]},
                                        impls=impls, head_dims=head_dims, resume=resume, resumable=resumable,
                                        status=console.status)
            stored_meta = store.meta
        except FolderError as err:
            error = str(err)
    error, roofs, stored_meta = distributed.broadcast((error, roofs, stored_meta))
    if error:
        raise UsageError(error)
    # Every rank (rank 0 too) writes its own part file and skips what the folder already holds.
    return ResultStore(folder, stored_meta, resume=True, part=ranks.part, write_meta=False), roofs


def measure_with_progress(store, shapes, impls, device: str, roofs, rep_ms: int, trace_filter=None,
                          ranks=None) -> list[dict]:
    """profiler.measure.cases.measure_cases with a progress bar; marks the capture finished. Under
    torchrun each rank measures its share of the plan (profiler.measure.distributed) and rank 0
    merges the parts; rank 0 returns every row of the capture, the others their own."""
    from profiler.measure import distributed
    from profiler.measure.cases import cases_of, measure_cases
    from profiler.measure.torch_trace import kernels_of_capture
    from profiler.store import load_capture, merge_parts

    cases = cases_of(shapes, impls)
    mine = cases
    if ranks is not None:
        costs = [distributed.predicted_seconds(impl, shape, roofs, rep_ms) for shape, impl in cases]
        shares = distributed.plan(costs, ranks.world)
        names = [(shape, impl.name) for shape, impl in cases]
        if len(set(distributed.gather(distributed.fingerprint(names, shares)))) > 1:
            raise RuntimeError("the ranks planned different cases: give every rank the same arguments")
        mine = [cases[i] for i in shares[ranks.rank]]
    show = ranks is None or ranks.main
    with Progress(console=console, transient=True, disable=not show) as progress:
        label = "" if ranks is None else f"rank 0 of {ranks.world}: "
        task = progress.add_task("measuring", total=len(mine))

        def advance(description):
            progress.update(task, description=label + description)
            progress.advance(task)

        rows = measure_cases(store, mine, device, roofs, rep_ms=rep_ms, progress=advance, trace_filter=trace_filter,
                             write_kernels=ranks is None)
    if ranks is None:
        store.update_meta(finished=True)
        return rows
    distributed.barrier()  # every part is complete
    if ranks.main:
        merge_parts(store.folder)
        if (store.folder / "traces").is_dir():
            store.write_kernels(kernels_of_capture(store.folder))
        store.update_meta(finished=True, plan=[{"rank": r, "cases": len(share),
                                                "predicted_s": round(sum(costs[i] for i in share), 1)}
                                               for r, share in enumerate(shares)])
        rows = load_capture(store.folder)[1].to_dict("records")
        store.rows = rows
    distributed.barrier()
    return rows
