"""What the command modules share: the console, number formatting, torchrun's ranks, and the start
and the measuring loop of a capture folder with their progress display."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

from rich.console import Console
from rich.markup import escape
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


def shape_words(shape, heads: bool = False) -> str:
    """A shape as words for a one-line summary: ``fwd bf16 D64 Nq8192 Nkv8192 B4 causal`` (``shape``: a mapping with
    the row key's mode, dtype, head_dim, seq_q, seq_kv, batch and causal); with ``heads``, the query and K/V heads
    after the batch, ``B4 H32/8``, where shapes of one grid may differ by them alone."""
    head_words = f" H{shape['heads']}/{shape['kv_heads']}" if heads else ""
    return (f"{shape['mode']} {shape['dtype']} D{shape['head_dim']} Nq{shape['seq_q']} Nkv{shape['seq_kv']} "
            f"B{shape['batch']}{head_words}{' causal' if shape['causal'] else ''}")


def pick_default(value, gpu_default: list, cpu_default: list, name: str, on_gpu: bool, notes: list[str]) -> list:
    """An option's value as a list: the value given, else the GPU or the CPU default. A CPU default
    that differs from the GPU's is noted in ``notes`` ("seq=1024 (GPU default 8192)"), which the
    command prints in one line and records in meta.json as ``defaults_shrunk``."""
    if value is not None:
        return value if isinstance(value, list) else [value]  # sweep and bench give lists, capture one value
    if not on_gpu and cpu_default != gpu_default:
        notes.append(f"{name}={','.join(map(str, cpu_default))} (GPU default {','.join(map(str, gpu_default))})")
    return gpu_default if on_gpu else cpu_default


def say_shrunk(notes: list[str]) -> None:
    if notes:
        console.print(f"No GPU: defaults shrunk to fit this machine: {', '.join(notes)}.")


def join_ranks(args, device_type: str) -> None:
    """Under torchrun, ``args.ranks`` (this process's rank) and ``args.device`` (the rank's own
    device of ``device_type``), the process group started; alone, nothing changes. profiler.cli.main
    stops the group when the command ends."""
    from profiler.measure import distributed

    args.ranks = distributed.from_env()
    if args.ranks is not None:
        args.device = distributed.start(args.ranks, device_type)


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
              "resumable": resumable, "status": lambda text: console.status(escape(text)),
              "graph": getattr(args, "cuda_graph", False)}
    try:
        if ranks is None:
            store, roofs = open_capture(args.device, folder, device_label, dtypes, meta,
                                        allow_mixed=getattr(args, "allow_mixed", False), **common)
        else:
            store, roofs, args.ranks = distributed.open_shared_capture(
                ranks, args.device, folder, device_label, dtypes, meta, allow_mixed=getattr(args, "allow_mixed", False),
                **common)
            ranks = args.ranks
    except FolderError as err:
        raise UsageError(str(err)) from None
    # What an interrupted run tells the user (profiler.cli._run): its rows are written one by one.
    args.capture_folder, args.capture_resumable = store.folder, resumable
    source = store.meta.get("measured_ceilings_source", "")
    if source.startswith("cache") and (ranks is None or ranks.main):
        console.print(f"Roofs (measured ceilings) from the {source}.", soft_wrap=True)
    return store, roofs


def dashboard_hint(folder: Path) -> None:
    """The command that opens the dashboard on this capture. A capture in the folder the dashboard opens by
    default (a checkout's reports/) is preselected there by name, beside the others; one elsewhere (``--out
    /tmp/cap1``) is opened alone, so the dashboard does not scan the folder around it. In a checkout the
    command is streamlit's on dashboards/roofline.py; installed, the CLI's ``dashboard``."""
    import os
    import sys

    import profiler
    from profiler.views.selection import checkout_of, default_reports

    folder = Path(folder) if Path(folder).name else Path(folder).resolve()
    app = Path(profiler.__file__).parent / "views" / "dashboard_app.py"
    home = default_reports(checkout_of(app), os.environ, Path.cwd())
    if folder.parent.resolve() == home.resolve():
        where = f"--reports {shlex.quote(str(folder.parent))} --select {shlex.quote(folder.name)}"
    else:
        where = f"--reports {shlex.quote(str(folder))}"
    if Path("dashboards/roofline.py").exists():
        command = f"{streamlit_command()} run dashboards/roofline.py -- {where}"
    else:
        program = "attention-roofline" if Path(sys.argv[0]).name == "attention-roofline" else "python -m profiler"
        command = f"{program} dashboard {where}"
    console.print(f"Explore it: {command}", soft_wrap=True)


def streamlit_command() -> str:
    """How to start Streamlit from this shell: ``streamlit`` where the one on PATH is this interpreter's (an
    activated venv), else this interpreter's module (``.venv/bin/python -m streamlit`` after ``make demo``,
    whose venv the shell has not activated)."""
    import shutil
    import sys

    found = shutil.which("streamlit")
    if found and Path(found).resolve().parent == Path(sys.executable).resolve().parent:
        return "streamlit"
    python = Path(sys.executable)
    try:
        python = python.relative_to(Path.cwd())
    except ValueError:
        pass
    return f"{shlex.quote(str(python))} -m streamlit"


def case_line(done: int, total: int, description: str, row: dict | None) -> str:
    """One finished case as a plain progress line: ``[12/96] triton_flash fwd B4 H32 N=4096 D64 fp16:
    ok 1.23 ms``; ``row`` is its total row, None when --resume found it already measured."""
    head = f"[{done}/{total}] {description}: "
    if row is None:
        return head + "already in the capture"
    if row["status"] == "ok":
        return head + f"ok {fmt(row.get('time_ms'), '.4g')} ms"
    if row["status"] == "interpreted":
        return head + f"interpreted: {fmt(row.get('time_ms'), '.4g')} ms in the Triton interpreter, not a kernel time"
    message = row.get("message")
    return head + row["status"] + (f": {message}" if isinstance(message, str) and message else "")


class PlainProgress:
    """Progress for a log or a pipe, where rich's bar is not drawn until the end: one line per
    finished case, printed (and flushed) as it finishes; a measure_cases ``finished`` callback."""

    def __init__(self, total: int, label: str = "", enabled: bool = True):
        self.total, self.label, self.enabled = total, label, enabled
        self.done = 0

    def __call__(self, description: str, rows: list[dict] | None) -> None:
        self.done += 1
        if not self.enabled:
            return
        total = None if rows is None else next((r for r in rows if r.get("step") == "total"), rows[0])
        console.print(self.label + case_line(self.done, self.total, description, total), soft_wrap=True)
        console.file.flush()


def measure_with_progress(store, shapes, impls, device: str, roofs, rep_ms: int, trace_filter=None,
                          ranks=None, graph: bool = False, rounds: int = 1, warmup_ms: int = 25) -> list[dict]:
    """profiler.measure.cases.measure_cases with a progress bar (a step per case and round); marks the capture
    finished. Under torchrun each rank measures its share of the plan (profiler.measure.distributed; in rounds,
    whole shapes) and rank 0 merges the parts; rank 0 returns every row of the capture, the others their own."""
    from attention_core.shape import ROW_KEY
    from profiler.measure import distributed
    from profiler.measure.cases import by_shape, cases_of, measure_cases

    cases = cases_of(shapes, impls)
    mine = cases
    if ranks is not None:
        # What the capture holds already (--resume) is left out of the plan, so the shares stay balanced.
        cases = [(shape, impl) for shape, impl in cases
                 if not store.has(dict(zip(ROW_KEY, shape.row_key(impl.name))))]
        # In rounds a shape's implementations take turns on one GPU, so a share is whole shapes; else single cases.
        groups = [[(shape, impl) for impl in group] for shape, group in by_shape(cases)] if rounds > 1 else \
            [[case] for case in cases]
        plan = distributed.share(
            ranks, [[(shape, impl.name) for shape, impl in group] for group in groups],
            [rounds * sum(distributed.predicted_seconds(impl, shape, roofs, rep_ms, warmup_ms) for shape, impl in group)
             for group in groups])
        mine = [case for i in plan.mine for case in groups[i]]
    label = "" if ranks is None else f"rank 0 of {ranks.world}: "
    shown = ranks is None or ranks.main
    common = {"rep_ms": rep_ms, "trace_filter": trace_filter, "write_kernels": ranks is None, "graph": graph,
              "rounds": rounds, "warmup_ms": warmup_ms}
    if console.is_terminal:
        with Progress(console=console, transient=True, disable=not shown) as progress:
            task = progress.add_task("measuring", total=len(mine) * rounds)

            def advance(description, steps=1):
                progress.update(task, description=escape(label + description))
                progress.advance(task, steps)

            rows = measure_cases(store, mine, device, roofs, progress=advance, **common)
    else:  # a log or a pipe: a line per finished case, as it finishes
        rows = measure_cases(store, mine, device, roofs, finished=PlainProgress(len(mine), label, enabled=shown),
                             **common)
    if ranks is not None:
        rows = distributed.finish_capture(ranks, store, plan.as_meta([len(group) for group in groups]))
        if ranks.main and not ranks.shared:
            console.print(f"The ranks saw {len(ranks.views)} different folders at {store.folder} (hosts that do not "
                          "share it): their rows reached rank 0 through the process group.", soft_wrap=True)
        return rows
    store.update_meta(finished=True)
    return rows


def print_round_spread(frame, impls: list[str]) -> None:
    """How far each implementation's rounds spread (round_spread) at its widest shape and at the median one: what a
    ratio's last digit is worth."""
    if "round_spread" not in frame:  # no row was timed in rounds (none ran, or --resume found them all)
        return
    rows = frame[(frame.step == "total") & frame.impl.isin(impls) & frame.round_spread.notna()]
    for impl, spread in rows.groupby("impl", sort=False).round_spread:
        widest = rows.loc[spread.idxmax()]
        console.print(f"{impl}: its {int(widest.rounds)} rounds differ by up to {spread.max():.1%} "
                      f"({shape_words(widest)}), the median shape by {spread.median():.1%}", soft_wrap=True)
