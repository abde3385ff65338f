"""Work out, without touching the tree, what each patch of a series would do to it; and which uncommitted
changes in the files the patches touch are not explained by the patches themselves.

Sequential checking. Patches of a series may depend on earlier ones (0002 may change lines that 0001 adds), so
no patch can be judged on its own: on a fully patched tree 0001 neither applies nor reverts, because 0002 changed
its lines. ``plan_series`` copies every file the series touches (as it is now in the work tree, uncommitted
changes included) into scratch directories, each its own empty git repository, and runs ``git apply`` there:

- peel pass, last patch to first: a patch that reverts cleanly (``git apply --reverse --check``) is already
  applied; it is reverted in the scratch copy, so that the patch before it is judged with it peeled off;
- forward pass, first to last, on a fresh copy: every patch not already applied is applied in turn (git apply
  is atomic per patch, so a failed apply is a failed check), each on top of the ones before it.

The forward pass is exactly what applying does to the real tree, and the peel pass exactly what ``--reverse``
does, so what passes here applies there. The real tree is only read. Should the real tree still refuse a patch
(it changed in between, or its own git configuration differs), the caller rolls back what it had applied (see
``transaction.py``). A patch that reverts cleanly but would also apply again is ambiguous and refused, rather
than risk applying it twice.

3-way. A patch that does not apply in the forward pass is also merged (``git apply --3way``, see
``gitops.three_way``) against the blob it was made from, when the tree's repository has it: the step says
whether that would resolve it, and only ``--3way`` turns a clean merge into a step that changes the tree. Nothing
is ever reversed to make it fit: a patch that only reverts is reported as already applied.

Dirtiness. Uncommitted changes to a file a patch is about to change are refused (``--allow-dirty`` overrides),
but changes that are exactly the patches found already applied are ours, not the user's: a tree this tool
patched differs from HEAD in those files, and re-running or reversing must still work. ``unexplained_changes``
rebuilds HEAD's version of those files in a scratch directory, applies the already-applied patches to it in
series order and compares the result with the work tree; only files that still differ count as dirty.

Upstream. A patch whose header says ``Applied-Upstream: <version>`` is in upstream from that release on. When the
header also says how to recognise the change (``Upstream-Check: <path>: <regex>`` lines, see ``series.py``), the
tree's content decides, read as it is now, not the version number alone:

- the tree is at or past that version and every check matches: skipped (``in upstream since <version>``), in
  either direction, whether or not the patch would apply or revert (upstream's code is not ours to change);
- the tree is at or past that version and a check does not match: FAIL (``upstream_missing``), since the version
  claims the change but the content lacks it (upstream reworked the code, or the tree dropped the fix);
- the tree is below that version (or the header has no version), the patch neither applies nor reverts, and
  every check matches: skipped as already upstream by content (a checkout of upstream's main, say). A patch
  that applies or reverts is judged as usual, so a backport tree keeps working.

A patch with ``Applied-Upstream`` but no check is skipped at or past that version, by the version only.

Behaviour. Upstream may fix a bug its own way, in code the patch's text does not recognise: the patch then neither
applies nor is in upstream by content. ``plan_target`` hands such steps to ``settle`` (``behaviour.py``), which runs
the patch's own teeth (the regression tests that show its bug, ``patches/<series>/parts.toml``) on the tree as shipped:
if they pass, the step becomes a SKIP (``fixed upstream``); if not, it stays a FAIL, with what its teeth said.

A tree's ``Plan`` (``plan_target``): its steps, and its uncommitted changes, those in the way and the others.
"""

from __future__ import annotations

import enum
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from patchset.apply.target import TreeToPatch
from patchset.plumbing import files, gitops, tempdirs
from patchset.plumbing.gitops import Merge, MergeResult, three_way
from patchset.series.model import Patch, UpstreamCheck
from patchset.upstreams.pins import at_least


class Action(enum.Enum):
    CHANGE = "change"  # apply it (reverse mode: revert it)
    NOTHING = "nothing"  # already applied (reverse mode: not applied)
    SKIP = "skip"  # upstream has it (``upstream``), or fixed its bug its own way (``behaviour``)
    FAIL = "fail"  # does not apply (reverse mode: cannot be reverted); ``refusal`` says where, or ``finding``


class Finding(enum.Enum):
    """What the planner found about a patch that its action alone does not say."""

    AMBIGUOUS = "ambiguous"  # FAIL: it reverts cleanly and would also apply again, so whether it is applied is unclear
    MERGED = "merged"  # NOTHING: a 3-way merge changes nothing, so it is in already (merged before)


@dataclass(frozen=True)
class GitRefusal:
    """``git apply`` refused a patch: its own words (``stderr``), and the file and hunk line they name, when they
    name one (``failure``)."""

    stderr: str
    failure: gitops.Failure | None

    @classmethod
    def of(cls, stderr: str) -> GitRefusal:
        return cls(stderr, gitops.parse_failure(stderr))


@dataclass(frozen=True)
class UpstreamState:
    """What the tree says about a patch's change being upstream: the ``Applied-Upstream`` version (``since``),
    whether the tree's version is at or past it (``claimed``), and the ``Upstream-Check`` lines that matched and
    those that did not (with why: ``does not match``, ``does not exist``, ...)."""

    since: str | None
    claimed: bool
    matched: tuple[UpstreamCheck, ...] = ()
    missing: tuple[tuple[UpstreamCheck, str], ...] = ()

    @property
    def present(self) -> bool:
        """True when the patch declares checks and every one matches."""
        return bool(self.matched) and not self.missing


class Verdict(enum.Enum):
    """What a patch's teeth showed on the tree as shipped."""

    FIXED = "fixed"  # they ran and passed: upstream fixed the bug its own way
    BUG = "bug"  # one failed: the bug is still there
    UNTESTED = "untested"  # they did not run, or ran none: ``Behaviour.why`` says why
    LOCAL = "local"  # not run: on a pinned release, the patch's files differ from its sdist (``why`` names them)


@dataclass(frozen=True)
class Behaviour:
    """What a patch's teeth said on the tree as shipped, for a patch that neither applies nor is in upstream by
    content: the ``verdict`` (``why`` says how it was reached). ``selection``: the pytest -k expression (None: the
    series names no teeth for the patch); ``command``: what decides it."""

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
    refusal: GitRefusal | None = None  # FAIL: what git apply said
    finding: Finding | None = None  # FAIL (ambiguous) or NOTHING (merged before): what the action does not say
    merge: MergeResult | None = None  # FAIL: what a 3-way merge would do; CHANGE: applied by a 3-way merge
    upstream: UpstreamState | None = None  # SKIP, or FAIL when the version claims the change and the content lacks it
    behaviour: Behaviour | None = None  # SKIP (fixed upstream) or FAIL: what the patch's teeth said on the tree

    @property
    def failure(self) -> gitops.Failure | None:
        """The file and hunk line git named for a FAIL, if it named one."""
        return self.refusal.failure if self.refusal is not None else None

    @property
    def fixed_upstream(self) -> bool:
        """True when this step skips the patch because its teeth pass on the tree as shipped."""
        return self.action is Action.SKIP and self.behaviour is not None and self.behaviour.fixed

    @property
    def upstream_missing(self) -> bool:
        """True when the tree's version claims the change upstream but its content lacks it (a FAIL)."""
        return self.action is Action.FAIL and self.upstream is not None and self.upstream.claimed

    @property
    def merged(self) -> bool:
        """True when this step applies the patch with a 3-way merge (``--3way``)."""
        return self.action is Action.CHANGE and self.merge is not None


def series_files(patches: Iterable[Patch]) -> list[str]:
    seen: dict[str, None] = {}
    for patch in patches:
        for path in patch.files:
            seen.setdefault(path, None)
    return list(seen)


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
    """What the tree at ``root`` (version ``version``) says about ``patch`` being upstream; None when the header
    declares neither an ``Applied-Upstream`` version nor an ``Upstream-Check``. Reads ``root`` only."""
    since = patch.upstream_since
    if since is None and not patch.upstream_checks:
        return None
    matched: list[UpstreamCheck] = []
    missing: list[tuple[UpstreamCheck, str]] = []
    for check in patch.upstream_checks:
        why = _check(root, check)
        if why is None:
            matched.append(check)
        else:
            missing.append((check, why))
    claimed = since is not None and at_least(version, since)
    return UpstreamState(since=since, claimed=claimed, matched=tuple(matched), missing=tuple(missing))


def _peel(scratch: Path, patches: Sequence[tuple[int, Patch]]) -> tuple[set[int], set[int]]:
    """Find the applied patches: from the last to the first, revert each patch that reverts cleanly on the scratch
    tree. Returns the indexes of those, and of the ambiguous ones (they would revert and also apply again)."""
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
    """Apply, first to last, each patch not in ``skip`` on the scratch tree; return {index: git's error} for those
    that do not apply, and {index: what a 3-way merge does} for those (a clean merge stays in the scratch tree, so
    that the patches after it are judged on top of it). No merge is tried when ``objects`` is None, nor for the
    patches in ``no_merge`` (their change is upstream already when they do not apply)."""
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


def _scratch_copy(root: Path, patches: Sequence[Patch], into: Path) -> Path:
    into.mkdir()
    gitops.init_scratch(into)
    files.copy_paths(root, into, series_files(patches))
    return into


def plan_series(
    root: Path,
    patches: Sequence[Patch],
    *,
    version: str,
    reverse: bool = False,
    objects: Path | None = None,
    merge: bool = False,
) -> list[Step]:
    """The step for each patch of ``patches`` on the tree at ``root``, in the order they would run (last to first
    when ``reverse``). Reads ``root`` only.

    Two passes, each on its own scratch copy of the tree's current files: the peel pass (last to first, reverting
    what reverts) finds the patches already applied, even when later patches changed lines that earlier ones
    added; the forward pass (first to last) applies the others, exactly as applying the series to the real tree
    will. Reverting the series is exactly the peel pass. Patches whose ``Applied-Upstream`` version is at or below
    ``version`` take part in neither: they are skipped when their ``Upstream-Check`` lines all match (or they have
    none), and fail when one does not. A patch whose checks all match on an older tree is skipped when it neither
    applies nor reverts there (see the module docstring).

    With ``objects`` (the tree's git object store), a patch that does not apply is also tried as a 3-way merge
    (``gitops.three_way``): the step records whether that would resolve it, and becomes a merged CHANGE when ``merge``
    (``--3way``) asks for it. A merge that changes nothing means the patch is in already (merged earlier).
    """
    numbered = list(enumerate(patches, start=1))
    upstream = {i: state for i, p in numbered if (state := upstream_state(root, p, version)) is not None}
    claimed = {i for i, state in upstream.items() if state.claimed}  # skipped, or FAIL when the content lacks it
    by_content = {i for i, state in upstream.items() if not state.claimed and state.present}
    active = [(i, p) for i, p in numbered if i not in claimed]
    with tempfile.TemporaryDirectory(prefix=tempdirs.prefix("check")) as tmp:
        applied, ambiguous = _peel(_scratch_copy(root, patches, Path(tmp) / "peel"), active)
        scratch = _scratch_copy(root, patches, Path(tmp) / "forward")
        failed, merges = _forward(scratch, active, applied | ambiguous, None if reverse else objects, by_content)
    steps: list[Step] = []
    for index, patch in reversed(numbered) if reverse else numbered:
        outcome = merges.get(index)
        state = upstream.get(index)
        if index in claimed and state is not None:
            action = Action.FAIL if state.missing else Action.SKIP
            steps.append(Step(patch, index, action, upstream=state))
        elif index in by_content and index in failed and state is not None:
            steps.append(Step(patch, index, Action.SKIP, upstream=state))
        elif index in ambiguous:
            steps.append(Step(patch, index, Action.FAIL, finding=Finding.AMBIGUOUS))
        elif outcome is not None and outcome.outcome is Merge.APPLIED:
            steps.append(Step(patch, index, Action.NOTHING, finding=Finding.MERGED, merge=outcome))
        elif outcome is not None and outcome.outcome is Merge.RESOLVES and merge:
            steps.append(Step(patch, index, Action.CHANGE, merge=outcome))
        elif index in failed:
            steps.append(Step(patch, index, Action.FAIL, GitRefusal.of(failed[index]), merge=outcome))
        elif (index in applied) == reverse:
            steps.append(Step(patch, index, Action.CHANGE))
        else:
            steps.append(Step(patch, index, Action.NOTHING))
    return steps


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
    """Every step for one tree, plus its uncommitted changes: ``dirty`` (in files a step will change, and not
    the series' own doing) and ``others`` (elsewhere, left alone)."""

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


def conflicts(steps: Iterable[Step], *, reverse: bool) -> list[Step]:
    """The steps whose patch does not apply and is not in upstream by content: those its teeth may settle. Not in
    reverse (taking a patch out), nor for a patch whose version claims it upstream or that is ambiguous."""
    if reverse:
        return []
    return [
        s for s in steps if s.action is Action.FAIL and not s.upstream_missing and s.finding is not Finding.AMBIGUOUS
    ]


def plan_target(target: TreeToPatch, *, reverse: bool, merge: bool = False, settle: Settle | None = None) -> Plan:
    """Plan ``target`` (see the module docstring); reads the tree, changes nothing. ``merge``: apply with a 3-way
    merge what does not apply as it is (``--3way``); ``settle``: judge the patches that do not apply by their teeth
    (called only when there is one)."""
    objects = gitops.objects_dir(target.worktree)
    steps = tuple(
        plan_series(
            target.root, target.series.patches, version=target.version, reverse=reverse, objects=objects, merge=merge
        )
    )
    if settle is not None and conflicts(steps, reverse=reverse):
        steps = tuple(settle(target, steps))
    changing = series_files(s.patch for s in steps if s.action in (Action.CHANGE, Action.FAIL))
    status = gitops.status_paths(target.worktree) if changing else {}
    touched_dirty = [path for path in changing if path in status]
    dirty = unexplained_changes(target.worktree, touched_dirty, applied_patches(steps, reverse=reverse))
    ours = set(series_files(target.series.patches))
    others = tuple(sorted(path for path in status if path not in ours))
    return Plan(target=target, steps=steps, reverse=reverse, dirty=tuple(dirty), others=others)
