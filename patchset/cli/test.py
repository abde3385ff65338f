"""Command line: ``python -m patchset test`` (``scripts/test.sh``): every test of the patchset, each deployment mode
proven once (`patchset.testcommand.testsuite`; docs/testing.md)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from patchset.cli.startup import Run
from patchset.plumbing import signals
from patchset.plumbing.errors import EXIT_TIMED_OUT
from patchset.plumbing.limits import TIME_SCALE_VARIABLE
from patchset.plumbing.paths import REPO_ROOT
from patchset.plumbing.ui import Console
from patchset.testcommand import testsuite

DESCRIPTION = (
    "Run every test of the patchset, proving each deployment mode once: lint, the tooling tests, the regression suite "
    "on the vanilla trees (the teeth) and on the patched trees, one batch shape per test, loss and mode, "
    "the patched wheels (sha256 of every installed file, labels), verl 0.9.1 (patches skipped by content), verl 0.7.1 "
    "(its own series) and the overlays on pip-installed releases (parity, import order, Ray). Independent steps run "
    "at once, each printed whole when it ends; a summary lists every step and its time."
)
# the end of --help that docs/troubleshooting.md's exit codes are made from (python -m patchset reference)
EXIT_CODES = (
    "Exit codes: 0 all passed; 1 a step failed (its output says which); 2 the environment could not be built; "
    f"{EXIT_TIMED_OUT} a step hung past its time limit and was ended (the last line names it, the test it was in and "
    "the file that keeps its stacks, printed above); 70 an internal error (one line says what failed and where)."
)
EPILOG = EXIT_CODES + (
    " PATCHSET_WORKERS=N sets the pytest-xdist workers of each step (default: the cores divided among the steps "
    f"running at once; 1: none). {TIME_SCALE_VARIABLE}=F multiplies every time limit (steps: 5 to 30 minutes; a "
    "regression run: 15), for a slower machine. Unless TMPDIR is set, the steps' temporary files go to a folder of "
    "their own on /dev/shm where it is a tmpfs with 4 GiB free (creating files there costs less CPU than on a disk), "
    "removed at the end, kept when a step failed."
)


def register(commands: argparse._SubParsersAction, name: str, help: str) -> Run:
    parser = commands.add_parser(name, prog="scripts/test.sh", help=help, description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("PATCHSET_CACHE", REPO_ROOT / ".cache")),
        help="the cache of fetched and patched trees (default: $PATCHSET_CACHE, else .cache in this checkout)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a quick loop: the environment, the pinned trees, and the regression suite on them, vanilla then "
        "patched, one batch shape per test, loss and mode, without the engine end-to-end module or Trinity's "
        "legacy-path run beside verl 0.7.1; no lint, tooling tests, wheels, verl 0.9.1 or overlays",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="steps run at once (default: the cores); 1 runs them one after another, streaming their output",
    )
    parser.add_argument("--step", help=argparse.SUPPRESS)  # one step, run by the scheduler (its name: see plan)
    # Ctrl-C ends the steps at once (the scheduler terminates them); nothing here is a tree to roll back
    return Run(_handle, handle_signals=False, interrupted="")


def _handle(args: argparse.Namespace, console: Console, guard: signals.Guard) -> int:
    cache = args.cache.resolve()
    if args.step:
        return testsuite.run_step(args.step, cache, args.quick)
    return testsuite.run(cache, args.quick, args.jobs)
