"""What each patch of a series would do to a tree, reading it only. Patches build on earlier ones, so on scratch
copies a peel pass (last to first) reverts what is applied and a forward pass applies the rest, as the real run will;
a patch that would both revert and apply again is ambiguous, refused rather than applied twice."""

from __future__ import annotations

import enum
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from patchset.apply.target import TreeToPatch
from patchset.plumbing import files, gitops, tempdirs
from patchset.plumbing.gitops import Merge, MergeResult, scratch_copy, three_way
from patchset.series.model import Patch, UpstreamCheck
from patchset.upstreams.pins import at_least


class Action(enum.Enum):
    CHANGE = "change"  # apply it (reverse mode: revert it)
    NOTHING = "nothing"  # already applied (reverse mode: not applied)
    SKIP = "skip"  # upstream has it (``upstream``), or fixed its bug its own way (``behaviour``)
    FAIL = "fail"  # does not apply (reverse mode: cannot be reverted); ``stderr`` says where, or ``finding``


class Finding(enum.Enum):
    """What the planner found about a patch that its action alone does not say."""

    AMBIGUOUS = "ambiguous"  # FAIL: it reverts cleanly and would also apply again, so whether it is applied is unclear
    MERGED = "merged"  # NOTHING: a 3-way merge changes nothing, so it is in already (merged before)


@dataclass(frozen=True)
class UpstreamState:
    """A patch's ``Applied-Upstream`` version, whether the tree is at or past it, and which checks matched."""

    since: str | None
    claimed: bool
    matched: tuple[UpstreamCheck, ...] = ()
    missing: tuple[tuple[UpstreamCheck, str], ...] = ()

    @property
    def present(self) -> bool:
        return bool(self.matched) and not self.missing


class Verdict(enum.Enum):
    FIXED = "fixed"  # they ran and passed: upstream fixed the bug its own way
    BUG = "bug"  # one failed: the bug is still there
    UNTESTED = "untested"  # they did not run, or ran none: ``Behaviour.why`` says why
    LOCAL = "local"  # not run: on a pinned release, the patch's files differ from its sdist (``why`` names them)


@dataclass(frozen=True)
class Behaviour:
    """What a patch's teeth (their -k ``selection``) said on the tree as shipped; ``command``: what decides it."""

    verdict: Verdict
    selection: str | None
    passed: int = 0
    failed: int = 0
    why: str = ""
    command: str = ""

    @property
    def fixed(self) -> bool:
        return self.verdict is Verdict.FIXED


@dataclass(frozen=True)
class Step:
    """What to do with one patch: its 1-based position in the series, the action and why."""

    patch: Patch
    index: int
    action: Action
    stderr: str = ""  # FAIL: what git apply said
    finding: Finding | None = None  # FAIL (ambiguous) or NOTHING (merged before): what the action does not say
    merge: MergeResult | None = None  # FAIL: what a 3-way merge would do; CHANGE: applied by a 3-way merge
    upstream: UpstreamState | None = None  # SKIP, or FAIL when the version claims the change and the content lacks it
    behaviour: Behaviour | None = None  # SKIP (fixed upstream) or FAIL: what the patch's teeth said on the tree

    @property
    def failure(self) -> gitops.Failure | None:
        """The file and hunk line git named for a FAIL, if it named one."""
        return gitops.parse_failure(self.stderr) if self.stderr else None

    @property
    def fixed_upstream(self) -> bool:
        return self.action is Action.SKIP and self.behaviour is not None and self.behaviour.fixed

    @property
    def upstream_missing(self) -> bool:
        """The tree's version claims the change upstream, but its content lacks it."""
        return self.action is Action.FAIL and self.upstream is not None and self.upstream.claimed

    @property
    def merged(self) -> bool:
        return self.action is Action.CHANGE and self.merge is not None


def series_files(patches: Iterable[Patch]) -> list[str]:
    return list(dict.fromkeys(path for patch in patches for path in patch.files))


def _check(root: Path, check: UpstreamCheck) -> str | None:
    """None when ``check`` matches in the tree at ``root``, else why not."""
    path = root / check.path
    if not path.is_file():
        return "does not exist" if not path.exists() else "is not a file"
    try:
        text = path.read_bytes().decode("utf-8", "surrogateescape")
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return None if check.regex.search(text) else f"does not match /{check.pattern}/"


def upstream_state(root: Path, patch: Patch, version: str) -> UpstreamState | None:
    """What the tree at ``root`` says about ``patch`` being upstream; None when its header says nothing of it."""
    since = patch.upstream_since
    if since is None and not patch.upstream_checks:
        return None
    checked = [(check, _check(root, check)) for check in patch.upstream_checks]
    return UpstreamState(
        since=since,
        claimed=since is not None and at_least(version, since),
        matched=tuple(check for check, why in checked if why is None),
        missing=tuple((check, why) for check, why in checked if why is not None),
    )


def _peel(scratch: Path, patches: Sequence[tuple[int, Patch]]) -> tuple[set[int], set[int]]:
    """The indexes of the applied patches (reverted here, last first) and of the ambiguous ones."""
    applied: set[int] = set()
    ambiguous: set[int] = set()
    for index, patch in reversed(patches):
        if not gitops.apply_patch(scratch, patch.path, check=True, reverse=True).ok:
            continue
        if gitops.apply_patch(scratch, patch.path, check=True).ok:
            ambiguous.add(index)
        elif gitops.apply_patch(scratch, patch.path, reverse=True).ok:
            applied.add(index)
    return applied, ambiguous


def _forward(
    scratch: Path,
    patches: Sequence[tuple[int, Patch]],
    skip: set[int],
    objects: Path | None,
    no_merge: set[int],
) -> tuple[dict[int, str], dict[int, MergeResult]]:
    """Apply each patch not in ``skip``, first to last; {index: git's error} and {index: what a 3-way merge does} of
    those that do not apply (a clean merge stays, for the patches after it)."""
    failed: dict[int, str] = {}
    merges: dict[int, MergeResult] = {}
    for index, patch in patches:
        if index in skip:
            continue
        result = gitops.apply_patch(scratch, patch.path)
        if not result.ok:
            failed[index] = result.stderr
            if objects is not None and index not in no_merge:
                merges[index] = three_way(scratch, patch.path, patch.files, objects, install=True)
    return failed, merges


def plan_series(
    root: Path,
    patches: Sequence[Patch],
    *,
    version: str,
    reverse: bool = False,
    objects: Path | None = None,
    merge: bool = False,
) -> list[Step]:
    """Each patch's step on the tree at ``root``, in run order; ``objects`` to try a 3-way merge, ``merge`` to do it."""
    numbered = list(enumerate(patches, start=1))
    upstream = {i: state for i, p in numbered if (state := upstream_state(root, p, version)) is not None}
    claimed = {i for i, state in upstream.items() if state.claimed}  # skipped, or FAIL when the content lacks it
    by_content = {i for i, state in upstream.items() if not state.claimed and state.present}
    active = [(i, p) for i, p in numbered if i not in claimed]
    with tempfile.TemporaryDirectory(prefix=tempdirs.prefix("check")) as tmp:
        applied, ambiguous = _peel(scratch_copy(root, series_files(patches), Path(tmp) / "peel"), active)
        scratch = scratch_copy(root, series_files(patches), Path(tmp) / "forward")
        failed, merges = _forward(scratch, active, applied | ambiguous, None if reverse else objects, by_content)

    def step(index: int, patch: Patch) -> Step:
        outcome = merges.get(index)
        state = upstream.get(index)
        if index in claimed and state is not None:
            return Step(patch, index, Action.FAIL if state.missing else Action.SKIP, upstream=state)
        if index in by_content and index in failed and state is not None:
            return Step(patch, index, Action.SKIP, upstream=state)
        if index in ambiguous:
            return Step(patch, index, Action.FAIL, finding=Finding.AMBIGUOUS)
        if outcome is not None and outcome.outcome is Merge.APPLIED:
            return Step(patch, index, Action.NOTHING, finding=Finding.MERGED, merge=outcome)
        if outcome is not None and outcome.outcome is Merge.RESOLVES and merge:
            return Step(patch, index, Action.CHANGE, merge=outcome)
        if index in failed:
            return Step(patch, index, Action.FAIL, failed[index], merge=outcome)
        return Step(patch, index, Action.CHANGE if (index in applied) == reverse else Action.NOTHING)

    return [step(index, patch) for index, patch in (reversed(numbered) if reverse else numbered)]


def applied_patches(steps: Sequence[Step], *, reverse: bool) -> list[Patch]:
    """The patches that ``steps`` found applied in the tree, in series order."""
    applied = Action.CHANGE if reverse else Action.NOTHING
    return [s.patch for s in sorted(steps, key=lambda s: s.index) if s.action is applied]


def unexplained_changes(tree: gitops.WorkTree, dirty: Iterable[str], applied: Sequence[Patch]) -> list[str]:
    """Of the uncommitted ``dirty`` paths, those whose content is not HEAD's plus the ``applied`` patches."""
    dirty = sorted(set(dirty))
    if not dirty:
        return []
    paths = series_files(applied) + dirty
    with tempfile.TemporaryDirectory(prefix=tempdirs.prefix("head")) as tmp:
        scratch = Path(tmp)
        gitops.init_scratch(scratch)
        for rel, blob in gitops.head_blobs(tree, paths).items():
            target = scratch / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if blob.mode == "120000":
                os.symlink(os.fsdecode(blob.data), target)
            else:
                target.write_bytes(blob.data)
                if blob.mode == "100755":
                    target.chmod(0o755)
        for patch in applied:
            if not gitops.apply_patch(scratch, patch.path).ok:
                return dirty  # HEAD plus the patches does not even build: nothing is explained
        return [rel for rel in dirty if not files.same(scratch / rel, tree.root / rel)]


@dataclass(frozen=True)
class Plan:
    """Every step for one tree; ``dirty``: uncommitted changes in its files, not the series' own; ``others``."""

    target: TreeToPatch
    steps: tuple[Step, ...]
    reverse: bool
    dirty: tuple[str, ...]
    others: tuple[str, ...]

    def count(self, action: Action) -> int:
        return sum(1 for s in self.steps if s.action is action)

    @property
    def first_failure(self) -> Step | None:
        return next((s for s in self.steps if s.action is Action.FAIL), None)

    @property
    def changing(self) -> list[Step]:
        return [s for s in self.steps if s.action is Action.CHANGE]


# Judges the steps that do not apply by their teeth (``behaviour.py``); returns the steps, some turned into SKIPs.
Settle = Callable[[TreeToPatch, Sequence[Step]], Sequence[Step]]


def conflicts(steps: Iterable[Step]) -> list[Step]:
    """The steps its teeth may settle: FAILs that are neither claimed upstream nor ambiguous (never in reverse)."""
    return [
        s for s in steps if s.action is Action.FAIL and not s.upstream_missing and s.finding is not Finding.AMBIGUOUS
    ]


def plan_target(target: TreeToPatch, *, reverse: bool, merge: bool = False, settle: Settle | None = None) -> Plan:
    """Plan ``target``, reading it only. ``merge``: ``--3way``; ``settle``: judges what does not apply, if any."""
    objects = gitops.objects_dir(target.worktree)
    steps = tuple(
        plan_series(
            target.root, target.series.patches, version=target.version, reverse=reverse, objects=objects, merge=merge
        )
    )
    if settle is not None and not reverse and conflicts(steps):
        steps = tuple(settle(target, steps))
    changing = series_files(s.patch for s in steps if s.action in (Action.CHANGE, Action.FAIL))
    status = gitops.status_paths(target.worktree) if changing else {}
    touched_dirty = [path for path in changing if path in status]
    dirty = unexplained_changes(target.worktree, touched_dirty, applied_patches(steps, reverse=reverse))
    ours = set(series_files(target.series.patches))
    others = tuple(sorted(path for path in status if path not in ours))
    return Plan(target=target, steps=steps, reverse=reverse, dirty=tuple(dirty), others=others)
