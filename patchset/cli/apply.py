"""Command line: ``python -m patchset apply [PATH ...]`` (``scripts/apply.sh``)."""

from __future__ import annotations

import argparse
import dataclasses

from patchset.apply.job import ApplyOptions, run_apply
from patchset.cli.exits import INTERNAL_HELP
from patchset.cli.options import add_common_options, workspace_from
from patchset.cli.startup import Run, add_parser
from patchset.plumbing import signals
from patchset.plumbing.errors import (
    EXIT_BAD_INPUT,
    EXIT_DOES_NOT_APPLY,
    EXIT_EARLIER_SERIES,
    EXIT_LOCKED,
    EXIT_OK,
    EXIT_TESTS_FAILED,
    EXIT_TIMED_OUT,
)
from patchset.plumbing.limits import TIME_SCALE_VARIABLE
from patchset.plumbing.ui import Console
from patchset.testenv.regression import SUITE_LIMIT_S

EXIT_CODES = f"""\
exit status:
  {EXIT_OK}  done: every patch applied, already applied or skipped: in upstream by content, or fixed upstream by
     behaviour (its tests pass on the tree as shipped); and the regression tests passed, if run
  {EXIT_TESTS_FAILED}  the regression tests failed
  {EXIT_BAD_INPUT}  bad input: usage; not a verl/Trinity-RFT git checkout (or its files untracked); unsupported
     version (without --check or --force-version); uncommitted changes in files a patch changes; the series
     applied out of order; a read-only tree; bad series or corrupt/truncated patch; sha256 mismatch, PyPI
     unreachable with no sdist cached, failed fetch. Nothing was changed.
  {EXIT_DOES_NOT_APPLY}  a patch does not apply (or cannot be reverted) and upstream has not fixed its bug either: its
     tests fail on the tree as shipped, or could not run (--no-test, no test environment: the message gives the
     command that decides it); the tree is left exactly as it was, and the message says whether a 3-way merge would
     resolve it (--3way)
  {EXIT_LOCKED}  another run holds one of the trees (its lock is <git-dir>/patchset/lock), or, without PATH, a patched
     tree of the cache (<cache>/.locks/), or kept a pinned release in the cache busy past $PATCHSET_CACHE_WAIT
     seconds (default 600): the message names its pid, when it started and its command. Nothing was changed
  {EXIT_EARLIER_SERIES}  a tree holds an earlier series of this patchset (recorded by apply, or recognised by content
     from patches/history.json): the message names it and each patch's state; nothing was changed. --upgrade
     replaces it
{INTERNAL_HELP}\
  {EXIT_TIMED_OUT}  a run of the regression tests hung: still running past its limit (--test-timeout; default
     {SUITE_LIMIT_S} s times ${TIME_SCALE_VARIABLE}), it was ended; one line names the test it was in and the file that
     keeps the stacks of its processes (printed above it). The trees are as after a test failure
  130, 143, 129  interrupted by SIGINT (Ctrl-C), SIGTERM or SIGHUP: every tree changed in the run was restored
     first (a signal that arrives while a patch is being written waits until it is written)
  141  its output was closed mid-run (`| head`), ended as SIGPIPE ends a command: every tree changed was restored
"""

APPLY_DESCRIPTION = """\
Apply the patch series to verl / Trinity-RFT trees.

Without PATH: fetch the default pinned releases (verl 0.8.0, trinity-rft 0.6.0) from PyPI into the cache
(verified by sha256), make fresh patched clones of them under <cache>/patched/, apply the series there and run
the regression tests on them. The vanilla checkouts under <cache>/upstreams/ are never modified.

With PATHs: each PATH is the root of a verl or Trinity-RFT git checkout; the series for its version is applied to
the work tree (no commit, no index change), then the regression tests run on the given trees.

Every patch is checked, in order, before any is applied: all or nothing, and running again is safe. A patch
upstream already has is skipped, by its header (Applied-Upstream, Upstream-Check) or, when it neither applies nor
is recognised so, by behaviour: its own regression tests pass on the tree as shipped. A release no pin names is
refused unless --force-version or --check. Each tree is locked for the run (<git-dir>/patchset/lock), and a run
killed outright is undone by the next. docs/guide.md says more.
"""

APPLY_EPILOG = f"""{EXIT_CODES}
examples:
  scripts/apply.sh                       patch the pinned releases in .cache/ and test them
  scripts/apply.sh --check ~/src/verl    dry run on your own checkout
  scripts/apply.sh ~/src/verl ~/src/Trinity-RFT
  scripts/apply.sh --reverse ~/src/verl  take the patches out again
  scripts/apply.sh --check ~/src/verl-0.9.2   a new release: what applies, what upstream has, what conflicts
"""


def cmd_apply(args: argparse.Namespace, console: Console, guard: signals.Guard) -> int:
    """``apply``: see ``APPLY_DESCRIPTION``; the run itself is ``patchset.apply.job``."""
    options = ApplyOptions(**{field.name: getattr(args, field.name) for field in dataclasses.fields(ApplyOptions)})
    workspace = workspace_from(args)
    return run_apply(args.paths, workspace, options, console=console, guard=guard, command_line=args.command_line)


def register(commands: argparse._SubParsersAction, name: str, help: str) -> Run:
    """Add ``apply``'s parser to the top-level ``commands``; the top-level parser parses its line."""
    apply = add_parser(commands, name, help, description=APPLY_DESCRIPTION, epilog=APPLY_EPILOG)
    apply.add_argument("paths", nargs="*", metavar="PATH", help="root of a verl or Trinity-RFT git checkout")
    apply.add_argument(
        "--check",
        action="store_true",
        help="dry run: say for each patch whether it would apply, is already applied, is skipped (in upstream by "
        "content, or fixed upstream by behaviour) or does not apply, and what to do; change nothing; works on a "
        "release no pin names too (exit codes as apply's)",
    )
    apply.add_argument(
        "--reverse",
        action="store_true",
        help="take the series out again (last patch first); patches not applied are reported and skipped; needs PATH",
    )
    apply.add_argument(
        "--no-test",
        action="store_true",
        help="do not run the regression tests afterwards, nor the tests of a patch that does not apply (which could "
        "show upstream fixed its bug its own way: it stays a conflict, exit 3)",
    )
    apply.add_argument(
        "--test-timeout",
        type=float,
        metavar="SECONDS",
        help=f"how long one run of the regression tests may take before it is ended as hung, exit {EXIT_TIMED_OUT} "
        f"(default {SUITE_LIMIT_S} s times ${TIME_SCALE_VARIABLE}, which raises every limit on a slower machine)",
    )
    apply.add_argument(
        "--force-version",
        action="store_true",
        help="apply the series to a version that upstreams.toml does not pin (warns); --check reports on one "
        "without it",
    )
    apply.add_argument(
        "--allow-dirty", action="store_true", help="patch even though files a patch changes have uncommitted changes"
    )
    apply.add_argument(
        "--3way",
        dest="three_way",
        action="store_true",
        help="apply a patch that does not apply as it is with a 3-way merge against the file it was made for "
        "(git apply --3way on a scratch copy; needs that file's original blob in the repository); still all or "
        "nothing, never the index. Never done unless asked: a patch that does not apply exits 3 and says "
        "whether this would resolve it",
    )
    apply.add_argument(
        "--upgrade",
        action="store_true",
        help="replace the earlier series of this patchset that a tree holds with today's: take it out exactly (its "
        "files back to the release's content), apply today's series, run the regression tests; all or nothing (a "
        "tree is restored if the tests fail); with --check, say what it would do",
    )
    add_common_options(apply)
    return Run(cmd_apply)
