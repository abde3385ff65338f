"""Send the series upstream: one PR branch per concern in the user's checkout, each checked by the upstream's gates.

``python -m patchset export-pr verl|trinity CHECKOUT`` (``scripts/export-pr.sh``) makes one branch
``patchset/<series>-<group>`` in CHECKOUT for each concern group of ``patches/<series>/groups`` (``--group NAME``,
repeatable, for some), on the release tag (HEAD without it) or on the branch of the group it is ``after``: one
commit per patch (``git am``), its message without the DEP-3 fields and the "Why this patch ... Drop it ..."
paragraph, or one commit for a ``fold`` group, titled and described by ``pr/<group>.md``. Commits carry the user's
git identity (``--author`` overrides it).

On a clone of upstream with its history, each PR is made on the branch that takes it (``onto=`` in ``groups``), for
every series of that upstream, and a group whose patches name upstream's commit is sent as ``git cherry-pick -x``
of it (conflicts resolved by ``pr/<group>.resolution.patch``), gated also by its fix's regression tests. A
``carried=`` group makes no PR; the output names it with the reason. A group's ``pr/<group>.upstream.patch`` is named
with the upstream revisions it was made against (``python -m patchset export upstream-prs`` checks it); its
``pr/<group>.upstream-tests.patch`` is committed after its commits when the checkout has those files.

Each branch is built in a temporary ``git worktree`` of CHECKOUT, so the user's work tree, index and checked-out
branch are never touched, and a branch ref is created only once every patch of it has applied. Upstream's lint gates
(its pre-commit hooks at its pinned versions, on the changed files) and upstream's own tests of what the group changes,
with the group's own tests, run on each branch with the test venv; the PR title and body (in the upstream's PR
template) are printed for each branch, with the command that pushes it."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from email.utils import parseaddr
from pathlib import Path

from patchset.export import targets, upstream_prs
from patchset.export.branches import Branch, BranchJob, make_branches
from patchset.export.pr_gates import Gates, Gating
from patchset.export.pr_text import comment_text, pr_body, pr_title, route
from patchset.plumbing import gitops
from patchset.plumbing.errors import EXIT_OK, BadInput
from patchset.plumbing.ui import Console, display_path
from patchset.series.groups import Group, chain, load_groups
from patchset.series.model import Patch, Series, load_series
from patchset.testenv.venv import ensure_venv
from patchset.upstreams.pins import Pin, Pins, at_least
from patchset.upstreams.pr_template import ISSUE_FIRST, body_problems, split_sections
from patchset.upstreams.registry import UPSTREAMS, Detected, detect
from patchset.upstreams.workspace import Workspace

EXIT_GATE_FAILED = 1


@dataclass(frozen=True)
class ExportRequest:
    """What the user asked for; ``gate_records``: where gate passes are remembered (None: every gate runs)."""

    upstream: str
    checkout: Path
    only_groups: Sequence[str] = ()
    branch: str | None = None
    force: bool = False
    gate_records: Path | None = None
    author: str | None = None  # ``Name <email>`` (default: the user's git identity)


def _check_tree(checkout: Path, key: str) -> Detected:
    """What the checkout is; ``BadInput`` unless it is a clean top of a git checkout of ``key``."""
    shown = display_path(checkout)
    found = detect(checkout, shown)
    if found.key != key:
        raise BadInput(f"{shown} is a {found.label} checkout, not {key}; pass the {key} checkout or the other series")
    tree = gitops.find_worktree(checkout)
    if tree is None or tree.prefix:
        raise BadInput(f"{shown} is not the top of a git checkout; pass the root of a git clone of {found.label}")
    if gitops.in_progress(checkout, ("rebase-merge", "rebase-apply", "MERGE_HEAD", "CHERRY_PICK_HEAD")):
        raise BadInput(f"{shown} has a rebase, git am, merge or cherry-pick in progress; finish or abort it first")
    if not gitops.is_clean(checkout):
        raise BadInput(f"{shown} has uncommitted changes; commit or stash them first (git stash -u)")
    return found


def _check_checkout(checkout: Path, found: Detected, pins: Pins) -> tuple[Pin, str]:
    """The pin the checkout (``found``) is at and the commit to branch from; ``BadInput`` for anything else."""
    key, shown = found.key, display_path(checkout)
    pin = pins.find(key, found.version)
    if pin is None or not pin.target:  # a companion-only pin is tested beside, never patched
        targets = ", ".join(pins.versions(key)) or "none"
        raise BadInput(
            f"{shown} is {found.label} {found.version} ({found.marker}), a version the {key} series does not target "
            f"(targets: {targets}); check out one of those releases, or pass a git clone of upstream with its history"
        )
    base = gitops.tag_commit(checkout, pin.tag) or gitops.head_commit(checkout)
    if base is None:
        raise BadInput(f"{shown} has no commit to branch from")
    return pin, base


def _select_patches(series_patches: Sequence[Patch], pin: Pin, console: Console | None) -> dict[int, Patch]:
    """{series number: patch} of the patches to send: those upstream has at ``pin`` are skipped."""
    chosen: dict[int, Patch] = {}
    for number, patch in enumerate(series_patches, start=1):
        if not (patch.upstream_since and at_least(pin.version, patch.upstream_since)):
            chosen[number] = patch
        elif console is not None:
            console.step(f"Skipping {patch.name}: in upstream since {patch.upstream_since}")
    return chosen


def _print_pr(pin: Pin, branch: Branch, gates: Gates, shown: str, console: Console) -> None:
    """The branch's gates, its PR title and body; on a failed gate, the error naming both (``shown``: the checkout)."""
    console.summary(f"=== {branch.name} (group {branch.group.name}) ===")
    for hook in gates.lint.hooks:
        console.step(f"lint {hook.name}: {hook.status}")
    if not gates.lint.passed:
        print(gates.lint.output.rstrip(), flush=True)
    console.summary(f"upstream lint: {'passed' if gates.lint.passed else 'FAILED'} ({gates.lint.summary()})")
    if not gates.tests.passed:
        print(gates.tests.output.rstrip()[-6000:], flush=True)
    files = " ".join(gates.tests.files) or "none"
    console.summary(
        f"upstream CPU tests: {'passed' if gates.tests.passed else 'FAILED'} ({gates.tests.summary}; {files})"
    )
    for test in gates.tests.upstream:
        console.summary(f"  upstream test run: {test.path} ({test.why})")
    for test in gates.tests.not_run:
        console.summary(f"  upstream test NOT run: {test.path} ({test.why}): {test.not_run}")
    for note in gates.tests.notes:
        console.summary(f"  note: {note}")
    console.summary(f"upstream lint NOT run here: {UPSTREAMS[pin.key].lint_not_run}")
    if gates.teeth is not None:
        state = "passed" if gates.teeth.passed else "FAILED"
        console.summary(f"the fix's regression tests (-k {gates.teeth.selection!r}): {state} ({gates.teeth.summary})")
    title = pr_title(branch.patches, branch.group)
    body = pr_body(
        pin.key, pin.tag, branch.patches, branch.changed, gates, branch.group, branch.cherry_pick, branch.groups
    )
    source = branch.group.description
    for problem in body_problems(body):
        where = display_path(source.path) if source is not None else "the patches' messages"
        console.warn(f"the PR body of {branch.name}: {problem}; shorten {where}")
    issue = split_sections(source.sections).get(ISSUE_FIRST) if source is not None else None
    if issue:
        print(f"\n----- issue to open first, then name it in the PR -----\n{issue}\n----- end -----", flush=True)
    print(f"\n----- PR title -----\n{title}\n----- PR body -----\n{body}----- end -----", flush=True)
    console.summary(
        f"{branch.name}: before you open its PR, fill in the declarations only you can make, left unticked in "
        "its body: AI assistance, and that you reviewed every line and ran the tests"
    )
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
    extra = ""
    if tests is not None:
        applied = f"NOT applied (the checkout lacks {', '.join(tests.missing)})" if tests.missing else "applied"
        extra = f"; {display_path(tests.path)} {applied}"
    if branch.cherry_pick:
        made = f"git cherry-pick -x {branch.cherry_pick}"
    else:
        fold = branch.group.fold and len(branch.patches) > 1
        made = f"{len(branch.patches)} patch(es) as {'one folded commit' if fold else 'one commit each'}"
    console.summary(f"{pin.label}: branch {branch.name} on {branch.where} ({made}); {state}; {ran}{extra}")
    if tests is not None and tests.missing:
        console.warn(tests.note())


def _author(checkout: Path, given: str | None) -> str:
    """``Name <email>`` of the commits made from patches: ``given`` (``--author``), else the user's git identity."""
    if given:
        name, address = parseaddr(given)
        if not name or "@" not in address:
            raise BadInput(f"--author {given!r} is not 'Name <email>'")
        return f"{name} <{address}>"
    ident = gitops.run_git(["var", "GIT_AUTHOR_IDENT"], cwd=checkout, check=False)
    match = re.match(r"^(.*?) <([^>]*)>", ident.stdout)
    if ident.returncode != 0 or match is None or "@" not in match[2]:
        raise BadInput(
            f"git has no identity in {display_path(checkout)} to author the PR commits: set user.name and user.email "
            "(git config), or pass --author 'Name <email>'"
        )
    return f"{match[1]} <{match[2]}>"


def _routes(series: Series, groups: Sequence[Group], repository: str, console: Console) -> None:
    """One line per group: what export-pr makes of it and why; the text of each comment on an open PR."""
    for group in groups:
        kind, why = route(group)
        console.summary(f"{series.name}: {group.name}: {kind}: {why}")
        if group.comment:
            patches = [series.patches[n - 1] for n in group.numbers]
            print(comment_text(group, patches, repository), flush=True)
    for line in upstream_prs.summary(series.path.parent, groups):
        console.summary(line)  # the upstream revisions each PR was rebased onto, or that it was not


def _finish(made: list[tuple[Pin, Branch, Gates]], checkout: Path, console: Console) -> int:
    shown = display_path(checkout)
    for pin, branch, gates in made:
        _print_pr(pin, branch, gates, shown, console)
    for pin, branch, gates in made:
        _summarise(pin, branch, gates, console)
    if not all(gates.passed for _, _, gates in made):
        return EXIT_GATE_FAILED
    for _, branch, _ in made:
        if branch.group.held:
            console.summary(f"HELD, do not open its PR yet: {branch.name}: {branch.group.held}")
    names = " ".join(branch.name for _, branch, _ in made if not branch.group.held)
    if names:
        console.summary(f"Your checked-out branch is unchanged. Push with: git -C {shown} push <your-fork> {names}")
    return EXIT_OK


def _export_history(request: ExportRequest, workspace: Workspace, author: str, console: Console) -> int:
    """Every series of the upstream, each group's PR on the branch that takes it, in a clone of upstream."""
    checkout, key, only = request.checkout, request.upstream, request.only_groups
    gating = Gating(ensure_venv(), request.gate_records, workspace)
    made: list[tuple[Pin, Branch, Gates]] = []
    known = set()
    for series, groups in targets.series_groups(key, workspace.pins, workspace.patches_dir):
        known |= {group.name for group in groups}
        asked = [group for group in groups if not only or group.name in only]
        _routes(series, asked, next(pin.repository for pin in workspace.pins.for_key(key)), console)
        by_onto: dict[str, list[Group]] = {}
        for group in asked:
            if group.onto:
                by_onto.setdefault(group.onto, []).append(group)
            elif not group.carried and not group.comment:
                console.warn(f"{series.name}: group {group.name} names no branch that takes it (onto=); not made")
        for onto, members in by_onto.items():
            found = targets.find_branch(checkout, onto)
            if found is None:
                console.warn(
                    f"{series.name}: no branch {onto} in {display_path(checkout)} (git fetch <remote> {onto}); "
                    f"{', '.join(g.name for g in members)} not made"
                )
                continue
            ref, base = found
            pin = targets.pin_for(workspace.pins, key, targets.version_at(checkout, base, key), ref, series.name)
            chosen = _select_patches(series.patches, pin, None)
            picks, kept = {}, []
            for group in members:
                patches = [series.patches[n - 1] for n in group.numbers]
                commit = targets.upstream_commit(patches)
                if commit and gitops.is_ancestor(checkout, commit, base):  # False where the commit is absent
                    console.summary(f"{series.name}: {ref} has upstream's commit {commit} already: no {group.name} PR")
                    continue
                if commit and gitops.commit_of(checkout, commit) is None:
                    console.warn(
                        f"{display_path(checkout)} lacks upstream's commit {commit} ({group.name}): fetch "
                        "upstream's main; not made"
                    )
                    continue
                if commit:
                    picks[group.name] = targets.cherry_pick(series, group, commit, patches)
                kept.append(group)
            if not kept:
                continue
            console.step(f"Making {len(kept)} branch(es) of {series.name} on {ref} ({base[:12]})")
            job = BranchJob(checkout, pin, base, groups, kept, chosen, author, request.branch, request.force, picks)
            made += [(pin, branch, gates) for branch, gates in make_branches(job, gating, console)]
    for name in only:
        if name not in known:
            raise BadInput(f"no group {name!r} in any {key} series")
    return _finish(made, checkout, console)


def export_pr(request: ExportRequest, workspace: Workspace, console: Console) -> int:
    """Make and gate one branch per concern group, and print each PR; ``EXIT_GATE_FAILED`` when a gate failed."""
    checkout = request.checkout
    found = _check_tree(checkout, request.upstream)
    author = _author(checkout, request.author)
    if targets.has_history(checkout, request.upstream, workspace.pins, workspace.patches_dir):
        return _export_history(request, workspace, author, console)
    pin, release = _check_checkout(checkout, found, workspace.pins)
    series = load_series(workspace.patches_dir, pin.series)
    groups = load_groups(series.path.parent, len(series.patches))
    only = request.only_groups
    wanted = list(groups) if not only else [chain(groups, name)[-1] for name in dict.fromkeys(only)]
    _routes(series, wanted, pin.repository, console)
    chosen = _select_patches(series.patches, pin, console)
    sendable = []
    for group in (group for group in wanted if not (group.carried or group.comment)):
        if commit := targets.upstream_commit([chosen[n] for n in group.numbers if n in chosen]):
            console.warn(
                f"group {group.name}: its PR is upstream's commit {commit} cherry-picked onto {group.onto}, which "
                f"needs {pin.name}'s history; {display_path(checkout)} has none (a checkout made from an sdist). Give "
                f"export-pr a git clone of {pin.repository} instead; it makes that PR there"
            )
        else:
            sendable.append(group)
    if not sendable:
        if all(group.carried or group.comment for group in wanted):
            raise BadInput(f"no group of the {pin.series} series goes upstream as a PR (see above): nothing to send")
        raise BadInput(
            f"no group of the {pin.series} series can be sent from {display_path(checkout)} (see above); pass a git "
            f"clone of {pin.repository}"
        )
    if request.branch and len(sendable) > 1:
        raise BadInput(
            f"--branch names one branch, but the {pin.series} series has {len(sendable)} groups; add --group"
        )
    for patch in (chosen[n] for group in sendable for n in group.numbers if n in chosen):
        if since := patch.fields.get("Applied-Upstream"):
            console.warn(f"{patch.name} is in upstream {since}: send it only as a backport to the {pin.tag} line")
    gating = Gating(ensure_venv(), request.gate_records, workspace)
    where = pin.tag if gitops.tag_commit(checkout, pin.tag) else "HEAD"
    console.step(
        f"Making {len(sendable)} branch(es), one per group of {display_path(series.path.parent)}, on {where} "
        f"({release[:12]}) in a temporary worktree of {display_path(checkout)}"
    )
    job = BranchJob(
        checkout, pin, release, groups, sendable, chosen, author, request.branch, request.force, where=where
    )
    made = [(pin, branch, gates) for branch, gates in make_branches(job, gating, console)]
    return _finish(made, checkout, console)
