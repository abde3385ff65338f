"""Every command's start-up, written once: parse its line, make its console, hold signals off the trees it changes
(``plumbing.signals``), and end whatever stops it as one ``error:`` line and its exit status (``exits.py``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from patchset.cli.exits import run_reporting_errors
from patchset.plumbing import signals
from patchset.plumbing.errors import EXIT_BAD_INPUT
from patchset.plumbing.ui import Console

# what runs the parsed command: its arguments, its console (``-q``) and the signal guard of the run
Handler = Callable[[argparse.Namespace, Console, signals.Guard], int]


@dataclass(frozen=True)
class Run:
    """How a registered command runs. ``interrupted``: what ``error: interrupted`` adds (None: what the rollback
    reported); ``parse``: parses the line after the command's name (None: the top-level parser parses it all)."""

    handler: Handler
    handle_signals: bool = True
    interrupted: str | Callable[[argparse.Namespace], str] | None = None
    parse: Callable[[Sequence[str]], argparse.Namespace] | None = None
    other_errors: Mapping[type[Exception], int] = field(default_factory=dict)


def add_parser(commands: argparse._SubParsersAction, name: str, help: str, **options: Any) -> argparse.ArgumentParser:
    """A command's parser whose description and epilog keep their line breaks (exit-code tables, examples)."""
    return commands.add_parser(name, help=help, formatter_class=argparse.RawDescriptionHelpFormatter, **options)


def needs_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """``args``, or, when the line names no COMMAND, ``parser``'s help on stderr and the usage exit (bad input)."""
    if args.command is None:
        parser.print_help(sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)
    return args


def run_parsed(parse: Callable[[], tuple[argparse.Namespace, Run]]) -> int:
    """The exit status of the command ``parse`` returns, or that of the error that ended it, from parsing on."""
    said: str | None = ""  # what an interruption left: nothing until the command is known
    errors: dict[type[Exception], int] = {}  # the command's own further errors, once it is known

    def call() -> int:
        nonlocal said
        try:
            args, run = parse()
        except SystemExit as exc:  # --help (None), a usage error (2), or no command given
            return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else EXIT_BAD_INPUT
        said = run.interrupted(args) if callable(run.interrupted) else run.interrupted
        errors.update(run.other_errors)
        with signals.handled() if run.handle_signals else nullcontext(signals.Guard()) as guard:
            return run.handler(args, Console(quiet=getattr(args, "quiet", False)), guard)

    return run_reporting_errors(call, interrupted=lambda: said, other_errors=errors)
