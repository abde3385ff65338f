"""The command line, ``python -m patchset <command>``: one subcommand per user task, listed in ``COMMANDS``.

Only the module of the command named on the line is imported; it registers its own parser and returns its `Run`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from patchset.cli.startup import Run

PROG = "python -m patchset"


@dataclass(frozen=True)
class Command:
    module: str  # its ``register(commands, name, help)`` adds its parser and says how it runs
    help: str  # one line, for ``python -m patchset --help``


COMMANDS = {
    "apply": Command(
        "patchset.cli.apply", "apply (or check, or revert) the series; the default command of scripts/apply.sh"
    ),
    "fetch": Command("patchset.cli.fetch", "fetch the pinned releases into the cache and print their checkouts' paths"),
    "export": Command("patchset.cli.export", "check out, refresh, export and lint the series (scripts/export.sh)"),
    "export-pr": Command("patchset.cli.export_pr", "one upstream branch per concern, gated (scripts/export-pr.sh)"),
    "wheels": Command("patchset.cli.wheels", "build patched wheels, or print an installed one's manifest"),
    "doctor": Command("patchset.cli.doctor", "is my run affected? a verl launch line, assessed (scripts/doctor.sh)"),
    "lint-hook": Command("patchset.cli.lint_hook", "one lint hook of this project's own, as export-pr's gates run it"),
    "proof": Command(
        "patchset.cli.proof", "the proof on your own GPUs, vanilla against patched (scripts/gpu_proof.py)"
    ),
    "bench": Command("patchset.cli.bench", "what the patches cost: a loss call, the pre-pass, the overlays' start"),
    "plot": Command("patchset.cli.plot", "draw the end-to-end engine test's grad_norm figure"),
    "reference": Command("patchset.cli.reference", "write or check docs/troubleshooting.md's exit codes"),
    "lock": Command("patchset.cli.lock", "regenerate requirements/lock.txt, the pinned test environment"),
    "test": Command("patchset.cli.test", "run every test of the patchset (scripts/test.sh)"),
}


def _parser(chosen: str | None) -> tuple[argparse.ArgumentParser, Run | None]:
    """The top-level parser with the ``chosen`` command registered (the others only named), and its `Run`."""
    epilog = None
    if chosen is None:
        from patchset.cli.apply import EXIT_CODES

        epilog = EXIT_CODES + f"\nRun '{PROG} apply --help' for the main command."
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Carry fixes for verl and Trinity-RFT as patch series and apply them.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-C", metavar="DIR", dest="directory", help="run as if started in DIR (as git -C does)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = None
    for name, command in COMMANDS.items():
        if name == chosen:
            run = importlib.import_module(command.module).register(commands, name, command.help)
        else:
            commands.add_parser(name, help=command.help, add_help=False)
    return parser, run


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``python -m patchset`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    from patchset.cli.startup import needs_command, run_parsed
    from patchset.plumbing import tempdirs
    from patchset.plumbing.errors import BadInput

    tempdirs.sweep()  # what runs killed before (SIGKILL: no cleanup ran) left in the temp folder

    line = list(sys.argv[1:] if argv is None else argv)
    directory: str | None = None  # -C DIR (or -CDIR) first on the line
    if line[:1] == ["-C"] and len(line) > 1:
        directory, line = line[1], line[2:]
    elif line and line[0].startswith("-C") and len(line[0]) > 2:
        directory, line = line[0][2:], line[1:]
    chosen = line[0] if line and line[0] in COMMANDS else None

    def parse() -> tuple[argparse.Namespace, Run]:
        if directory is not None:
            try:
                os.chdir(directory)  # as git -C does
            except OSError as exc:
                raise BadInput(f"-C {directory}: {exc.strerror}") from None
        parser, run = _parser(chosen)
        if run is None:  # no command first on the line: the help, or a usage error, and the parser exits
            needs_command(parser, parser.parse_args(line))
            parser.error(f"name the command first: {PROG} COMMAND ...")
        args = parser.parse_args(line) if run.parse is None else run.parse(line[1:])
        args.command_line = f"{PROG} {shlex.join(line)}"  # what the trees' locks say holds them
        return args, run

    return run_parsed(parse)
