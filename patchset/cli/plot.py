"""Command line: ``python -m patchset plot``; the work is `patchset.proof.e2e_plot`."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from patchset.cli.startup import Run
from patchset.plumbing.paths import REPO_ROOT
from patchset.plumbing.signals import Guard
from patchset.plumbing.ui import Console


def _run(args: argparse.Namespace, console: Console, guard: Guard) -> int:
    from patchset.proof.e2e_plot import plot

    vanilla = args.vanilla or args.results / "e2e-bug.jsonl"
    plot(vanilla, args.patched or args.results / "e2e-fixed.jsonl", args.output, args.markdown)
    return 0


def register(commands: argparse._SubParsersAction, name: str, help: str) -> Run:
    parser = commands.add_parser(
        name,
        help=help,
        description="Plot grad_norm against the number of micro-batches, vanilla vs patched, critic and actor, "
        "from the numbers the end-to-end engine test recorded.",
        epilog="Exit codes: 0 written; 2 a results file is missing or unreadable.",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=Path(os.environ.get("PATCHSET_CACHE", REPO_ROOT / ".cache")) / "results",
        help="folder with e2e-bug.jsonl and e2e-fixed.jsonl (default %(default)s, where scripts/test.sh writes them)",
    )
    parser.add_argument("--vanilla", type=Path, help="the vanilla run's jsonl (default RESULTS/e2e-bug.jsonl)")
    parser.add_argument("--patched", type=Path, help="the patched run's jsonl (default RESULTS/e2e-fixed.jsonl)")
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=REPO_ROOT / "docs" / "evidence" / "grad_norm.png",
        help="PNG to write (default %(default)s)",
    )
    parser.add_argument("--markdown", action="store_true", help="also print the figures as a Markdown table")
    return Run(_run, interrupted="")
