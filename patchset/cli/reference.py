"""docs/troubleshooting.md's exit codes, made from each command's own ``--help``, never by hand."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

from patchset.cli import apply, doctor, export, export_pr, test, wheels
from patchset.cli.startup import Run
from patchset.plumbing import marked, signals
from patchset.plumbing.paths import REPO_ROOT
from patchset.plumbing.ui import Console

DOC = "docs/troubleshooting.md"
START = "<!-- exit codes: made by `python -m patchset reference --write` from each --help; edit those -->"
END = "<!-- end of exit codes -->"
# scripts/test.sh's exit codes are one sentence in its --help: laid out as the others' lines are
TEST_CODES = textwrap.fill(
    test.EXIT_CODES.removeprefix("Exit codes: "), 116, initial_indent="  ", subsequent_indent="  "
)
# each command as its user runs it, and the exit codes its --help ends with
COMMANDS = (
    ("scripts/apply.sh", apply.EXIT_CODES),
    ("scripts/test.sh", TEST_CODES),
    ("scripts/build-wheels.sh", wheels.EXIT_CODES),
    ("scripts/export.sh", export.EXIT_CODES),
    ("scripts/export-pr.sh", export_pr.EXIT_CODES),
    ("scripts/doctor.sh", doctor.EXIT_CODES),
)


def exit_codes() -> str:
    """Every command's exit codes, in one code block between the markers."""
    blocks = [f"{command}\n" + text.removeprefix("exit status:").strip("\n") for command, text in COMMANDS]
    return "\n".join([START, "", "```", "\n\n".join(blocks), "```", "", END])


def drifted(root: Path) -> bool:
    return marked.differs(root / DOC, START, END, "exit-code", exit_codes())


def write(root: Path) -> None:
    marked.replace(root / DOC, START, END, "exit-code", exit_codes())


def register(commands: argparse._SubParsersAction, name: str, help: str) -> Run:
    parser = commands.add_parser(
        name,
        help=help,
        description=f"Print every command's exit codes as {DOC} holds them.",
        epilog=f"Exit codes: 0 done; 1 --check found {DOC} out of date; 2 bad input.",
    )
    parser.add_argument("--write", action="store_true", help=f"put them into {DOC}, between the markers")
    parser.add_argument("--check", action="store_true", help=f"exit 1 when {DOC}'s differ")

    def run(args: argparse.Namespace, console: Console, guard: signals.Guard) -> int:
        if args.check:
            if drifted(REPO_ROOT):
                print(f"{DOC}: the exit codes are out of date (run: python -m patchset reference --write)")
                return 1
            return 0
        if args.write:
            write(REPO_ROOT)
            console.summary(f"* Wrote the exit codes into {DOC}")
            return 0
        print(exit_codes())
        return 0

    return Run(run, handle_signals=False, interrupted="")
