"""``observe``: run a script unchanged, as ``python SCRIPT ARGS`` would, and profile every attention
call it makes (profiler.observer); optionally replay the observed shapes through other
implementations and say what each would save."""

from __future__ import annotations

import argparse
import os
import runpy
import shlex
import sys
import traceback
from pathlib import Path

from profiler.cli import UsageError
from profiler.cli.console import console, dashboard_hint, fmt
from profiler.cli.options import add_rep_ms, impl_list

HELP = "run a script and profile the attention calls it makes (python -m profiler observe -- script.py ARGS)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default=None, help="capture folder (default reports/observed-<script>-<time>)")
    p.add_argument("--trace", choices=("torch", "none", "nsys"), default=None,
                   help="torch: the torch profiler records the run (each call's own kernel time, the GPU's busy "
                        "time); none: CUDA events around each call, least overhead; nsys: the run under Nsight "
                        "Systems, each call's GPU time from its NVTX range, profile.nsys-rep and profile.sqlite "
                        "kept in the capture (default: torch on a GPU, none on a CPU)")
    p.add_argument("--replay", type=impl_list, default=None, metavar="IMPLS",
                   help="after the run, re-run each observed shape through these implementations (names, 'all', "
                        "or module:function / file.py:function) and print what each would save")
    add_rep_ms(p)
    p.add_argument("script", nargs=argparse.REMAINDER, metavar="-- SCRIPT [ARGS...]",
                   help="the script and its arguments (or -m MODULE ARGS), after --")


def _script(command: list[str]) -> tuple[str, str, list[str]]:
    """('path' or 'module', target, argv) of the command after --."""
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("name the script to observe after --, e.g. observe --out reports/run -- train.py --steps 10")
    if command[0] == "-m":
        if len(command) < 2:
            raise UsageError("-m needs a module name, e.g. observe -- -m mypackage.train")
        found = _importable(command[1])
        if found is not True:
            raise UsageError(f"-m {command[1]}: {found}")
        return "module", command[1], [command[1], *command[2:]]
    path = Path(command[0])
    if not path.is_file():
        raise UsageError(f"script '{command[0]}' is not a file")
    return "path", str(path), command


def _importable(name: str) -> bool | str:
    """True when ``python -m name`` would find the module (importing its parent packages, as python
    does), else why not."""
    import importlib.util

    try:
        if importlib.util.find_spec(name) is not None:
            return True
    except (ImportError, ValueError):  # a parent package that is missing, or an empty or relative name
        pass
    except Exception as err:  # noqa: BLE001 - a parent package whose own import fails
        return f"importing its package failed ({type(err).__name__}: {err})"
    return f"no module named '{name}' on this Python's path"


class Terminated(BaseException):
    """SIGTERM while the script ran: how torchrun stops the other ranks when one fails, and how a batch
    system ends a job. Raised in the script so that what was observed is written before the process ends."""


def _terminate(signum, frame):
    raise Terminated()


def _run_user_code(kind: str, target: str, argv: list[str]) -> BaseException | None:
    """Run the script as ``python`` would (``__main__``, sys.argv, its folder first on sys.path);
    the exception it ended with, or None. SystemExit(0) and SystemExit(None) are a clean exit.
    SIGTERM ends the script with :class:`Terminated` (where the script installed no handler of its own)."""
    import signal

    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = argv
    saved_term = None
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        saved_term = signal.signal(signal.SIGTERM, _terminate)
    if kind == "path":
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
    try:
        if kind == "module":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as err:
        return None if err.code in (None, 0) else err
    except BaseException as err:  # noqa: BLE001 - the user's error, reported with its own traceback
        return err
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        if saved_term is not None:
            signal.signal(signal.SIGTERM, saved_term)
    return None


def _print_user_traceback(err: BaseException, target: str) -> None:
    """The script's traceback from its own first frame on (runpy's and ours left out)."""
    tb = err.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != os.path.abspath(target):
        tb = tb.tb_next
    traceback.print_exception(type(err), err, tb or err.__traceback__)


def run(args) -> int:
    kind, target, argv = _script(args.script)

    from profiler.measure.folder import FolderError, default_folder
    from profiler.observer.nsys_times import UNDER_NSYS
    from profiler.observer.run import observe
    from profiler.store import Capture

    stem = Path(target).stem if kind == "path" else target.rsplit(".", 1)[-1]
    folder = Path(args.out) if args.out else default_folder(f"observed-{stem}")
    under_nsys = args.trace == "nsys" and os.environ.get(UNDER_NSYS) == str(folder)
    if args.trace == "nsys" and not under_nsys:
        return _run_under_nsys(args, folder)
    command = " ".join(shlex.quote(a) for a in argv)
    if under_nsys:  # read: the script and what it starts are not observed under nsys again
        os.environ.pop(UNDER_NSYS, None)
    try:
        session = observe(folder, trace=args.trace, command=command,
                          status=lambda text: console.status(text), ranks=True)
        run_ = session.__enter__()
    except (FolderError, ValueError, RuntimeError) as err:  # a folder refused; RANK without MASTER_ADDR; ranks
        raise UsageError(str(err)) from None                # that did not all start (profiler.observer.ranks)
    failure = None
    try:
        failure = _run_user_code(kind, target, argv)
    finally:
        if failure is not None:  # told before the observation ends: under torchrun it goes to rank 0 with the rows
            run_.failure = _failure_text(failure)
        session.__exit__(None, None, None)
    rank = run_.link.ranks if run_.link is not None else None
    calls = run_.summary.get("calls", run_.calls)
    where = f"{folder}" if rank is None or rank.main else f"{folder} by rank 0"
    if isinstance(failure, KeyboardInterrupt):
        console.print(f"observe: interrupted; the {calls} attention calls observed before it are kept in {where}",
                      style="red", soft_wrap=True)
        return 130  # as python exits on Ctrl-C
    if isinstance(failure, Terminated):
        console.print(f"observe: terminated (SIGTERM); the {calls} attention calls observed before it are kept in "
                      f"{where}", style="red", soft_wrap=True)
        return 128 + 15  # as a shell reports a process ended by SIGTERM
    if failure is not None:
        if isinstance(failure, SystemExit):
            console.print(f"observe: the script exited with status {failure.code}", style="red")
        else:
            _print_user_traceback(failure, target)
        console.print(f"observe: {calls} attention calls observed before the script stopped; written to {where}",
                      soft_wrap=True)
        return failure.code if isinstance(failure, SystemExit) and isinstance(failure.code, int) else 1
    if rank is not None and not rank.main:
        if run_.merged:
            console.print(f"observe: rank {rank.rank} observed {run_.calls} attention calls; rank 0 merged them into "
                          f"{folder}", soft_wrap=True)
        else:
            console.print(f"observe: rank {rank.rank} observed {run_.calls} attention calls; rank 0 did not merge "
                          f"them (it ended first): they are in {Capture(folder).part_path(rank.part)}",
                          style="red", soft_wrap=True)
        return 0
    if under_nsys:
        console.print(f"observe: {calls} attention calls observed; Nsight Systems writes its report next",
                      soft_wrap=True)
        return 0
    _print_summary(run_)
    if args.replay:
        _replay(run_, args.replay, args.rep_ms)
    dashboard_hint(folder)
    return 0


def _run_under_nsys(args, folder: Path) -> int:
    """``--trace nsys``: this command again under ``nsys profile``, then ``nsys export``, then each
    call's time from the export (profiler.observer.nsys_times); returns the observed command's status."""
    import subprocess
    from types import SimpleNamespace

    import torch

    from profiler.measure.distributed import from_env
    from profiler.measure.folder import FolderError, check_folder
    from profiler.model.roofs import Roofs
    from profiler.nsight.nsys import NsysExportError
    from profiler.observer import nsys_times
    from profiler.store import Capture

    if from_env() is not None:
        raise UsageError("--trace nsys under torchrun is not supported: use --trace torch, which merges the ranks")
    if not torch.cuda.is_available():
        raise UsageError("--trace nsys needs a GPU (Nsight Systems times CUDA kernels); on this machine use "
                         "--trace none")
    nsys = nsys_times.find_nsys()
    if nsys is None:
        raise UsageError("--trace nsys: Nsight Systems (nsys) is not on PATH nor in "
                         f"{', '.join(nsys_times.NSYS_PLACES)}; set NSYS=/path/to/nsys")
    try:
        check_folder(folder, resumable=False)
    except FolderError as err:
        raise UsageError(str(err)) from None
    observe_argv = [sys.executable, "-m", "profiler", "observe", "--trace", "nsys", "--out", str(folder), "--",
                    *(args.script[1:] if args.script[:1] == ["--"] else args.script)]
    env = {**os.environ, nsys_times.UNDER_NSYS: str(folder)}
    console.print(f"observe: running under Nsight Systems ({nsys}); report in {folder}/", soft_wrap=True)
    child = subprocess.Popen(nsys_times.profile_command(nsys, folder, observe_argv), env=env)
    while True:
        try:
            status = child.wait()
            break
        except KeyboardInterrupt:  # the run below gets it too: it keeps what it saw and nsys writes its report
            continue
    capture = Capture(folder)
    if not capture.started:
        return status or 1  # the observation refused to start, and said why
    if not (folder / f"{nsys_times.REPORT}.nsys-rep").exists():
        console.print(f"observe: nsys wrote no report (status {status}); the rows in {folder} have no times",
                      style="red", soft_wrap=True)
        return status or 1
    again = (f"`{shlex.join(nsys_times.export_command(nsys, folder))}` then `python -m profiler nsys ingest "
             f"{shlex.quote(str(folder))}` time the calls")
    try:
        with console.status("nsys export --type sqlite ..."):
            exported = subprocess.run(nsys_times.export_command(nsys, folder), capture_output=True, text=True)
        if exported.returncode != 0:
            console.print(f"observe: nsys export failed ({exported.stderr.strip()[-300:]}); "
                          f"{folder}/{nsys_times.REPORT}.nsys-rep is kept; {again}", style="red", soft_wrap=True)
            return exported.returncode
        summary = nsys_times.fill(folder)
    except KeyboardInterrupt:
        console.print(f"observe: interrupted before the calls were timed; {folder}/{nsys_times.REPORT}.nsys-rep is "
                      f"kept; {again}", style="red", soft_wrap=True)
        return 130
    except (NsysExportError, OSError) as err:
        console.print(f"observe: {err}", style="red", soft_wrap=True)
        return 1
    meta, frame = capture.load()
    done = SimpleNamespace(summary=summary, results=lambda: frame, folder=folder, capture=capture,
                           device="cuda", roofs=Roofs.from_meta(meta))
    _print_summary(done)
    console.print(f"Nsight Systems: {folder}/{nsys_times.REPORT}.nsys-rep (open it in the GUI) and "
                  f"{folder}/{nsys_times.REPORT}.sqlite", soft_wrap=True)
    if status == 0 and args.replay:
        _replay(done, args.replay, args.rep_ms)
    dashboard_hint(folder)
    return status


def _failure_text(failure: BaseException) -> str:
    """How the script failed, as meta.json's ``observed.script_failed`` says it (``finished`` says only
    that the observation wrote everything it saw)."""
    if isinstance(failure, KeyboardInterrupt):
        return "was interrupted (Ctrl-C)"
    if isinstance(failure, Terminated):
        return "was terminated (SIGTERM)"
    if isinstance(failure, SystemExit):
        return f"exited with status {failure.code}"
    return f"raised {type(failure).__name__}: {failure}"


def _print_summary(run_) -> None:
    from rich.table import Table

    from profiler.observer.summary import TOP, rank_sites, run_summary_lines, top_rows

    s = run_.summary
    frame = rank_sites(run_.results())
    ranks = f" on {s['world']} ranks" if s.get("world") else ""
    console.print(f"Observed {s['calls']} attention calls{ranks} in {s['wall_s']:.2f} s of wall time "
                  f"({len(frame)} rows, clock: {s['clock']}); written to {run_.folder}", soft_wrap=True)
    for line in run_summary_lines(s):
        console.print(line, soft_wrap=True)
    if not len(frame):
        return
    table = Table(title=f"Attention by site, shape and mode (top {TOP} by total time)")
    for column in ("site", "api", "mode", "shape", "mask", "calls", "total ms", "median ms", "TFLOP/s", "GB/s",
                   "bound", "roof"):
        table.add_column(column, justify="right" if column not in ("site", "api", "shape", "mask") else "left")
    for _, r in top_rows(frame, TOP).iterrows():
        bound = r["bound"] if isinstance(r["bound"], str) and r["bound"] else "-"  # untimed rows have none
        table.add_row(r["site"], r["impl"], r["mode"], r["label"], r["mask"], f"{int(r['calls'])}",
                      fmt(r["total_ms"]), fmt(r["median_ms"]), fmt(r["tflops"]), fmt(r["gbps"]), bound,
                      fmt(r["of_roof"], ".0%"))
    console.print(table)


def _replay(run_, impls: list[str], rep_ms: int) -> None:
    from rich.table import Table

    from profiler.cli.console import case_line
    from profiler.observer.replay import replay, replay_cases, savings
    from profiler.observer.summary import savings_sentence
    from profiler.registry import get_impl

    chosen = [get_impl(name) for name in impls]
    _, stored = run_.capture.load()
    total = len(replay_cases(stored[(stored["source"] == "observed") & (stored["status"] == "ok")], chosen))
    done = [0]

    def finished(description, rows):
        done[0] += 1
        console.print(case_line(done[0], total, description, rows[0] if rows else None), soft_wrap=True)

    replay(run_.folder, chosen, str(run_.device), run_.roofs, rep_ms=rep_ms, finished=finished)
    meta, frame = run_.capture.load()
    per_row, whole = savings(frame, meta["observed"])
    if not len(whole):
        why = ("no implementation ran at an observed shape (see the lines above)" if total else
               "no observed shape can be replayed (their masks are ones our implementations lack)")
        console.print(f"Replay: {why}")
        return
    table = Table(title="What each implementation would save (observed calls charged at the replayed time)")
    for column in ("impl", "calls replayed", "attention ms", "would take ms", "saved ms", "run speedup"):
        table.add_column(column, justify="left" if column == "impl" else "right")
    for _, w in whole.iterrows():
        table.add_row(w["impl"], f"{w['calls_replayed']}/{w['calls']}", fmt(w["attention_ms"]),
                      fmt(w["new_attention_ms"]), fmt(w["saved_ms"]), fmt(w["speedup"], ".3f") + "x")
    console.print(table)
    console.print(savings_sentence(whole), soft_wrap=True)
