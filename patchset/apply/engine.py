"""Apply (or revert) a series on one tree: find out what it is, plan every patch, and say what is in the way.

The work tree only: plain ``git apply``, no commit, no index change, so ``git diff`` shows exactly the series and
``--reverse`` (or ``git checkout``) takes it out again.

Atomicity: ``plan_target`` checks every patch of the tree in sequence without touching it (see ``plan.py``), and
``refusal`` finds anything else in the way (uncommitted changes in the files the patches change, a series applied
out of order, files that cannot be written); the caller changes nothing unless every step is possible. Changing
the trees, with the rollback that leaves them as they were found on any failure or interrupt, is
``transaction.py``.

Only git work trees whose files are tracked are accepted (a subdirectory of one works too): git is what makes
"the tree as it was" checkable (HEAD, status) and recoverable. A plain directory (an unpacked sdist) is refused
with a hint to ``git init`` it.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from patchset.apply.plan import Action, Step, applied_patches, plan_series, series_files, unexplained_changes
from patchset.plumbing import gitops
from patchset.plumbing.errors import BadInput, DoesNotApply, PatchsetError
from patchset.plumbing.merge import Merge
from patchset.plumbing.ui import Console, display_path
from patchset.series.model import Series, load_series
from patchset.upstreams.detect import detect
from patchset.upstreams.pins import Pin, Pins


@dataclass(frozen=True)
class Target:
    """A tree to patch: where it is, how to name it, what it is and which series it takes."""

    root: Path
    shown: str
    key: str
    label: str
    version: str
    series: Series
    worktree: gitops.WorkTree


@dataclass(frozen=True)
class Plan:
    """Every step for one tree, plus its uncommitted changes: ``dirty`` (in files a step will change, and not
    the series' own doing) and ``others`` (elsewhere, left alone)."""

    target: Target
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


def _worktree(root: Path, shown: str, marker: str) -> gitops.WorkTree:
    tree = gitops.find_worktree(root)
    if tree is None:
        raise BadInput(
            f"{shown} is not a git checkout, so the patches could not be checked or reverted safely; "
            f"run 'git init && git add -A && git commit -m upstream' in it first"
        )
    if not gitops.is_tracked(tree, marker):
        where = "" if not tree.prefix else f" (inside the git checkout {tree.toplevel})"
        raise BadInput(
            f"{shown} is in git{where}, but its files are not tracked there ({marker} is untracked or ignored), "
            f"so the patches could not be checked or reverted safely; commit the tree first, or make it a "
            f"checkout of its own: cd {shown} && git init && git add -A && git commit -m upstream"
        )
    return tree


def _series(patches_dir: Path, name: str) -> Series:
    """The series to apply; one that lists no patch would make any run a silent success, so it is refused."""
    series = load_series(patches_dir, name)
    if not series.patches:
        raise BadInput(f"{series.path} lists no patches; add the patch file names, one a line, in the order to apply")
    return series


def target_for_path(shown: str, pins: Pins, patches_dir: Path, *, force_version: bool, console: Console) -> Target:
    """The target for a tree named on the command line; raise ``BadInput`` for anything unsupported."""
    root = Path(shown).expanduser()
    if not root.exists():
        raise BadInput(f"{shown} does not exist; pass the root of a verl or Trinity-RFT checkout")
    found = detect(root, shown)
    pin = pins.find(found.key, found.version)
    if pin is not None and pin.companion_for is not None and not force_version:
        raise BadInput(
            f"{shown} is {pin.label}, which this patchset pins only to test {pin.companion_for} trees beside it; "
            f"the {pin.series} series does not target it (supported: {', '.join(pins.versions(found.key))}). "
            f"Next: give the {pin.companion_for} tree alone (it is tested beside {pin.label}), or pass "
            f"--force-version to try the {pin.series} series anyway"
        )
    if pin is not None and pin.companion_for is not None:
        pin = None
    if pin is None:
        supported = ", ".join(pins.versions(found.key)) or "none"
        candidates = pins.for_key(found.key)
        fallback = pins.default_for(found.key) or (candidates[-1] if candidates else None)
        if fallback is None:
            raise BadInput(f"{shown} is {found.label} {found.version}, but {pins.source} has no pin for {found.key}")
        if not force_version:
            raise BadInput(
                f"{shown} is {found.label} {found.version}, which this patchset does not support "
                f"(supported: {supported}); pass --force-version to try the {fallback.series} series anyway"
            )
        console.warn(
            f"{shown} is {found.label} {found.version} (supported: {supported}); "
            f"trying the {fallback.series} series anyway (--force-version)"
        )
        series = fallback.series
    else:
        series = pin.series
    return Target(
        root=root.resolve(),
        shown=shown,
        key=found.key,
        label=f"{found.label} {found.version}" if pin is None else pin.label,
        version=found.version,
        series=_series(patches_dir, series),
        worktree=_worktree(root, shown, found.marker),
    )


def target_for_pin(pin: Pin, root: Path, patches_dir: Path) -> Target:
    """The target for a tree the tool made itself from ``pin`` (a cached checkout or its patched clone)."""
    shown = display_path(root)
    tree = gitops.find_worktree(root)
    if tree is None:
        raise BadInput(f"{shown} is not a git checkout; delete it and run again to rebuild it")
    return Target(
        root=root.resolve(),
        shown=shown,
        key=pin.key,
        label=pin.label,
        version=pin.version,
        series=_series(patches_dir, pin.series),
        worktree=tree,
    )


def plan_target(target: Target, *, reverse: bool, merge: bool = False) -> Plan:
    """Plan ``target`` (see ``plan.py``); reads the tree, changes nothing. ``merge``: apply with a 3-way merge what
    does not apply as it is (``--3way``)."""
    objects = gitops.objects_dir(target.worktree)
    steps = tuple(
        plan_series(
            target.root, target.series.patches, version=target.version, reverse=reverse, objects=objects, merge=merge
        )
    )
    changing = series_files(s.patch for s in steps if s.action in (Action.CHANGE, Action.FAIL))
    status = gitops.status_paths(target.worktree) if changing else {}
    touched_dirty = [path for path in changing if path in status]
    dirty = unexplained_changes(target.worktree, touched_dirty, applied_patches(steps, reverse=reverse))
    ours = set(series_files(target.series.patches))
    others = tuple(sorted(path for path in status if path not in ours))
    return Plan(target=target, steps=steps, reverse=reverse, dirty=tuple(dirty), others=others)


# --- what is in the way -----------------------------------------------------------------------------------


def out_of_order(plan: Plan) -> bool:
    """True when a patch is applied although one before it in the series is not (applying would put the earlier
    one on top of the later one, an order the series never had)."""
    if plan.reverse:
        return False
    missing = [s.index for s in plan.steps if s.action in (Action.CHANGE, Action.FAIL)]
    return bool(missing) and any(s.action is Action.NOTHING and s.index > min(missing) for s in plan.steps)


def _writable(path: Path) -> bool:
    """Writable by this process and not marked read-only (no write bit), which root would otherwise ignore."""
    try:
        mode = path.stat().st_mode if not path.is_symlink() else path.lstat().st_mode
    except OSError:
        return False
    return bool(mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)) and os.access(path, os.W_OK, follow_symlinks=False)


def unwritable(plan: Plan) -> list[str]:
    """The paths (relative to the tree) that the changing steps must write but cannot: a file without write
    permission, or the folder where a file is replaced, created or removed."""
    root = plan.target.root
    blocked: dict[str, None] = {}
    for rel in series_files(s.patch for s in plan.changing):
        path = root / rel
        if (path.is_file() or path.is_symlink()) and not _writable(path):
            blocked.setdefault(rel, None)
        folder = path.parent
        while not folder.exists() and folder != root:
            folder = folder.parent
        if not _writable(folder):
            blocked.setdefault((folder.relative_to(root).as_posix() if folder != root else ".") + "/", None)
    return list(blocked)


def refusal(plan: Plan, *, allow_dirty: bool) -> PatchsetError | None:
    """Why the plan must not be carried out, as the error to raise, or None (``--check`` refuses alike). In order:
    a series applied out of order, uncommitted changes in the files it changes (the likely cause of a patch not
    applying there), a patch that does not apply, a tree that cannot be written where the patches write."""
    if out_of_order(plan):
        return BadInput(out_of_order_message(plan))
    if plan.dirty and not allow_dirty:
        return BadInput(dirty_message(plan))
    if (step := plan.first_failure) is not None:
        return DoesNotApply(failure_message(plan, step))
    if plan.changing and (blocked := unwritable(plan)):
        return BadInput(unwritable_message(plan, blocked))
    return None


# --- messages ---------------------------------------------------------------------------------------------


def where(plan: Plan) -> str:
    return f"{plan.target.label} at {plan.target.shown}"


def skip_reason(plan: Plan, step: Step) -> str:
    """Why a SKIP step is skipped: ``in upstream since 0.9.0`` (by the version alone, when the patch declares no
    ``Upstream-Check``), ``in upstream since 0.9.0 (verl 0.9.1 has it: <file> matches /<regex>/)``, or, on a tree
    below that version, ``already upstream (content), verl ... has it: <file> matches /<regex>/``."""
    state = step.upstream
    if state is None or not state.matched:
        return f"in upstream since {step.detail}"
    has = f"{plan.target.label} has it: {', '.join(str(check) for check in state.matched)}"
    if state.claimed:
        return f"in upstream since {state.since} ({has})"
    return f"already upstream (content), {has}"


def _upstream_lacking(plan: Plan, step: Step) -> str:
    """The version claims the patch's change upstream, the content lacks it: which checks failed."""
    assert step.upstream is not None
    lacks = ", ".join(f"{check.path} {why}" for check, why in step.upstream.missing)
    return (
        f"{plan.target.label} is at or past {step.upstream.since}, the upstream version that has this change "
        f"(Applied-Upstream), but its content lacks it: {lacks}"
    )


def failure_detail(plan: Plan, step: Step, *, reverted: bool = False) -> str:
    """What went wrong, in words; ``reverted`` when git's line numbers are from reverting the patch."""
    failure = step.failure
    if step.upstream_missing:
        return _upstream_lacking(plan, step)
    if step.detail == "ambiguous":
        return "it applies both forward and in reverse, so whether it is applied is unclear"
    if failure is None:
        lines = step.detail.splitlines()
        return lines[0].removeprefix("error: ") if lines else "git apply failed"
    if failure.line:
        hunk = gitops.find_hunk(step.patch.text, failure.path, failure.line, reverse=reverted)
        at = f"hunk {hunk}" if hunk else f"the hunk at line {failure.line}"
        reason = "" if failure.reason == "patch does not apply" else f" ({failure.reason})"
        return f"{failure.path}, {at} does not match{reason}"
    return f"{failure.path}: {failure.reason}"


def _state(plan: Plan, step: Step) -> str:
    if step.action is Action.CHANGE:
        if plan.reverse:
            return "applied"
        return "not applied, would merge" if step.merged else "not applied"
    if step.action is Action.NOTHING:
        return "not applied" if plan.reverse else "applied"
    if step.action is Action.SKIP:
        return skip_reason(plan, step)
    if step.upstream_missing:
        return "claimed upstream but missing there"
    return "neither applied nor applicable" if plan.reverse else "does not apply"


def series_state(plan: Plan) -> str:
    """Every patch of the series and where it stands, in series order: ``1/2 0001-x applied, 2/2 ...``."""
    total = len(plan.target.series.patches)
    ordered = sorted(plan.steps, key=lambda s: s.index)
    return ", ".join(f"{s.index}/{total} {s.patch.name} {_state(plan, s)}" for s in ordered)


def _partly_applied(plan: Plan) -> bool:
    applied = Action.CHANGE if plan.reverse else Action.NOTHING
    return any(s.action is applied for s in plan.steps) and any(
        s.action not in (applied, Action.SKIP) for s in plan.steps
    )


def _merge_advice(plan: Plan, step: Step, file_hint: str) -> str:
    """Whether a 3-way merge would resolve the step, and so what to do next."""
    refresh = f"or refresh the patch in {plan.target.series.path.parent}"
    compare = f"compare {file_hint} with the patch (local edits or another upstream revision)"
    result = step.merge
    if result is None or plan.reverse:
        return f"Next: {compare}, {refresh}"
    if result.outcome is Merge.RESOLVES:
        return (
            f"A 3-way merge would resolve it (checked on a scratch copy). Next: run again with --3way to merge it "
            f"into the work tree (still all or nothing; review with git diff), or {compare}, {refresh}"
        )
    if result.outcome is Merge.CONFLICTS:
        return f"A 3-way merge would not resolve it either (conflicts in {result.detail}). Next: {compare}, {refresh}"
    return f"A 3-way merge is not possible ({result.detail}). Next: {compare}, {refresh}"


def failure_message(plan: Plan, step: Step) -> str:
    """One line: which patch failed on which tree, the file and hunk, whether a 3-way merge would resolve it, and
    what to do next; with the state of every patch when the series has several."""
    state = f" [series: {series_state(plan)}]" if len(plan.steps) > 1 else ""
    if step.upstream_missing:
        return (
            f"{step.patch.name} on {plan.target.shown}: {failure_detail(plan, step)}; nothing was changed{state}. "
            f"Next: look at those files in the tree: if upstream reworked that code and still has the fix, update "
            f"the Upstream-Check: lines of {step.patch.path} to recognise it; if this tree dropped the fix (a fork "
            f"or a revert), it needs the fix by other means, since the series does not apply a patch that upstream "
            f"claims to have"
        )
    verb = "is neither applied nor applicable to" if plan.reverse else "does not apply to"
    failure = step.failure
    file_hint = failure.path if failure else ", ".join(step.patch.files[:3])
    dirty_hint = f" ({file_hint} has uncommitted changes)" if failure and failure.path in plan.dirty else ""
    return (
        f"{step.patch.name} {verb} {where(plan)}: {failure_detail(plan, step)}{dirty_hint}; nothing was "
        f"changed{state}. {_merge_advice(plan, step, file_hint)}"
    )


def listing(paths: tuple[str, ...] | list[str], limit: int = 5) -> str:
    shown = ", ".join(paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def dirty_message(plan: Plan) -> str:
    files = ", ".join(plan.dirty)
    no_head = "" if gitops.has_head(plan.target.worktree) else " (the repository has no commit yet)"
    others = f"; the other uncommitted changes ({listing(plan.others)}) are not in the way" if plan.others else ""
    verb = "reverting" if plan.reverse else "patching"
    return (
        f"{plan.target.shown} has uncommitted changes in {files}, which the patches change{no_head}; nothing was "
        f"changed{others}. Next: commit or stash them, or pass --allow-dirty to go on {verb} on top of them"
    )


def out_of_order_message(plan: Plan) -> str:
    return (
        f"{where(plan)} has the series applied out of order ({series_state(plan)}): applying the rest would put an "
        f"earlier patch on top of a later one; nothing was changed. Next: take the applied patches out with "
        f"--reverse, then apply the whole series"
    )


def unwritable_message(plan: Plan, blocked: list[str]) -> str:
    return (
        f"{plan.target.shown} is read-only where the patches write: {listing(blocked)} (no write permission); "
        f"nothing was changed. Next: make it writable (chmod -R u+w {plan.target.shown}) or apply to a writable "
        f"clone (git clone {plan.target.shown} COPY)"
    )


def step_line(plan: Plan, step: Step, *, check: bool) -> str:
    """The progress line of one step: ``Applying 0001-x (1/2)``, ``0001-x already applied``, ..."""
    name, total = step.patch.name, len(plan.target.series.patches)
    if step.action is Action.CHANGE:
        how = " with a 3-way merge" if step.merged else ""
        if check:
            return f"Would {'revert' if plan.reverse else 'apply'} {name} ({step.index}/{total}){how}"
        return f"{'Reverting' if plan.reverse else 'Applying'} {name} ({step.index}/{total}){how}"
    if step.action is Action.NOTHING:
        if plan.reverse:
            return f"{name} not applied; skipping"
        return f"{name} already applied" + (" (by a 3-way merge)" if step.detail == "merged" else "")
    if step.action is Action.SKIP:
        return f"{name} skipped: {skip_reason(plan, step)}"
    if step.upstream_missing:
        return f"{name}: {failure_detail(plan, step)}"
    verb = "is neither applied nor applicable" if plan.reverse else "does not apply"
    first = plan.first_failure
    after = (
        f" (perhaps because {first.patch.name} does not)" if first and first is not step and not plan.reverse else ""
    )
    merge = ""
    if step.merge is not None and not plan.reverse:
        merge = {
            Merge.RESOLVES: "; a 3-way merge would resolve it (--3way)",
            Merge.CONFLICTS: "; a 3-way merge would conflict",
        }.get(step.merge.outcome, "")
    return f"{name} {verb}: {failure_detail(plan, step)}{after}{merge}"


def partly_line(plan: Plan, *, check: bool) -> str | None:
    """``... is partly applied (...)`` when some patches are in and some are not, else None."""
    if not _partly_applied(plan):
        return None
    rest = "would revert the applied ones" if plan.reverse else "would apply the rest"
    if not check:
        rest = "reverting the applied ones" if plan.reverse else "applying the rest"
    return f"{where(plan)}: the series is partly applied ({series_state(plan)}); {rest}"


def summary_line(plan: Plan, *, check: bool) -> str:
    change, nothing = plan.count(Action.CHANGE), plan.count(Action.NOTHING)
    if plan.reverse:
        parts = [f"{change} {'would revert' if check else 'reverted'}", f"{nothing} not applied"]
    else:
        parts = [f"{change} {'would apply' if check else 'applied'}", f"{nothing} already applied"]
        if merged := sum(1 for s in plan.steps if s.merged):
            parts[0] += f" ({merged} by a 3-way merge)"
    if skipped := plan.count(Action.SKIP):
        parts.append(f"{skipped} skipped")
    if failed := plan.count(Action.FAIL):
        parts.append(f"{failed} {'neither applied nor applicable' if plan.reverse else 'do not apply'}")
    return f"{where(plan)}: {', '.join(parts)}"


def report(plan: Plan, console: Console) -> None:
    """Print the plan as a dry run (``--check``)."""
    if (line := partly_line(plan, check=True)) is not None:
        console.step(line)
    for step in plan.steps:
        console.step(step_line(plan, step, check=True))
    console.summary(summary_line(plan, check=True))
