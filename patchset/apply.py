"""Apply (or revert) a series on one tree: find out what it is, plan every patch, then change the work tree.

The work tree only: plain ``git apply``, no commit, no index change, so ``git diff`` shows exactly the series and
``--reverse`` (or ``git checkout``) takes it out again.

Atomicity: ``plan_target`` checks every patch of the tree in sequence without touching it (see ``plan.py``);
the caller applies nothing unless every step is possible. ``execute`` then applies the patches one by one;
``git apply`` is atomic per patch, and if one still fails, or the run is interrupted, the patches applied so
far in this run are reverted, last first, so the tree is left as it was found.

Only git work trees are accepted (a subdirectory of one works too): git is what makes "the tree as it was"
checkable (HEAD, status) and recoverable. A plain directory is refused with a hint to ``git init`` it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from patchset import gitops
from patchset.detect import detect
from patchset.errors import BadInput, DoesNotApply
from patchset.pins import Pin, Pins
from patchset.plan import Action, Step, applied_patches, plan_series, series_files, unexplained_changes
from patchset.series import Series, load_series
from patchset.ui import Console, display_path


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


def _worktree(root: Path, shown: str) -> gitops.WorkTree:
    tree = gitops.find_worktree(root)
    if tree is None:
        raise BadInput(
            f"{shown} is not a git checkout, so the patches could not be checked or reverted safely; "
            f"run 'git init && git add -A && git commit -m upstream' in it first"
        )
    return tree


def target_for_path(shown: str, pins: Pins, patches_dir: Path, *, force_version: bool, console: Console) -> Target:
    """The target for a tree named on the command line; raise ``BadInput`` for anything unsupported."""
    root = Path(shown).expanduser()
    if not root.exists():
        raise BadInput(f"{shown} does not exist; pass the root of a verl or Trinity-RFT checkout")
    found = detect(root, shown)
    pin = pins.find(found.key, found.version)
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
        series=load_series(patches_dir, series),
        worktree=_worktree(root, shown),
    )


def target_for_pin(pin: Pin, root: Path, patches_dir: Path) -> Target:
    """The target for a tree the tool made itself from ``pin`` (a cached checkout or its patched clone)."""
    shown = display_path(root)
    return Target(
        root=root.resolve(),
        shown=shown,
        key=pin.key,
        label=pin.label,
        version=pin.version,
        series=load_series(patches_dir, pin.series),
        worktree=_worktree(root, shown),
    )


def plan_target(target: Target, *, reverse: bool) -> Plan:
    """Plan ``target`` (see ``plan.py``); reads the tree, changes nothing."""
    steps = tuple(plan_series(target.root, target.series.patches, version=target.version, reverse=reverse))
    changing = series_files(s.patch for s in steps if s.action in (Action.CHANGE, Action.FAIL))
    status = gitops.status_paths(target.worktree) if changing else {}
    touched_dirty = [path for path in changing if path in status]
    dirty = unexplained_changes(target.worktree, touched_dirty, applied_patches(steps, reverse=reverse))
    ours = set(series_files(target.series.patches))
    others = tuple(sorted(path for path in status if path not in ours))
    return Plan(target=target, steps=steps, reverse=reverse, dirty=tuple(dirty), others=others)


# --- messages ---------------------------------------------------------------------------------------------


def _where(plan: Plan) -> str:
    return f"{plan.target.label} at {plan.target.shown}"


def _failure_detail(plan: Plan, step: Step, *, reverted: bool = False) -> str:
    """What went wrong, in words; ``reverted`` when git's line numbers are from reverting the patch."""
    failure = step.failure
    if step.detail == "ambiguous":
        return "it applies both forward and in reverse, so whether it is applied is unclear"
    if failure is None:
        lines = step.detail.splitlines()
        return lines[0].removeprefix("error: ") if lines else "git apply failed"
    if failure.line:
        hunk = gitops.find_hunk(step.patch.text, failure.path, failure.line, reverse=reverted)
        where = f"hunk {hunk}" if hunk else f"the hunk at line {failure.line}"
        reason = "" if failure.reason == "patch does not apply" else f" ({failure.reason})"
        return f"{failure.path}, {where} does not match{reason}"
    return f"{failure.path}: {failure.reason}"


def failure_message(plan: Plan, step: Step) -> str:
    """One line: which patch failed on which tree, the file and hunk, and what to do next."""
    verb = "is neither applied nor applicable to" if plan.reverse else "does not apply to"
    failure = step.failure
    file_hint = failure.path if failure else ", ".join(step.patch.files[:3])
    dirty_hint = f" ({file_hint} has uncommitted changes)" if failure and failure.path in plan.dirty else ""
    return (
        f"{step.patch.name} {verb} {_where(plan)}: {_failure_detail(plan, step)}{dirty_hint}; nothing was changed. "
        f"Next: compare {file_hint} with the patch (local edits or another upstream revision), "
        f"or refresh the patch in {plan.target.series.path.parent}"
    )


def dirty_message(plan: Plan) -> str:
    files = ", ".join(plan.dirty)
    no_head = "" if gitops.has_head(plan.target.worktree) else " (the repository has no commit yet)"
    return (
        f"{plan.target.shown} has uncommitted changes in {files}, which the patches change{no_head}; "
        f"commit or stash them first, or pass --allow-dirty to patch on top of them"
    )


def _step_line(plan: Plan, step: Step, *, check: bool) -> str:
    name, total = step.patch.name, len(plan.target.series.patches)
    if step.action is Action.CHANGE:
        if check:
            return f"Would {'revert' if plan.reverse else 'apply'} {name} ({step.index}/{total})"
        return f"{'Reverting' if plan.reverse else 'Applying'} {name} ({step.index}/{total})"
    if step.action is Action.NOTHING:
        return f"{name} not applied; skipping" if plan.reverse else f"{name} already applied"
    if step.action is Action.SKIP:
        return f"{name} skipped: in upstream since {step.detail}"
    verb = "is neither applied nor applicable" if plan.reverse else "does not apply"
    first = plan.first_failure
    after = (
        f" (perhaps because {first.patch.name} does not)" if first and first is not step and not plan.reverse else ""
    )
    return f"{name} {verb}: {_failure_detail(plan, step)}{after}"


def summary_line(plan: Plan, *, check: bool) -> str:
    change, nothing = plan.count(Action.CHANGE), plan.count(Action.NOTHING)
    if plan.reverse:
        parts = [f"{change} {'would revert' if check else 'reverted'}", f"{nothing} not applied"]
    else:
        parts = [f"{change} {'would apply' if check else 'applied'}", f"{nothing} already applied"]
    if skipped := plan.count(Action.SKIP):
        parts.append(f"{skipped} skipped")
    if failed := plan.count(Action.FAIL):
        parts.append(f"{failed} {'neither applied nor applicable' if plan.reverse else 'do not apply'}")
    return f"{_where(plan)}: {', '.join(parts)}"


def report(plan: Plan, console: Console) -> None:
    """Print the plan as a dry run (``--check``)."""
    for step in plan.steps:
        console.step(_step_line(plan, step, check=True))
    console.summary(summary_line(plan, check=True))


# --- changing the tree ------------------------------------------------------------------------------------


def _run(plan: Plan, step: Step, *, undo: bool = False) -> gitops.ApplyResult:
    tree = plan.target.worktree
    return gitops.apply_patch(tree.toplevel, step.patch.path, reverse=plan.reverse != undo, directory=tree.prefix)


def _rollback(plan: Plan, done: Sequence[Step], console: Console) -> list[str]:
    """Undo ``done`` (last first); return the names of the patches that could not be undone."""
    stuck: list[str] = []
    for step in reversed(done):
        console.step(f"Rolling back {step.patch.name}")
        if not _run(plan, step, undo=True).ok:
            stuck.append(step.patch.name)
    return stuck


def execute(plan: Plan, console: Console) -> None:
    """Carry out a plan that has no failed step, rolling back on an unexpected failure or an interrupt."""
    if plan.first_failure is not None:
        raise DoesNotApply(failure_message(plan, plan.first_failure))
    if plan.others and plan.count(Action.CHANGE):
        console.step(f"Leaving {len(plan.others)} other uncommitted change(s) in {plan.target.shown} alone")
    done: list[Step] = []
    try:
        for step in plan.steps:
            console.step(_step_line(plan, step, check=False))
            if step.action is not Action.CHANGE:
                continue
            result = _run(plan, step)
            if not result.ok:
                break
            done.append(step)
        else:
            console.summary(summary_line(plan, check=False))
            return
    except BaseException:
        _rollback(plan, done, console)
        raise
    stuck = _rollback(plan, done, console)
    failed = Step(step.patch, step.index, Action.FAIL, result.stderr, gitops.parse_failure(result.stderr))
    verb = "revert" if plan.reverse else "apply"
    detail = _failure_detail(plan, failed, reverted=plan.reverse)
    if stuck:
        files = " ".join(series_files(s.patch for s in done))
        raise DoesNotApply(
            f"{step.patch.name} failed to {verb} on {_where(plan)} after its check passed ({detail}), and rolling "
            f"back failed too: {', '.join(stuck)} still changed; restore with 'git checkout -- {files}' there"
        )
    raise DoesNotApply(
        f"{step.patch.name} failed to {verb} on {_where(plan)} after its check passed ({detail}); the "
        f"{len(done)} patch(es) changed before it were rolled back and the tree is as it was. "
        f"Next: run again with --check"
    )
