"""What is in the way of a run, found before any tree is changed."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from patchset.apply.plan import Action, Plan, series_files
from patchset.apply.report import dirty_message, failure_message, out_of_order_message, unwritable_message
from patchset.apply.target import TreeToPatch
from patchset.plumbing.errors import BadInput, DoesNotApply


def refuse_duplicates(targets: Sequence[TreeToPatch]) -> None:
    """Refuse two trees of one kind in one run: the regression run takes one tree of each kind."""
    seen: dict[str, TreeToPatch] = {}
    for target in targets:
        if (first := seen.setdefault(target.key, target)) is not target:
            raise BadInput(
                f"two {target.key} trees given ({first.shown}, {target.shown}); pass at most one of each kind"
            )


def _writable(path: Path) -> bool:
    """Writable by this process and not marked read-only (no write bit), which root would otherwise ignore."""
    try:
        mode = path.stat().st_mode if not path.is_symlink() else path.lstat().st_mode
    except OSError:
        return False
    return bool(mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)) and os.access(path, os.W_OK, follow_symlinks=False)


def unwritable(plan: Plan) -> list[str]:
    """The paths the changing steps must write but cannot: a file, or the folder where one is made or removed."""
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


def refuse(plans: Sequence[Plan], *, allow_dirty: bool) -> None:
    """Raise why the first refused plan is; uncommitted changes before a failing patch (they are its likely cause)."""
    for plan in plans:
        # out of order: a patch is applied although one before it is not, so applying would put the earlier on top
        missing = [s.index for s in plan.steps if s.action in (Action.CHANGE, Action.FAIL)]
        applied = [s.index for s in plan.steps if s.action is Action.NOTHING]
        if not plan.reverse and missing and applied and max(applied) > min(missing):
            raise BadInput(out_of_order_message(plan))
        if plan.dirty and not allow_dirty:
            raise BadInput(dirty_message(plan))
        if (step := plan.first_failure) is not None:
            raise DoesNotApply(failure_message(plan, step))
        if plan.changing and (blocked := unwritable(plan)):
            raise BadInput(unwritable_message(plan, blocked))
