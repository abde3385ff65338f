"""Carry out the plans of one run, all or nothing: every file is saved first (``snapshot.py``) and, on any failure
or interrupt, copied back, which does not depend on the patches reverting cleanly."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from patchset.apply.plan import Action, Plan, Step, series_files
from patchset.apply.report import failure_detail, listing, partly_line, step_line, summary_line, where
from patchset.plumbing import gitops
from patchset.plumbing.errors import BadInput, DoesNotApply
from patchset.plumbing.gitops import Merge, three_way
from patchset.plumbing.signals import Guard, Interrupted
from patchset.plumbing.snapshot import Snapshot
from patchset.plumbing.ui import Console


@dataclass
class _Progress:
    """One tree being changed: its plan, the snapshot taken before, and the steps done so far."""

    plan: Plan
    snapshot: Snapshot
    done: list[Step] = field(default_factory=list)


class _StepFailed(Exception):
    def __init__(self, plan: Plan, step: Step, stderr: str) -> None:
        super().__init__(stderr)
        self.plan, self.step, self.stderr = plan, step, stderr


def _run_step(plan: Plan, step: Step) -> str | None:
    """Carry out one CHANGE step on the real tree; git's error, or None when it worked."""
    tree = plan.target.worktree
    if step.merged:
        result = three_way(plan.target.root, step.patch.path, step.patch.files, gitops.objects_dir(tree), install=True)
        return None if result.outcome is Merge.RESOLVES else f"error: the 3-way merge failed: {result.detail}"
    result = gitops.apply_patch(tree.toplevel, step.patch.path, reverse=plan.reverse, directory=tree.prefix)
    return None if result.ok else result.stderr


def _execute(plan: Plan, console: Console, guard: Guard, progress: list[_Progress], home: Path | None) -> None:
    if (line := partly_line(plan, check=False)) is not None:
        console.step(line)
    if plan.others and plan.changing:
        shown = listing(plan.others)
        console.step(f"Leaving {len(plan.others)} other uncommitted change(s) in {plan.target.shown} alone: {shown}")
    if plan.changing:
        paths = series_files(s.patch for s in plan.changing)
        progress.append(_Progress(plan, Snapshot(plan.target.root, paths, home)))
    for step in plan.steps:
        console.step(step_line(plan, step, check=False))
        if step.action is not Action.CHANGE:
            continue
        with guard.critical():
            error = _run_step(plan, step)
            if error is None:
                progress[-1].done.append(step)
        guard.check()
        if error is not None:
            raise _StepFailed(plan, step, error)
    console.summary(summary_line(plan, check=False))


def restore(snapshots: Sequence[tuple[Snapshot, str]], guard: Guard) -> list[str]:
    """Put each tree (``(snapshot, how it is shown)``) back, last first; what could not be, where its originals are."""
    stuck: list[str] = []
    with guard.critical():
        for snapshot, shown in reversed(snapshots):
            if failed := snapshot.restore():
                stuck.append(f"{', '.join(failed)} in {shown} (the originals are in {snapshot.keep()})")
            else:
                snapshot.discard()
    return stuck


def _failed_message(failed: _StepFailed, progress: Sequence[_Progress], stuck: list[str]) -> str:
    plan, step = failed.plan, failed.step
    verb = "revert" if plan.reverse else "apply"
    as_failure = Step(step.patch, step.index, Action.FAIL, failed.stderr)
    detail = failure_detail(plan, as_failure, reverted=plan.reverse)
    head = f"{step.patch.name} failed to {verb} on {where(plan)} after its check passed ({detail})"
    if stuck:
        return f"{head}, and rolling back failed too: {'; '.join(stuck)}; copy those files back from there"
    earlier = [item.plan.target.shown for item in progress if item.plan is not plan]
    also = f" (and so were the trees patched before it in this run: {', '.join(earlier)})" if earlier else ""
    done = sum(len(item.done) for item in progress)
    return (
        f"{head}; the {done} patch(es) changed before it were rolled back and the tree is as it "
        f"was{also}. Next: run again with --check"
    )


def apply_plans(
    plans: Sequence[Plan], console: Console, guard: Guard, homes: Mapping[Path, Path] | None = None
) -> None:
    """Carry out ``plans``, none refused, all or nothing; ``homes``: {root: its snapshot's folder, beside its lock}."""
    progress: list[_Progress] = []
    homes = homes or {}
    try:
        for plan in plans:
            _execute(plan, console, guard, progress, homes.get(plan.target.root))
    except BaseException as exc:
        if isinstance(exc, BrokenPipeError):  # the output was closed (`apply ... | head`)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no more writes to a reader that is gone
        with guard.critical():
            for item in reversed(progress):
                for step in reversed(item.done):
                    with contextlib.suppress(OSError):  # the output is gone (a closed pipe): the trees are restored
                        console.step(f"Rolling back {step.patch.name}")
            stuck = restore([(item.snapshot, item.plan.target.shown) for item in progress], guard)
        if isinstance(exc, _StepFailed):
            raise DoesNotApply(_failed_message(exc, progress, stuck)) from None
        if isinstance(exc, BrokenPipeError):  # ended as that signal ends a command
            exc = Interrupted(signal.SIGPIPE)
        if isinstance(exc, Interrupted):  # what the run did to the trees, once rolled back
            done = sum(len(item.done) for item in progress)
            if stuck:
                exc.outcome = f"rolling back failed: {'; '.join(stuck)}; copy those files back from there"
            elif done:
                exc.outcome = (
                    f"the {done} patch(es) applied in this run were rolled back and every tree is as it was found"
                )
            raise exc from None
        if isinstance(exc, OSError):
            restored = f"; rolling back failed too: {'; '.join(stuck)}" if stuck else "; every tree was restored"
            raise BadInput(f"could not change the tree: {exc}{restored}") from None
        raise
    for item in progress:
        item.snapshot.discard()
