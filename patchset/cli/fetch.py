"""Command line: ``python -m patchset fetch [--all]``."""

from __future__ import annotations

import argparse
import textwrap

from patchset.cli.apply import EXIT_CODES
from patchset.cli.options import add_common_options, workspace_from
from patchset.cli.startup import Run, add_parser
from patchset.plumbing import signals
from patchset.plumbing.errors import EXIT_OK
from patchset.plumbing.ui import Console
from patchset.upstreams.fetch import ensure_upstream


def cmd_fetch(args: argparse.Namespace, console: Console, guard: signals.Guard) -> int:
    """``fetch``: make the vanilla checkouts of the default (or all) pins in the cache and print their paths."""
    workspace = workspace_from(args)
    for pin in workspace.pins.pins if args.all else workspace.pins.defaults():
        checkout = ensure_upstream(pin, workspace.cache, console)
        console.summary(f"{pin.label}: {checkout}")
    return EXIT_OK


def register(commands: argparse._SubParsersAction, name: str, help: str) -> Run:
    """Add ``fetch``'s parser to the top-level ``commands``; the top-level parser parses its line."""
    description = textwrap.dedent(
        """\
        Fetch the default pinned releases (all pins with --all) from PyPI, verify their sha256 and unpack
        each into a git checkout tagged like the upstream release, under <cache>/upstreams/.
        Cached checkouts are reused."""
    )
    fetch = add_parser(commands, name, help, description=description, epilog=EXIT_CODES)
    fetch.add_argument("--all", action="store_true", help="every pin in upstreams.toml, not only the defaults")
    add_common_options(fetch)
    return Run(cmd_fetch)
