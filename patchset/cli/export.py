"""Command line for maintainers of the series: ``python -m patchset export COMMAND`` (``scripts/export.sh``); each
subcommand's help below says what it does."""

from __future__ import annotations

import argparse
import sys
import textwrap
from argparse import ArgumentParser
from collections.abc import Callable, Sequence
from pathlib import Path

from patchset.cli.exits import INTERNAL_HELP
from patchset.cli.options import add_common_options, workspace_from
from patchset.cli.startup import Run, add_parser, needs_command
from patchset.export.series_export import BRANCH, describe, make_checkout, plan_export, write_export
from patchset.plumbing import cachelock
from patchset.plumbing.errors import EXIT_BAD_INPUT, EXIT_DOES_NOT_APPLY, EXIT_LOCKED, EXIT_OK, BadInput
from patchset.plumbing.paths import REPO_ROOT
from patchset.plumbing.ui import Console, display_path
from patchset.series import history, tables
from patchset.series.copies import checkout_files
from patchset.series.lint import lint_patches_dir
from patchset.series.model import load_series
from patchset.upstreams.fetch import ensure_upstream
from patchset.upstreams.pins import Pin, release_key
from patchset.upstreams.registry import UPSTREAMS
from patchset.upstreams.workspace import Workspace, patches_dir_of

EXIT_CHANGES = 1

UPSTREAM_HELP = (
    f"which series: {' or '.join(UPSTREAMS)} (keys of upstreams.toml: the default pin's series), or a series folder "
    "named in upstreams.toml (verl-0.7: made against the newest release it targets)"
)

EXIT_CODES = f"""\
exit status:
  {EXIT_OK}  done; export --dry-run: the export is byte-identical to the series; lint: no problems
  {EXIT_CHANGES}  export --dry-run: the export would change the files listed; lint: the problems listed; history,
     tables --check: the file is out of date; upstream-prs: a group's upstream patch does not apply
  {EXIT_BAD_INPUT}  bad input: usage; not a maintainer checkout (no tag, no branch {BRANCH}, a rebase in
     progress); unknown upstream; bad series or corrupt patch; failed fetch
  {EXIT_DOES_NOT_APPLY}  checkout: a patch of the series does not apply to the pinned release
  {EXIT_LOCKED}  checkout: another run is making a checkout into DEST, or kept the pinned release busy in the cache
     past $PATCHSET_CACHE_WAIT seconds (default 600); the message names it; nothing was changed
"""
EXIT_CODES += INTERNAL_HELP

DESCRIPTION = """\
Edit and check the patch series.

To edit a patch: make a maintainer checkout (the pinned release with each patch of the series as a commit on
branch patches), change it with git (git commit --amend, git rebase -i <tag>, new commits), then export: the
series folder and its series file are rewritten from the branch. An unchanged branch exports byte-identical
files, so export --dry-run is also the check that the committed patches are what the tooling writes.
"""

EPILOG = (
    EXIT_CODES
    + """
examples:
  scripts/export.sh checkout verl                 .cache/maintain/verl-0.8.0, branch patches on v0.8.0
  scripts/export.sh export verl --dry-run         would the export change patches/verl/? (exit 1: yes)
  scripts/export.sh export verl                   write patches/verl/ from the checkout
  scripts/export.sh checkout verl-0.7             .cache/maintain/verl-0.7.1: the verl-0.7 series on v0.7.1
  scripts/export.sh lint                          check every series folder
  scripts/export.sh history                       write patches/history.json from the git history
  scripts/export.sh tables --write                write README.md's and docs/loss-audit.md's tables
"""
)


def _pin(args: argparse.Namespace, workspace: Workspace) -> Pin:
    """An upstream key's default pin; for a series folder (verl-0.7), the newest release it targets."""
    pins = workspace.pins
    of_series = [p for p in pins.pins if p.series == args.upstream and p.target]
    pin = pins.default_for(args.upstream) or max(of_series, key=lambda p: release_key(p.version), default=None)
    if pin is None:
        known = ", ".join(
            dict.fromkeys([*(p.key for p in pins.defaults()), *(p.series for p in pins.pins if p.target)])
        )
        raise BadInput(f"{pins.source} has no default pin or series {args.upstream!r}; known: {known or 'none'}")
    return pin


def _checkout_path(workspace: Workspace, pin: Pin, given: str | None) -> Path:
    if given:
        return Path(given).expanduser().resolve()
    return workspace.cache.root / "maintain" / pin.dirname


def cmd_checkout(args: argparse.Namespace, console: Console) -> int:
    """``checkout``: the pinned release with the series as commits on branch ``patches``."""
    workspace = workspace_from(args)
    patches_dir, cache, pin = workspace.patches_dir, workspace.cache, _pin(args, workspace)
    series = load_series(patches_dir, pin.series)
    dest = _checkout_path(workspace, pin, args.dest)
    # a second checkout into DEST at once is refused (exit 4), naming the first
    entry = cachelock.entry_for("maintain", dest)
    with cachelock.hold(cache.root, entry, f"the maintainer checkout {display_path(dest)}", console, wait=False):
        if dest.exists() and not args.force:  # it may hold edits not exported yet
            raise BadInput(
                f"{display_path(dest)} already exists; export what it holds first, then remove it or pass --force "
                f"to replace it with a fresh checkout"
            )
        vanilla = ensure_upstream(pin, cache, console)
        console.step(f"Making a maintainer checkout of {pin.label} in {display_path(dest)}")
        names = [patch.name for patch in series.patches]
        files = checkout_files(patches_dir, patches_dir / pin.series, names)
        make_checkout(pin, vanilla, list(zip(names, files, strict=True)), dest, console)
    count = len(series.patches)
    console.summary(
        f"{pin.label}: {display_path(dest)}, branch {BRANCH} = {pin.tag} + {count} patch{'es' if count != 1 else ''}; "
        f"edit with git (commit --amend, rebase -i {pin.tag}), then: scripts/export.sh export {args.upstream}"
        + (f" {display_path(dest)}" if args.dest else "")
    )
    return EXIT_OK


def cmd_export(args: argparse.Namespace, console: Console) -> int:
    """``export``: write (or with --dry-run compare) the series from a maintainer checkout."""
    workspace = workspace_from(args)
    pin = _pin(args, workspace)
    checkout = _checkout_path(workspace, pin, args.checkout)
    export = plan_export(pin, checkout, workspace.patches_dir, console)
    folder = display_path(export.folder)
    count = len(export.names)
    patches = f"{count} patch{'es' if count != 1 else ''}"
    if not export.changes:
        console.summary(f"{folder}: up to date ({patches} byte-identical to the export of {export.source})")
        return EXIT_OK
    if args.dry_run:
        print("\n".join(line for change in export.changes for line in describe(change)), flush=True)
        files = f"{len(export.changes)} file{'s' if len(export.changes) != 1 else ''}"
        print(
            f"{folder}: the export of {export.source} would change {files} (listed above); "
            f"run without --dry-run to write the export, or fix the checkout",
            flush=True,
        )
        return EXIT_CHANGES
    write_export(export)
    for change in export.changes:
        detail = f" (was {change.old_name})" if change.old_name else ""
        console.step(f"{change.kind.capitalize()} {display_path(change.path)}{detail}")
    console.summary(f"{folder}: exported {patches} from {export.source}; {len(export.changes)} file(s) changed")
    return EXIT_OK


def cmd_lint(args: argparse.Namespace, console: Console) -> int:
    """``lint``: one line per problem of the series folders (a bad ``upstreams.toml`` among them)."""
    patches_dir = patches_dir_of(args.patches_dir)
    folders, problems = lint_patches_dir(patches_dir)
    for problem in problems:
        print(problem, flush=True)
    shown = display_path(patches_dir)
    if problems:
        console.summary(f"{shown}: {len(problems)} problem{'s' if len(problems) != 1 else ''} in {folders} series")
        return EXIT_CHANGES
    console.summary(f"{shown}: {folders} series, no problems")
    return EXIT_OK


def cmd_history(args: argparse.Namespace, console: Console) -> int:
    """``history``: write (or with --check, check) ``patches/history.json``."""
    patches_dir = patches_dir_of(args.patches_dir)
    if args.check:
        lacking = history.stale(patches_dir)
        for line in lacking:
            path = patches_dir / history.HISTORY_FILE
            print(f"error: {path} lacks {line}; regenerate it: {history.GENERATOR}", file=sys.stderr)
        return EXIT_CHANGES if lacking else EXIT_OK
    data, written = history.write(patches_dir)
    print(f"wrote {written[0]}: {len(data['revisions'])} revisions, {len(data['series'])} series")
    for path in written[1:]:
        print(f"wrote {path}")
    return EXIT_OK


def cmd_tables(args: argparse.Namespace, console: Console) -> int:
    """``tables``: print, write (--write) or check (--check) the tables made from the series' ``parts.toml``."""
    patches_dir = REPO_ROOT / "patches"
    if args.check:
        drifted = tables.drifted(REPO_ROOT, patches_dir)
        for path in drifted:
            print(f"{path}: the table is out of date (run: {tables.WRITE})")
        return EXIT_CHANGES if drifted else EXIT_OK
    if args.write:
        tables.write(REPO_ROOT, patches_dir)
        print(f"* Wrote the tables into {', '.join(relative for relative, *_ in tables.TABLES)}")
        return EXIT_OK
    print(tables.patch_table(patches_dir) + "\n\n" + tables.audit_table(patches_dir))
    return EXIT_OK


def cmd_upstream_prs(args: argparse.Namespace, console: Console) -> int:
    """``upstream-prs``: check that each group's ``pr/<group>.upstream.patch`` applies to the files it names."""
    from patchset.export.upstream_prs import check_series

    workspace = workspace_from(args)
    return check_series(args.series, workspace.patches_dir, workspace.cache.root, workspace.pins, download=args.fetch)


Handler = Callable[[argparse.Namespace, Console], int]


def _subcommand(commands: argparse._SubParsersAction, handler: Handler, help: str, description: str) -> ArgumentParser:
    """The parser of the subcommand ``handler`` runs, named for it (``cmd_upstream_prs``: ``upstream-prs``)."""
    name = handler.__name__.removeprefix("cmd_").replace("_", "-")
    parser = add_parser(commands, name, help, description=textwrap.dedent(description), epilog=EXIT_CODES)
    parser.set_defaults(handler=handler)
    return parser


def register(commands: argparse._SubParsersAction, name: str, help: str) -> Run:
    """Add ``export``'s parser and its subcommands'; each parses its own line, options between the arguments."""
    parser = add_parser(commands, name, help, prog="scripts/export.sh", description=DESCRIPTION, epilog=EPILOG)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    checkout = _subcommand(
        commands,
        cmd_checkout,
        "make a git checkout holding the series as commits, to edit patches in",
        f"""\
            Clone the pinned vanilla checkout of UPSTREAM into DEST and commit each patch of its series with git am,
            in order, on branch {BRANCH} off the release tag; each message ends with the trailer Patch-Filename:
            <its file>, and the same series always gives the same commits (docs/maintaining.md). DEST defaults to
            <cache>/maintain/<name>-<version>.""",
    )
    checkout.add_argument("upstream", metavar="UPSTREAM", help=UPSTREAM_HELP)
    checkout.add_argument("dest", nargs="?", metavar="DEST", help="where to make the checkout")
    checkout.add_argument("--force", action="store_true", help="replace DEST if it exists (its commits are lost)")
    add_common_options(checkout)

    export = _subcommand(
        commands,
        cmd_export,
        "write the series from a maintainer checkout (--dry-run: fail if that would change anything)",
        f"""\
            Export the committed <tag>..{BRANCH} of CHECKOUT with git format-patch (byte-stable) into
            patches/<series>/ and rewrite its series file (comment lines kept). A commit keeps the name of its
            Patch-Filename: trailer, renumbered to its place; a new one is named NNNN-<area>-<slug>.patch from its
            subject. CHECKOUT defaults to <cache>/maintain/<name>-<version>.""",
    )
    export.add_argument("upstream", metavar="UPSTREAM", help=UPSTREAM_HELP)
    export.add_argument("checkout", nargs="?", metavar="CHECKOUT", help="the maintainer checkout to export")
    export.add_argument(
        "--dry-run",
        action="store_true",
        help="write nothing; exit 0 when the export is byte-identical, else 1, listing each file that would "
        "change, be added or be removed, with a short diff",
    )
    add_common_options(export)

    lint = _subcommand(
        commands,
        cmd_lint,
        "check every series folder; one line per problem",
        """\
            Check every series folder: series and folder agree both ways (no missing, unlisted or duplicate
            patch), names NNNN-<area>-<slug>.patch numbered in series order, every patch parses and has a
            Subject and the DEP-3 fields Origin: or Author:, Bug:, Forwarded:, Last-Update: (and
            Applied-Upstream: when Forwarded: says it is upstream), and no added line ends in whitespace.""",
    )
    add_common_options(lint, cache=False)

    made = _subcommand(
        commands,
        cmd_history,
        "write patches/history.json, every series ever landed, from the git history",
        """\
            Write patches/history.json (and, for the repository's own patches/, patchset_overlay/series.json) from
            the landings of patches/ in the history of this checkout, its work tree's series included when they
            differ from HEAD's.""",
    )
    made.add_argument("--check", action="store_true", help="exit 1 when the file lacks a series; write nothing")
    add_common_options(made, cache=False)

    table = _subcommand(
        commands,
        cmd_tables,
        "print README.md's patch table and docs/loss-audit.md's table as the series' parts.toml make them",
        tables.__doc__ or "",
    )
    table.add_argument("--write", action="store_true", help="put them into their files, between the markers")
    table.add_argument("--check", action="store_true", help="exit 1 when a file's table differs")

    prs = _subcommand(
        commands,
        cmd_upstream_prs,
        "check that each group's pr/<group>.upstream.patch applies to upstream's newest files read",
        "Apply each group's pr/<group>.upstream.patch to the upstream file revisions it names; one line per group.",
    )
    prs.add_argument("series", nargs="?", default="trinity", help="series folder of patches/ (default: trinity)")
    prs.add_argument("--fetch", action="store_true", help="download the commits' files that are absent")
    add_common_options(prs)
    subcommands = commands.choices  # each subcommand's parser, by name

    def parse(line: Sequence[str]) -> argparse.Namespace:
        if line and line[0] in subcommands:
            return subcommands[line[0]].parse_intermixed_args(line[1:], argparse.Namespace(command=line[0]))
        return needs_command(parser, parser.parse_args(line))

    return Run(
        lambda args, console, _guard: args.handler(args, console), handle_signals=False, interrupted="", parse=parse
    )
