"""Command line: ``python -m patchset lock``; the work is `patchset.testenv.lock`."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

from patchset.cli.startup import Run, add_parser
from patchset.plumbing.errors import EXIT_TESTS_FAILED
from patchset.plumbing.paths import REPO_ROOT
from patchset.plumbing.signals import Guard
from patchset.plumbing.ui import Console
from patchset.testenv import lock


def _run(args: argparse.Namespace, console: Console, guard: Guard) -> int:
    lock.lock(args.output, args.tools, args.verify, args.workdir)
    return 0


def register(commands: argparse._SubParsersAction, name: str, help: str) -> Run:
    epilog = "exit status: 0 written (and verified); 1 pip or pip check failed; 2 bad input"
    parser = add_parser(commands, name, help, description=lock.__doc__, epilog=epilog)
    requirements = REPO_ROOT / "requirements"
    parser.add_argument("--output", type=Path, default=requirements / "lock.txt", help="lock file to write")
    parser.add_argument("--tools", type=Path, default=requirements / "tools.txt", help="requirements file of tools")
    parser.add_argument("--verify", action="store_true", help="also install the new lock into fresh venvs and check")
    parser.add_argument("--workdir", type=Path, help="where to put the venvs (default: a temporary folder, removed)")
    return Run(_run, interrupted="", other_errors={subprocess.CalledProcessError: EXIT_TESTS_FAILED})
