"""``python -m profiler``: the command line.

Each subcommand is one module of this package, named as the subcommand, with ``HELP`` (its line in
``--help``), ``add_arguments(parser)`` and ``run(args) -> int``; :data:`COMMANDS` lists them in the
order ``--help`` shows. A command parses, calls the layers below (profiler.model, measure, nsight,
store, views) and prints; it imports torch, the kernels and the views inside ``run``, so ``--help``
and a bad argument answer at once. ``shapes.py`` holds the shape options that capture, sweep,
bench, model and validate share, ``options.py`` the argument types and the other shared options,
``console.py`` the console and the measuring loop with its progress. Bad arguments print one line
and exit with status 2.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

EXIT_USAGE = 2

# Exit status when stdout closed before the output ended (`... --json | head -1`): what a shell
# reports for a tool that SIGPIPE ended (128 + 13), so a script can tell a cut output from a whole one.
EXIT_BROKEN_PIPE = 141
# Exit status of a torchrun rank whose peer went away mid-sweep: a failure, with the rows kept for --resume.
EXIT_PEER_LOST = 1


class UsageError(ValueError):
    """A bad value the parser could not check by itself; printed as one line, exit status 2."""


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's, but the help column leaves room for the longest subcommand name: argparse (3.11)
    measures the names one indent short of where it prints them, so "dashboard" or "summarize"
    would push their help to the next line."""

    def add_argument(self, action):  # noqa: D102
        super().add_argument(action)
        if isinstance(action, argparse._SubParsersAction) and action.help is not argparse.SUPPRESS:
            longest = max((len(self._format_action_invocation(a)) for a in action._get_subactions()), default=0)
            self._action_max_length = max(self._action_max_length,
                                          longest + self._current_indent + self._indent_increment)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump, no traceback) and exit status 2."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _HelpFormatter)  # subcommands' parsers too
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # noqa: D102
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


# The command modules import UsageError from here, so they are imported after it.
from profiler.cli import (  # noqa: E402
    bench,
    capture,
    ceilings,
    dashboard,
    demo,
    medians,
    model,
    nsys,
    observe,
    remodel,
    report,
    stalls,
    sweep,
    validate,
)

COMMANDS = (demo, bench, capture, sweep, observe, nsys, report, validate, stalls, remodel, model, ceilings, medians,
            dashboard)


def build_parser() -> argparse.ArgumentParser:
    # The console script names itself; `python -m profiler` (and main() from Python) keeps that name.
    script = os.path.basename(sys.argv[0]) if sys.argv else ""
    parser = _Parser(prog="attention-roofline" if script == "attention-roofline" else "python -m profiler",
                     description="Profile attention kernels and place them on a roofline: measure, model, compare.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        p = sub.add_parser(command.__name__.rsplit(".", 1)[-1], help=command.HELP)
        command.add_arguments(p)
        p.set_defaults(run=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        code = _run(argv)
        sys.stdout.flush()  # a closed pipe shows up here, not in the interpreter's flush at exit
        return code
    except BrokenPipeError:
        # Python ignores SIGPIPE, so a write to a closed pipe raises; stop quietly, and point stdout at
        # devnull so the interpreter's last flush does not raise again.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):  # a stdout without a file descriptor (tests)
            pass
        return EXIT_BROKEN_PIPE


def interrupted_message(args) -> str:
    """One line for Ctrl-C: where the finished rows are and how to go on, once a capture folder exists
    (every row is written as it finishes, so nothing finished is lost)."""
    folder = getattr(args, "capture_folder", None)
    if folder is None:
        return "interrupted"
    line = f"interrupted: the rows finished so far are kept in {folder}/"
    if getattr(args, "capture_resumable", False) and hasattr(args, "resume"):
        line += f"; run the same command with --out {shlex.quote(str(folder))} --resume to measure the rest"
    return line


def _peer_lost(err: RuntimeError) -> bool:
    """Whether a collective failed because another rank went away (gloo's words for it)."""
    return any(words in str(err) for words in ("Connection closed by peer", "Connection reset by peer"))


def _run(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    args.ranks = None  # set by the commands that spread over torchrun's ranks (console.join_ranks)
    try:
        return args.run(args)
    except UsageError as err:
        print(f"python -m profiler {args.command}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(interrupted_message(args), file=sys.stderr)
        return 130
    except RuntimeError as err:
        if args.ranks is None or not _peer_lost(err):
            raise
        # torchrun prints which rank failed and why; this rank only says what is left and how to finish.
        print(f"python -m profiler {args.command}: rank {args.ranks.rank}: another rank stopped "
              f"({str(err).splitlines()[0][-160:]}); what was written so far is kept on each host"
              + ("; run the same command with --resume to measure the rest" if hasattr(args, "resume") else ""),
              file=sys.stderr)
        return EXIT_PEER_LOST
    finally:
        if args.ranks is not None:
            from profiler.measure import distributed

            distributed.stop()
