"""The command line, ``python -m patchset <command>``: one subcommand per user task.

``COMMANDS`` is the one table of them: each names the module that parses it and its one-line help. ``apply`` and
``fetch`` are parsed by ``patchset.cli.apply``, whose parser is also the top-level one (``--help``, usage errors);
every other command's module gets the rest of the line, so each keeps its own ``--help`` and exit codes.
``scripts/*.sh`` are thin wrappers over these. Whatever a command's module does not report itself (an import that
fails, a parser that breaks) still ends as one ``error:`` line and its exit status (``cli/exits.py``), never a
traceback.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass

TOP_LEVEL = "patchset.cli.apply"  # the module whose parser is ``python -m patchset`` itself


@dataclass(frozen=True)
class Command:
    module: str  # its ``main(argv)`` parses the line: the whole line for TOP_LEVEL, else the rest after the command
    help: str  # one line, for ``python -m patchset --help``


COMMANDS = {
    "apply": Command(TOP_LEVEL, "apply (or check, or revert) the series; the default command of scripts/apply.sh"),
    "fetch": Command(TOP_LEVEL, "fetch the pinned releases into the cache and print their checkouts' paths"),
    "series": Command("patchset.cli.maintain", "check out, refresh, export and lint the series (scripts/export.sh)"),
    "export-pr": Command("patchset.cli.export_pr", "one upstream branch per concern, gated (scripts/export-pr.sh)"),
    "wheels": Command("patchset.cli.wheels", "build patched wheels, or print an installed one's manifest"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``python -m patchset`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    from patchset.cli.exits import run_reporting_errors
    from patchset.plumbing import tempdirs

    tempdirs.sweep()  # what runs killed before (SIGKILL: no cleanup ran) left in the temp folder

    argv = list(sys.argv[1:] if argv is None else argv)
    command = COMMANDS.get(argv[0]) if argv else None
    if command is not None and command.module != TOP_LEVEL:
        module, rest = command.module, argv[1:]
    else:
        module, rest = TOP_LEVEL, argv
    return run_reporting_errors(lambda: int(importlib.import_module(module).main(rest)), interrupted="")
