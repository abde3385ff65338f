"""Send the series upstream: one PR branch per concern in the user's checkout, each checked by the upstream's gates.

``python -m patchset export-pr verl|trinity CHECKOUT`` (``scripts/export-pr.sh``) makes one branch
``patchset/<series>-<group>`` in CHECKOUT, a verl or Trinity-RFT git checkout at a version the series targets, for
each concern group of ``patches/<series>/groups`` (``--group NAME``, repeatable, for some). A group's branch
starts on the release tag (HEAD when the checkout has no such tag), or on the branch of the group it is ``after``.
It holds one commit per patch, as ``git am --keep-non-patch`` records it (author, date, subject and message from
the patch header) except that the lines meant for this project are dropped from the message: the DEP-3 fields
(``Bug:``, ``Forwarded:``, ...) and the "Why this patch ... Drop it ..." paragraph; upstream's PR template asks
for neither. A ``fold`` group becomes one commit instead, titled and described by ``pr/<group>.md``, so the PR
carries only the final state of each file and test.

A group's ``pr/<group>.upstream-tests.patch`` (its change to upstream test files the release sdist lacks) is
committed after the group's commits, as a commit of its own, when the checkout has those files; when it lacks
them the branch is made without it and the summary says so.

Each branch is built in a temporary ``git worktree`` of CHECKOUT, so the user's work tree, index and checked-out
branch are never touched: a branch ref is created only once every patch of it has applied. The upstream's lint
gates (``patchset.export.pr_gates``: its pre-commit hooks at its pinned versions, on the files the group changes) and
upstream's own tests of what the group changes (``patchset.export.test_selection``: those named for a changed
module or importing it, directly or through a package's re-export or registry; those that cannot run here are
named with the reason), plus the group's own tests, run on each branch with the test venv. The PR title and a
body in the upstream's PR template are printed for each branch, with the command that pushes it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from patchset.export.branch_gates import Gating
from patchset.export.branches import Branch, BranchJob, make_branches
from patchset.export.pr_gates import Gates
from patchset.export.pr_text import pr_body, pr_title
from patchset.plumbing import gitops
from patchset.plumbing.errors import EXIT_OK, BadInput
from patchset.plumbing.ui import Console, display_path
from patchset.series.groups import chain, load_groups
from patchset.series.model import Patch, load_series
from patchset.testenv.venv import ensure_venv
from patchset.upstreams.detect import detect
from patchset.upstreams.pins import Pin, Pins, at_least
from patchset.upstreams.workspace import Workspace

EXIT_GATE_FAILED = 1


@dataclass(frozen=True)
class ExportRequest:
    """What the user asked for: ``upstream``'s series sent from their ``checkout``; ``only_groups``: those groups
    and the groups they come after (default: every group); ``branch`` names the one branch made, ``force`` replaces
    existing branches; ``gate_records``: the folder where gate passes are remembered by content (None: every gate
    runs)."""

    upstream: str
    checkout: Path
    only_groups: Sequence[str] = ()
    branch: str | None = None
    force: bool = False
    gate_records: Path | None = None


def _check_checkout(checkout: Path, key: str, pins: Pins) -> tuple[Pin, str]:
    """The pin the checkout is at and the commit to branch from; ``BadInput`` for anything else."""
    shown = display_path(checkout)
    found = detect(checkout, shown)
    if found.key != key:
        raise BadInput(f"{shown} is a {found.label} checkout, not {key}; pass the {key} checkout or the other series")
    pin = pins.find(key, found.version)
    if pin is None or not pin.target:  # a companion-only pin is tested beside, never patched
        targets = ", ".join(pins.versions(key)) or "none"
        raise BadInput(
            f"{shown} is {found.label} {found.version} ({found.marker}), a version the {key} series does not target "
            f"(targets: {targets}); check out one of those releases"
        )
    tree = gitops.find_worktree(checkout)
    if tree is None or tree.prefix:
        raise BadInput(f"{shown} is not the top of a git checkout; pass the root of a git clone of {pin.label}")
    for state in ("rebase-merge", "rebase-apply", "MERGE_HEAD", "CHERRY_PICK_HEAD"):
        if (checkout / (gitops.git_value(checkout, "rev-parse", "--git-path", state) or state)).exists():
            raise BadInput(f"{shown} has a rebase, git am, merge or cherry-pick in progress; finish or abort it first")
    if not gitops.is_clean(checkout):
        raise BadInput(f"{shown} has uncommitted changes; commit or stash them first (git stash -u)")
    base = gitops.tag_commit(checkout, pin.tag) or gitops.head_commit(checkout)
    if base is None:
        raise BadInput(f"{shown} has no commit to branch from")
    return pin, base


def _select_patches(series_patches: Sequence[Patch], pin: Pin, console: Console) -> dict[int, Patch]:
    """{series number: patch} of the patches to send: those upstream has at ``pin`` are skipped."""
    chosen: dict[int, Patch] = {}
    for number, patch in enumerate(series_patches, start=1):
        since = patch.upstream_since
        if since and at_least(pin.version, since):
            console.step(f"Skipping {patch.name}: in upstream since {since}")
        else:
            chosen[number] = patch
    return chosen


def _report(gates: Gates, console: Console) -> None:
    for hook in gates.lint.hooks:
        console.step(f"lint {hook.name}: {hook.status}")
    if not gates.lint.passed:
        print(gates.lint.output.rstrip(), flush=True)
    console.summary(f"upstream lint: {'passed' if gates.lint.passed else 'FAILED'} ({gates.lint.summary()})")
    if not gates.tests.passed:
        print(gates.tests.output.rstrip()[-6000:], flush=True)
    shown = " ".join(gates.tests.files) or "none"
    console.summary(
        f"upstream CPU tests: {'passed' if gates.tests.passed else 'FAILED'} ({gates.tests.summary}; {shown})"
    )
    for test in gates.tests.upstream:
        console.summary(f"  upstream test run: {test.path} ({test.why})")
    for test in gates.tests.not_run:
        console.summary(f"  upstream test NOT run: {test.path} ({test.why}): {test.not_run}")
    for note in gates.tests.notes:
        console.summary(f"  note: {note}")


def _print_pr(pin: Pin, branch: Branch, gates: Gates, shown: str, console: Console) -> None:
    """The branch's gates, its PR title and body; on a failed gate, the error naming both (``shown``: the checkout)."""
    console.summary(f"=== {branch.name} (group {branch.group.name}) ===")
    _report(gates, console)
    title = pr_title(branch.patches, branch.group)
    body = pr_body(
        pin.key, pin.tag, branch.patches, branch.messages, branch.changed, gates, branch.group, branch.base_commits
    )
    print(f"\n----- PR title -----\n{title}\n----- PR body -----\n{body}----- end -----", flush=True)
    if not gates.passed:
        print(
            f"error: {' and '.join(gates.failures())} failed on branch {branch.name}; the branch is kept in {shown}: "
            "fix the patch, then run again with --force",
            file=sys.stderr,
            flush=True,
        )


def _summarise(pin: Pin, branch: Branch, gates: Gates, console: Console) -> None:
    """The branch's line of the closing summary, and a warning when its upstream-tests patch was not applied."""
    state = "gates passed" if gates.passed else "a gate FAILED"
    ran = f"{len(gates.tests.upstream)} upstream test file(s) ran, {len(gates.tests.not_run)} not run"
    tests = branch.upstream_tests
    extra = (
        ""
        if tests is None
        else f"; {display_path(tests.path)} "
        + ("applied" if tests.applied else f"NOT applied (the checkout lacks {', '.join(tests.missing)})")
    )
    console.summary(
        f"{pin.label}: branch {branch.name} ({len(branch.patches)} patch(es) as "
        f"{'one folded commit' if branch.group.fold and len(branch.patches) > 1 else 'one commit each'}); {state}; "
        f"{ran}{extra}"
    )
    if tests is not None and not tests.applied:
        console.warn(tests.note())


def export_pr(request: ExportRequest, workspace: Workspace, console: Console) -> int:
    """Make and gate one branch per concern group of the requested upstream's series in its checkout, with the
    series and pins of ``workspace`` (its cache: the other upstreams the tests import); print each PR's title and
    body. ``EXIT_GATE_FAILED`` when a gate failed on a branch, else ``EXIT_OK``."""
    checkout = request.checkout
    pin, release = _check_checkout(checkout, request.upstream, workspace.pins)
    series = load_series(workspace.patches_dir, pin.series)
    groups = load_groups(series.path.parent, len(series.patches))
    only = request.only_groups
    wanted = list(groups) if not only else [chain(groups, name)[-1] for name in dict.fromkeys(only)]
    if request.branch and len(wanted) > 1:
        raise BadInput(f"--branch names one branch, but the {pin.series} series has {len(wanted)} groups; add --group")
    chosen = _select_patches(series.patches, pin, console)
    if not chosen:
        raise BadInput(f"every patch of the {pin.series} series is in {pin.label} already; nothing to send upstream")
    for patch in chosen.values():
        if since := patch.fields.get("Applied-Upstream"):
            console.warn(f"{patch.name} is in upstream {since}: send it only as a backport to the {pin.tag} line")
    gating = Gating(ensure_venv(), request.gate_records, workspace)
    console.step(
        f"Making {len(wanted)} branch(es), one per group of {display_path(series.path.parent)}, on "
        f"{pin.tag if gitops.tag_commit(checkout, pin.tag) else 'HEAD'} ({release[:12]}) in a temporary worktree of "
        f"{display_path(checkout)}"
    )
    job = BranchJob(checkout, pin, release, groups, wanted, chosen, request.branch, request.force)
    made = make_branches(job, gating, console)

    shown = display_path(checkout)
    for branch, gates in made:
        _print_pr(pin, branch, gates, shown, console)
    for branch, gates in made:
        _summarise(pin, branch, gates, console)
    if not all(gates.passed for _, gates in made):
        return EXIT_GATE_FAILED
    names = " ".join(branch.name for branch, _ in made)
    console.summary(f"Your checked-out branch is unchanged. Push with: git -C {shown} push <your-fork> {names}")
    return EXIT_OK
