"""Command line: ``python -m patchset export-pr verl|trinity CHECKOUT`` (``scripts/export-pr.sh``); the work is
``patchset.export.pr_export``."""

from __future__ import annotations

import argparse
from pathlib import Path

from patchset.cli.exits import CACHE_WAIT_HELP, INTERNAL_HELP
from patchset.cli.options import add_common_options, workspace_from
from patchset.cli.startup import Run, add_parser
from patchset.export import pr_export
from patchset.export.pr_export import EXIT_GATE_FAILED, ExportRequest
from patchset.plumbing import signals
from patchset.plumbing.errors import EXIT_BAD_INPUT, EXIT_DOES_NOT_APPLY, EXIT_OK
from patchset.plumbing.ui import Console
from patchset.upstreams.registry import UPSTREAMS

EXIT_CODES = f"""\
exit status:
  {EXIT_OK}  every branch was made and every gate passed on each (upstream lint, upstream's tests that run here)
  {EXIT_GATE_FAILED}  a gate failed on a branch (the message names both); the branches are kept to be fixed
  {EXIT_BAD_INPUT}  bad input: usage; not a verl/Trinity-RFT git checkout; a version the series does not target;
     uncommitted changes; the branch exists (--force replaces it); bad series or patch; no git identity and no
     --author; nothing that can be sent from a checkout without upstream's history (give a clone)
  {EXIT_DOES_NOT_APPLY}  a patch, or a group's upstream-tests patch, does not apply with git am, or upstream's commit
     does not cherry-pick and its resolution patch does not resolve it; no branch was made
"""
EXIT_CODES += CACHE_WAIT_HELP + INTERNAL_HELP


def register(commands: argparse._SubParsersAction, name: str, help: str) -> Run:
    """Add ``export-pr``'s parser to the top-level ``commands``; a Ctrl-C ends it as one ``error: interrupted``."""
    description = pr_export.__doc__.split("\n\n", 1)[1] if pr_export.__doc__ else None
    parser = add_parser(commands, name, help, prog="scripts/export-pr.sh", description=description, epilog=EXIT_CODES)
    parser.add_argument("upstream", choices=tuple(UPSTREAMS), help="which series to send")
    parser.add_argument(
        "checkout",
        metavar="CHECKOUT",
        help="your git checkout of that upstream: a clone with its history (each PR on the branch that takes it), or "
        "a checkout at a targeted release",
    )
    parser.add_argument(
        "--group",
        metavar="NAME",
        action="append",
        help="make only this group's branch; repeat for several (default: one branch per group of the series)",
    )
    parser.add_argument(
        "--branch", metavar="NAME", help="branch to make, for one group (default: patchset/<series>-<group>)"
    )
    parser.add_argument("--force", action="store_true", help="replace the branch if it exists")
    parser.add_argument(
        "--author",
        metavar="'NAME <EMAIL>'",
        help="author and committer of the commits made from patches (default: your git identity, user.name and "
        "user.email); a cherry-pick keeps upstream's author, with you as committer",
    )
    parser.add_argument(
        "--rerun-gates",
        action="store_true",
        help="run every gate, even one that passed on exactly the same content before (default: such a pass, "
        "recorded in <cache>/gates/ by the sha256 of the branch's tree, the trees its tests import, the test venv's "
        "lock and the gate's code and arguments, is reused and said so)",
    )
    add_common_options(parser)
    return Run(_export, handle_signals=False, interrupted="", parse=parser.parse_args)


def _export(args: argparse.Namespace, console: Console, guard: signals.Guard) -> int:
    workspace = workspace_from(args)
    request = ExportRequest(
        args.upstream,
        Path(args.checkout).expanduser().resolve(),
        only_groups=args.group or (),
        branch=args.branch,
        force=args.force,
        gate_records=None if args.rerun_gates else workspace.cache.root / "gates",
        author=args.author,
    )
    return pr_export.export_pr(request, workspace, console)
