"""Making the PR branches in a temporary worktree of the user's checkout: a ref is set only once all of it applied."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from patchset.export.commit_message import upstream_patch_text
from patchset.export.pr_gates import Gates, Gating, WorkTree, run_gates, run_teeth, temp_worktree
from patchset.export.series_export import patch_slug
from patchset.plumbing import gitops
from patchset.plumbing.errors import BadInput, DoesNotApply
from patchset.plumbing.gitops import git_text
from patchset.plumbing.ui import Console, display_path
from patchset.series.groups import UPSTREAM_COMMIT, Group, chain
from patchset.series.model import Patch, read_patch
from patchset.upstreams.pins import Pin


def _am(worktree: Path, patch: Patch, author: str) -> str | None:
    """``git am`` ``patch`` with upstream's message, by ``author``; why it does not apply, or None."""
    return gitops.am(worktree, upstream_patch_text(patch, author), gitops.committer_env(author, os.environ))


@dataclass(frozen=True)
class UpstreamTests:
    """A group's ``pr/<group>.upstream-tests.patch`` on its branch; ``missing``: the files the checkout lacks."""

    path: Path
    files: tuple[str, ...]
    missing: tuple[str, ...]

    def note(self) -> str:
        """What the PR text says of the patch: committed, or why not."""
        name = display_path(self.path)
        if not self.missing:
            return f"{name} changes upstream's {', '.join(self.files)}: committed on its own after the group's commits."
        return (
            f"{name} was NOT applied: the checkout lacks {', '.join(self.missing)} (a release sdist ships no such "
            "tests), so this branch does not carry the change to upstream's tests that this PR needs; run export-pr "
            "on a git clone of upstream"
        )


def _commit_upstream_tests(
    worktree: Path, group: Group, release: set[str], author: str, console: Console
) -> UpstreamTests | None:
    """Commit ``group``'s upstream-tests patch when the ``release`` tree has every file it changes."""
    if group.upstream_tests is None:
        return None
    patch = read_patch(group.upstream_tests)
    missing = tuple(path for path in patch.files if path not in release)
    if missing:
        return UpstreamTests(group.upstream_tests, patch.files, missing)
    console.step(f"Committing {patch.name}: the group's change to upstream's {', '.join(patch.files)}")
    if (reason := _am(worktree, patch, author)) is not None:
        made = UPSTREAM_COMMIT.search(patch.text)
        against = f"upstream {made['commit']}{made['where']}" if made else "another revision of upstream"
        raise DoesNotApply(
            f"{display_path(group.upstream_tests)} does not apply to this checkout's {', '.join(patch.files)} "
            f"({reason}); it was made against {against.rstrip()}: remake it against the checkout's version of those "
            "files. No branch was made for this group"
        )
    return UpstreamTests(group.upstream_tests, patch.files, ())


def _fold(worktree: Path, group: Group, base: str, patches: Sequence[Patch], author: str) -> None:
    """Squash ``base..HEAD`` into one commit: the group's message, ``author``, the last patch's date."""
    assert group.description is not None
    message = "\n\n".join([group.description.title, *group.description.message]) + "\n"
    date = re.search(r"^Date: (.*)$", patches[-1].text, re.MULTILINE)
    env = gitops.committer_env(author, os.environ)
    if date:
        env["GIT_AUTHOR_DATE"] = date[1]
    git_text(worktree, "reset", "-q", "--soft", base)
    args = ["commit", "-q", "--no-verify", "-m", message, "--author", author]
    gitops.run_git([*gitops.NEUTRAL, *args], cwd=worktree, env=env)


@dataclass(frozen=True)
class CherryPick:
    """A group whose PR is upstream's own ``commit`` cherry-picked, and its ``pr/<group>.resolution.patch``."""

    commit: str
    resolution: Path | None = None
    # the carried patches whose new test files go on the branch, as a commit of the user's after the pick, when
    # upstream's commit adds no test: so the PR has a test that reproduces the bug; and that commit's subject
    tests_from: tuple[Path, ...] = ()
    tests_subject: str = ""
    teeth: str = ""  # the pytest -k of the regression tests that show the bugs its patches fix, run on the branch


def _commit_tests(worktree: Path, pick: CherryPick, author: str, console: Console) -> None:
    """Commit the test files ``pick.tests_from`` add, when upstream's commit (HEAD) adds none."""
    if not pick.tests_from or git_text(
        worktree, "diff", "--name-only", "--diff-filter=A", "HEAD~1", "HEAD", "--", "tests"
    ):
        return
    for patch in pick.tests_from:  # a patch that adds no test gives git apply nothing to do: not an error here
        gitops.run_git(["apply", "--index", "--include=tests/*", str(patch)], cwd=worktree, check=False)
    added = git_text(worktree, "diff", "--cached", "--name-only", "--diff-filter=A").split()
    if not added:
        git_text(worktree, "reset", "-q", "--hard")
        return
    console.step(f"Committing the carried patch's test of the fix: {', '.join(added)}")
    message = f"{pick.tests_subject}\n\nAdds {', '.join(added)}: a CPU test of the fix cherry-picked above.\n"
    args = ["commit", "-q", "--no-verify", "-m", message, "--author", author]
    gitops.run_git([*gitops.NEUTRAL, *args], cwd=worktree, env=gitops.committer_env(author, os.environ))


def _cherry_pick(worktree: Path, base: str, pick: CherryPick, author: str, console: Console) -> None:
    """``git cherry-pick -x`` upstream's commit, its conflicts resolved by the group's resolution patch."""
    console.step(f"Cherry-picking upstream's commit {pick.commit} (git cherry-pick -x)")
    env = gitops.committer_env(author, os.environ)
    picked = gitops.run_git([*gitops.NEUTRAL, "cherry-pick", "-x", pick.commit], cwd=worktree, env=env, check=False)
    if picked.returncode == 0:
        return
    conflicted = git_text(worktree, "diff", "--name-only", "--diff-filter=U").split()
    resolved = set()
    if pick.resolution is not None:
        numstat = git_text(worktree, "apply", "--numstat", str(pick.resolution)).splitlines()
        resolved = {line.split("\t")[2] for line in numstat}
    if not conflicted or not set(conflicted) <= resolved:
        gitops.run_git(["cherry-pick", "--abort"], cwd=worktree, check=False)
        where = display_path(pick.resolution) if pick.resolution else "no pr/<group>.resolution.patch"
        raise DoesNotApply(
            f"upstream's commit {pick.commit} does not cherry-pick cleanly here (conflicts in "
            f"{', '.join(conflicted) or 'none: ' + picked.stderr.strip()}) and {where} does not resolve them; "
            "no branch was made"
        )
    assert pick.resolution is not None  # it resolves every conflicted file
    git_text(worktree, "checkout", base, "--", *conflicted)
    applied = gitops.run_git(["apply", "--index", str(pick.resolution)], cwd=worktree, check=False)
    if applied.returncode != 0:
        gitops.run_git(["cherry-pick", "--abort"], cwd=worktree, check=False)
        raise DoesNotApply(
            f"{display_path(pick.resolution)} does not apply to this branch's {', '.join(conflicted)} "
            f"({applied.stderr.strip().splitlines()[0] if applied.stderr.strip() else 'git apply failed'}); remake it "
            "against the branch: no branch was made"
        )
    console.step(f"Resolved the conflicts in {', '.join(conflicted)} with {display_path(pick.resolution)}")
    gitops.run_git([*gitops.NEUTRAL, "-c", "core.editor=true", "cherry-pick", "--continue"], cwd=worktree, env=env)


@dataclass(frozen=True)
class BranchJob:
    """The branches a run makes in the user's ``checkout``: one per group of ``wanted``, from the patches ``chosen``."""

    checkout: Path
    pin: Pin
    release: str  # the commit to branch from: the release tag's, else the checkout's HEAD
    groups: tuple[Group, ...]
    wanted: Sequence[Group]
    chosen: Mapping[int, Patch]
    author: str  # ``Name <email>``: the author and committer of the commits made from patches
    branch: str | None = None
    force: bool = False
    cherry_picks: Mapping[str, CherryPick] = field(default_factory=dict)  # group -> upstream's commit to pick
    where: str = ""  # what the branches start on, as said (default: the pin's tag)


@dataclass(frozen=True)
class Branch:
    """One group's branch as made, with what its PR text is made of."""

    group: Group
    name: str
    patches: tuple[Patch, ...]
    changed: tuple[str, ...]
    upstream_tests: UpstreamTests | None = None
    cherry_pick: str | None = None  # upstream's commit the branch cherry-picks, when it is one
    groups: tuple[Group, ...] = ()  # every group of its series (the PR names the one it depends on by its title)
    where: str = ""  # what it starts on: the release tag, HEAD, or the upstream branch that takes it


def _commit_group(
    job: BranchJob, tree: WorkTree, group: Group, heads: Mapping[str, str], console: Console
) -> tuple[str, tuple[Patch, ...], UpstreamTests | None]:
    """Commit ``group`` in ``tree`` after its ``after`` chain (the branches this run made, in ``heads``): its base (the
    release, or the branch of the group it is after), its patches and its upstream-tests patch."""
    # the lint hooks fix files in place (ruff --fix, black, isort): drop what they left of the last branch
    git_text(tree.path, "reset", "-q", "--hard")
    git_text(tree.path, "clean", "-q", "-f", "-d", "-x")
    git_text(tree.path, "checkout", "-q", "--detach", tree.release)
    base = tree.release
    tests: UpstreamTests | None = None
    release = set(tree.files)
    for member in chain(job.groups, group.name):
        member_patches = tuple(job.chosen[n] for n in member.numbers if n in job.chosen)
        if member is not group and member.name in heads:  # stack on the very commits of that branch
            git_text(tree.path, "checkout", "-q", "--detach", heads[member.name])
            member_patches = ()
        start = gitops.head_commit(tree.path)
        assert start is not None
        if member_patches and member.name in job.cherry_picks:
            _cherry_pick(tree.path, start, job.cherry_picks[member.name], job.author, console)
            _commit_tests(tree.path, job.cherry_picks[member.name], job.author, console)
        elif member_patches:
            for number, patch in enumerate(member_patches, start=1):
                console.step(f"Committing {patch.name} ({number}/{len(member_patches)})")
                if (reason := _am(tree.path, patch, job.author)) is not None:
                    raise DoesNotApply(
                        f"{patch.name} does not apply with git am ({reason}); no branch was made. "
                        f"See scripts/apply.sh --check for the failing hunk"
                    )
            if member.fold and len(member_patches) > 1:
                _fold(tree.path, member, start, member_patches, job.author)
            change = _commit_upstream_tests(tree.path, member, release, job.author, console)
            tests = change if member is group else tests
        if member is not group:
            base = gitops.head_commit(tree.path) or base
    return base, member_patches, tests  # the chain ends with ``group``


def _set_branch(job: BranchJob, name: str, head: str) -> None:
    """Point branch ``name`` of the checkout at ``head``, unless it exists (without ``force``) or is checked out."""
    checkout = job.checkout
    if gitops.run_git(["check-ref-format", "--branch", name], cwd=checkout, check=False).returncode != 0:
        raise BadInput(f"{name!r} is not a valid branch name")
    exists = gitops.commit_of(checkout, f"refs/heads/{name}") is not None
    if exists and not job.force:
        raise BadInput(f"branch {name} already exists in {display_path(checkout)}; pass --force to replace it")
    if exists and gitops.git_value(checkout, "symbolic-ref", "-q", "HEAD") == f"refs/heads/{name}":
        raise BadInput(f"branch {name} is checked out in {display_path(checkout)}; switch to another first")
    git_text(checkout, "branch", "-f", name, head)


def make_branches(job: BranchJob, gating: Gating, console: Console) -> list[tuple[Branch, Gates]]:
    """Make and gate the branch of each group of ``job``, each on its ``after`` chain, in a temporary worktree."""
    made: list[tuple[Branch, Gates]] = []
    files = tuple(git_text(job.checkout, "ls-tree", "-r", "--name-only", job.release).splitlines())
    pin, start = job.pin, job.where or job.pin.tag
    with temp_worktree(job.checkout, job.release, "pr") as path:
        tree = WorkTree(path, job.release, files, path.parent)
        heads: dict[str, str] = {}  # group -> the head of its branch made in this run, for the groups after it
        for group in job.wanted:
            base, patches, tests = _commit_group(job, tree, group, heads, console)
            if not patches:
                console.step(f"Skipping group {group.name}: upstream {pin.version} has all its patches")
                continue
            head = gitops.head_commit(tree.path)
            assert head is not None
            slug = patch_slug(patches[0].name) if group.name.startswith("patch-") else group.name
            name = job.branch or f"patchset/{pin.series}-{slug}"
            _set_branch(job, name, head)
            heads[group.name] = head
            count = int(git_text(tree.path, "rev-list", "--count", f"{base}..{head}").strip())
            where = f"the {group.after} branch" if group.after else start
            console.step(f"Branch {name}: {count} commit(s) on {where}")
            changed = git_text(tree.path, "diff", "--name-only", "--diff-filter=d", base, head).splitlines()
            notes = [tests.note()] if tests else []
            gates = run_gates(gating, pin, tree, changed, console, notes)
            pick = job.cherry_picks.get(group.name)
            if pick and pick.teeth:
                gates = replace(gates, teeth=run_teeth(gating, pin, tree, pick.teeth, console))
            commit = pick.commit if pick else None
            made.append((Branch(group, name, patches, tuple(changed), tests, commit, job.groups, start), gates))
    return made
