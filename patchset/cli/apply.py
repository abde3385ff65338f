"""Command line: ``python -m patchset apply [PATH ...]`` and ``python -m patchset fetch``."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

from patchset.apply.engine import Plan, Target, plan_target, refusal, report, target_for_path, target_for_pin
from patchset.apply.locking import locked
from patchset.apply.transaction import apply_plans
from patchset.cli import COMMANDS
from patchset.cli.exits import run_reporting_errors
from patchset.cli.options import add_common_options, usage_exit_status
from patchset.plumbing import signals, tempdirs
from patchset.plumbing.errors import (
    EXIT_BAD_INPUT,
    EXIT_DOES_NOT_APPLY,
    EXIT_LOCKED,
    EXIT_OK,
    EXIT_TESTS_FAILED,
    BadInput,
)
from patchset.plumbing.paths import REPO_ROOT
from patchset.plumbing.ui import Console, display_path
from patchset.upstreams.fetch import Cache, ensure_upstream, fresh_patched_clone, resolve_cache
from patchset.upstreams.pins import Pins, load_pins

EXIT_CODES = f"""\
exit status:
  {EXIT_OK}  done: every patch applied, already applied or skipped (and the regression tests passed, if run)
  {EXIT_TESTS_FAILED}  the regression tests failed
  {EXIT_BAD_INPUT}  bad input: usage; not a verl/Trinity-RFT git checkout (or its files untracked); unsupported
     version; uncommitted changes in files a patch changes; the series applied out of order; a read-only tree;
     bad series or corrupt/truncated patch; sha256 mismatch, PyPI unreachable with no sdist cached, failed fetch.
     Nothing was changed.
  {EXIT_DOES_NOT_APPLY}  a patch does not apply (or cannot be reverted); the tree is left exactly as it was, and the
     message says whether a 3-way merge would resolve it (--3way)
  {EXIT_LOCKED}  another run holds one of the trees (its lock is <git-dir>/patchset/lock): the message names its pid,
     when it started and its command. Nothing was changed
  130, 143, 129  interrupted by SIGINT (Ctrl-C), SIGTERM or SIGHUP: every tree changed in the run was restored
     first (a signal that arrives while a patch is being written waits until it is written)
"""

APPLY_DESCRIPTION = """\
Apply the patch series to verl / Trinity-RFT trees.

Without PATH: fetch the default pinned releases (verl 0.8.0, trinity-rft 0.6.0) from PyPI into the cache
(verified by sha256, reused afterwards), make fresh patched clones of them under <cache>/patched/, apply the
series there and run the regression tests on them. The vanilla checkouts under <cache>/upstreams/ are never
modified.

With PATHs: each PATH is the root of a verl or Trinity-RFT git checkout; its version is read from the tree,
and the series for it is applied to the work tree (plain git apply: no commit, no index change), then the
regression tests run on the given trees.

Every patch is checked, in order, before any is applied; a patch that is already applied is reported and left
alone, so running again is safe. If one patch does not apply, nothing is applied; if applying fails or is
interrupted half-way, every tree is restored as it was. A patch is never reversed to make it fit: one that only
reverts is reported as already applied, and --reverse is the only way to take patches out.

One run per tree: every run (--check and --reverse too) locks each tree in its git directory
(<git-dir>/patchset/lock) until it ends; a second run exits 4 naming the first. The copy taken before the first
change is kept beside the lock, so a run killed outright (SIGKILL) leaves it there, and the next run restores the
tree from it, says so, then does what it was asked.
"""

APPLY_EPILOG = (
    EXIT_CODES
    + """
examples:
  scripts/apply.sh                       patch the pinned releases in .cache/ and test them
  scripts/apply.sh --check ~/src/verl    dry run on your own checkout
  scripts/apply.sh ~/src/verl ~/src/Trinity-RFT
  scripts/apply.sh --reverse ~/src/verl  take the patches out again
"""
)


def _patches_dir(args: argparse.Namespace) -> Path:
    return Path(args.patches_dir).expanduser() if args.patches_dir else REPO_ROOT / "patches"


def _pins(args: argparse.Namespace) -> tuple[Path, Pins]:
    patches_dir = _patches_dir(args)
    return patches_dir, load_pins(patches_dir / "upstreams.toml")


def _refuse_duplicates(targets: Sequence[Target]) -> None:
    seen: dict[str, Target] = {}
    for target in targets:
        if target.key in seen:
            first = seen[target.key]
            raise BadInput(
                f"two {target.key} trees given ({first.shown}, {target.shown}); pass at most one of each kind"
            )
        seen[target.key] = target


def _cached_targets(args: argparse.Namespace, patches_dir: Path, pins: Pins, console: Console) -> list[Target]:
    if args.reverse:
        raise BadInput("--reverse needs a PATH: the patched trees in the cache are rebuilt fresh on every run")
    defaults = pins.defaults()
    if not defaults:
        raise BadInput(f"{pins.source} marks no [[upstream]] as default = true")
    cache = resolve_cache(args.cache, os.environ, REPO_ROOT)
    targets = []
    for pin in defaults:
        vanilla = ensure_upstream(pin, cache, console)
        tree = vanilla if args.check else fresh_patched_clone(pin, vanilla, cache, console)
        targets.append(target_for_pin(pin, tree, patches_dir))
    return targets


def _check(plans: Sequence[Plan], console: Console, *, allow_dirty: bool) -> int:
    for plan in plans:
        report(plan, console)
    for plan in plans:
        if (error := refusal(plan, allow_dirty=allow_dirty)) is not None:
            raise error
    return EXIT_OK


def _regression(trees: Mapping[str, Path], pins: Pins, cache: Cache, console: Console) -> int:
    from patchset.testenv import regression  # imported late: it is the regression work's module, heavier to import

    shown = ", ".join(f"{key} at {display_path(path)}" for key, path in trees.items())
    console.step(f"Running the regression tests on {shown}")
    returncode = regression.run_regression_tests(trees, expect="fixed", pins=pins, cache=cache, console=console)
    if returncode != 0:
        print(
            f"error: the regression tests failed (exit status {returncode}) on {shown}; see their output above",
            file=sys.stderr,
        )
        return EXIT_TESTS_FAILED
    console.summary("Regression tests passed")
    return EXIT_OK


def cmd_apply(args: argparse.Namespace, console: Console, guard: signals.Guard) -> int:
    """``apply``: see ``APPLY_DESCRIPTION``."""
    if args.three_way and args.reverse:
        raise BadInput(
            "--3way merges patches in; it cannot be combined with --reverse (take a merged patch out "
            "with git checkout or git diff -R | git apply)"
        )
    tempdirs.sweep()  # what runs killed before left in the temp folder
    patches_dir, pins = _pins(args)
    if args.paths:
        targets = [
            target_for_path(path, pins, patches_dir, force_version=args.force_version, console=console)
            for path in args.paths
        ]
        _refuse_duplicates(targets)
    else:
        targets = _cached_targets(args, patches_dir, pins, console)
    with locked(targets, args.command_line, console, guard) as homes:
        plans = [plan_target(target, reverse=args.reverse, merge=args.three_way) for target in targets]
        if args.check:
            return _check(plans, console, allow_dirty=args.allow_dirty)
        for plan in plans:
            if (error := refusal(plan, allow_dirty=args.allow_dirty)) is not None:
                raise error
        for plan in plans:
            if plan.dirty:
                verb = "reverting" if plan.reverse else "patching"
                console.warn(f"{verb} despite uncommitted changes in {', '.join(plan.dirty)} (--allow-dirty)")
        apply_plans(plans, console, guard, homes)
        if args.reverse:
            return EXIT_OK
        if args.no_test:
            console.step("Skipping the regression tests (--no-test)")
            return EXIT_OK
        cache = resolve_cache(args.cache, os.environ, REPO_ROOT)
        return _regression({target.key: target.root for target in targets}, pins, cache, console)


def cmd_fetch(args: argparse.Namespace, console: Console, guard: signals.Guard) -> int:
    """``fetch``: make the vanilla checkouts of the default (or all) pins in the cache and print their paths."""
    _, pins = _pins(args)
    cache = resolve_cache(args.cache, os.environ, REPO_ROOT)
    for pin in pins.pins if args.all else pins.defaults():
        checkout = ensure_upstream(pin, cache, console)
        console.summary(f"{pin.label}: {checkout}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="python -m patchset",
        description="Carry fixes for verl and Trinity-RFT as patch series and apply them.",
        epilog=EXIT_CODES + "\nRun 'python -m patchset apply --help' for the main command.",
        formatter_class=formatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    apply = commands.add_parser(
        "apply",
        help=COMMANDS["apply"].help,
        description=APPLY_DESCRIPTION,
        epilog=APPLY_EPILOG,
        formatter_class=formatter,
    )
    apply.add_argument("paths", nargs="*", metavar="PATH", help="root of a verl or Trinity-RFT git checkout")
    apply.add_argument(
        "--check",
        action="store_true",
        help="dry run: say for each patch whether it would apply, is already applied or does not apply; "
        "change nothing (exit 0 when all would apply or are applied, 3 when one does not apply, 2 for what "
        "apply would refuse: uncommitted changes, a series applied out of order, a read-only tree; 4 when another "
        "run holds the tree)",
    )
    apply.add_argument(
        "--reverse",
        action="store_true",
        help="take the series out again (last patch first); patches not applied are reported and skipped; needs PATH",
    )
    apply.add_argument("--no-test", action="store_true", help="do not run the regression tests afterwards")
    apply.add_argument(
        "--force-version",
        action="store_true",
        help="try the series on a version that upstreams.toml does not pin (warns)",
    )
    apply.add_argument(
        "--allow-dirty",
        action="store_true",
        help="patch even though files a patch changes have uncommitted changes",
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
    add_common_options(apply)
    apply.set_defaults(handler=cmd_apply)

    fetch = commands.add_parser(
        "fetch",
        help=COMMANDS["fetch"].help,
        description=textwrap.dedent(
            """\
            Fetch the default pinned releases (all pins with --all) from PyPI, verify their sha256 and unpack
            each into a git checkout tagged like the upstream release, under <cache>/upstreams/.
            Cached checkouts are reused."""
        ),
        epilog=EXIT_CODES,
        formatter_class=formatter,
    )
    fetch.add_argument("--all", action="store_true", help="every pin in upstreams.toml, not only the defaults")
    add_common_options(fetch)
    fetch.set_defaults(handler=cmd_fetch)
    for name, command in COMMANDS.items():  # the others are parsed by their own modules (see patchset.cli)
        if command.module != __name__:
            commands.add_parser(name, help=command.help, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2)
        return usage_exit_status(exc, EXIT_BAD_INPUT)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT
    console = Console(quiet=args.quiet)
    args.command_line = "python -m patchset " + shlex.join(sys.argv[1:] if argv is None else argv)
    with signals.handled() as guard:
        return run_reporting_errors(lambda: args.handler(args, console, guard))
