"""Every command's start-up, written once: parse its line, make its console, hold SIGINT, SIGTERM and SIGHUP off the
trees it changes (``plumbing.signals``), and end whatever stops it as one ``error:`` line and its exit status
(``exits.run_reporting_errors``). A command module supplies its parsing and its handler, nothing more."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext

from patchset.cli.exits import run_reporting_errors
from patchset.cli.options import usage_exit_status
from patchset.plumbing import signals
from patchset.plumbing.errors import EXIT_BAD_INPUT
from patchset.plumbing.ui import Console

# what runs the parsed command: its arguments, its console (``-q``) and the signal guard of the run
Handler = Callable[[argparse.Namespace, Console, signals.Guard], int]


def needs_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """``args``, or, when the line names no COMMAND, ``parser``'s help on stderr and the usage exit (bad input)."""
    if args.command is None:
        parser.print_help(sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)
    return args


def run_command(
    parse: Callable[[], argparse.Namespace],
    handler: Handler,
    *,
    handle_signals: bool = True,
    interrupted: str | Callable[[argparse.Namespace], str] | None = None,
    other_errors: Mapping[type[Exception], int] | None = None,
) -> int:
    """Parse the line with ``parse`` (``--help``: 0; a usage error: its status, see `usage_exit_status`) and return
    ``handler``'s exit status, or that of the error that ended it (``run_reporting_errors``, with ``interrupted``,
    given the arguments when it depends on them, and ``other_errors``). ``handle_signals``: signals are held off
    critical sections (``signals.handled``) for the whole command; off, they keep their handlers and the guard is
    inert."""
    try:
        args = parse()
    except SystemExit as exc:  # --help (0), a usage error (2), or no command given
        return usage_exit_status(exc, EXIT_BAD_INPUT)
    console = Console(quiet=getattr(args, "quiet", False))
    said = interrupted(args) if callable(interrupted) else interrupted
    guarding: AbstractContextManager[signals.Guard] = (
        signals.handled() if handle_signals else nullcontext(signals.Guard())
    )
    with guarding as guard:
        return run_reporting_errors(lambda: handler(args, console, guard), interrupted=said, other_errors=other_errors)
