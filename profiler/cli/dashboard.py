"""``dashboard``: the Streamlit dashboard for a user who installed the wheel and has no checkout. It
runs ``streamlit run`` on the app shipped inside the package (profiler/views/dashboard_app.py) with
this Python, and passes --reports and --select on to the app (``-- --reports DIR --select NAME``).
Streamlit comes with the ``dashboard`` extra; without it the command says how to install it."""

from __future__ import annotations

import argparse
import os
import sys
from importlib.util import find_spec
from pathlib import Path

from profiler.cli import UsageError

HELP = "open the Streamlit dashboard (needs the dashboard extra)"


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"'{text}': a port is an integer from 1 to 65535")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reports", metavar="DIR", default=None,
                   help="a folder of captures or one capture folder (default: $ATTN_REPORTS, else a checkout's "
                        "reports/, else ./reports/)")
    p.add_argument("--select", metavar="NAME[,NAME]", default=None,
                   help="the captures of --reports to open with (default: the newest)")
    p.add_argument("--port", type=port, default=None, help="the port to serve on (default: Streamlit's, 8501)")


def app_path() -> Path:
    """The Streamlit app inside the installed package."""
    import profiler.views

    return Path(profiler.views.__file__).with_name("dashboard_app.py")


def streamlit_command(args) -> list[str]:
    """``python -m streamlit run <app> [--server.port PORT] -- [--reports DIR] [--select NAMES]``:
    Streamlit's own options before ``--``, the app's after it."""
    command = [sys.executable, "-m", "streamlit", "run", str(app_path())]
    if args.port is not None:
        command += ["--server.port", str(args.port)]
    command.append("--")
    for flag, value in (("--reports", args.reports), ("--select", args.select)):
        if value is not None:
            command += [flag, value]
    return command


def replace_process(command: list[str]) -> int:
    """Become ``command`` (os.execv): the Streamlit server is this process, so SIGTERM, SIGINT and a
    closed terminal reach it, and no server is left behind as a child of a process that was stopped."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)
    return 1  # not reached: execv returns only by raising


def run(args) -> int:
    if find_spec("streamlit") is None:
        raise UsageError("the dashboard needs Streamlit: pip install 'attention-roofline[dashboard]'")
    if args.reports is not None and not Path(args.reports).is_dir():
        # Said here, before the server starts: the app would only show it on a page that keeps serving.
        raise UsageError(f"--reports '{args.reports}' is not a folder (a folder of captures or one capture folder)")
    return replace_process(streamlit_command(args))
