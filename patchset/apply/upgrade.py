"""``apply --upgrade``: replace the earlier series a tree holds with today's, then test, all or nothing. Today's is
recorded only once the tests pass, so a killed run leaves the earlier series (or a snapshot of it) or today's."""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from patchset.apply.earlier import Held, peel_unknown, restore_originals, write_record
from patchset.apply.plan import Action, plan_series, series_files
from patchset.apply.report import listing
from patchset.apply.target import TreeToPatch
from patchset.apply.transaction import restore
from patchset.plumbing import files, gitops, tempdirs
from patchset.plumbing.errors import BadInput, DoesNotApply
from patchset.plumbing.signals import Guard
from patchset.plumbing.snapshot import Snapshot
from patchset.plumbing.ui import Console
from patchset.series.history import KnownSeries, recover_texts
from patchset.upstreams.fetch import ensure_upstream
from patchset.upstreams.workspace import Workspace


@dataclass(frozen=True)
class Upgrade:
    """One tree to upgrade: the earlier series it holds (if any), today's, and the scratch copy of their files."""

    target: TreeToPatch
    held: Held | None
    today: KnownSeries
    paths: tuple[str, ...]
    scratch: Path


def _apply_today(target: TreeToPatch, scratch: Path, held: Held | None, console: Console) -> None:
    """Apply today's series to the scratch copy as ``apply`` would to the tree; ``DoesNotApply`` where it cannot."""
    after = f" once {held.series.shown} is taken out" if held is not None else ""
    total = len(target.series.patches)
    for step in plan_series(scratch, target.series.patches, version=target.version):
        result = gitops.apply_patch(scratch, step.patch.path) if step.action is Action.CHANGE else None
        if step.action is Action.FAIL or (result is not None and not result.ok):
            stderr = result.stderr if result is not None else step.stderr
            why = (stderr.splitlines() or ["it does not apply"])[0].removeprefix("error: ")
            raise DoesNotApply(
                f"{step.patch.name} does not apply to {target.label} at {target.shown}{after} ({why}); nothing was "
                f"changed. Next: run --check on a fresh clone of the release to see why"
            )
        done = {Action.CHANGE: "applied", Action.NOTHING: "already applied", Action.SKIP: "skipped: upstream has it"}
        console.step(f"{step.patch.name} ({step.index}/{total}): {done[step.action]}")


def prepare(
    target: TreeToPatch,
    held: Held | None,
    today: KnownSeries,
    into: Path,
    *,
    workspace: Workspace,
    allow_dirty: bool,
    console: Console,
) -> Upgrade:
    """Work out ``target``'s upgrade in the scratch folder ``into`` (the tree is only read); raise for a refusal."""

    def vanilla() -> Path | None:  # asked only when the tree's own git objects lack a file's original
        pin = workspace.pins.find(target.key, target.version)
        return ensure_upstream(pin, workspace.cache, console) if pin is not None else None

    earlier = {c.path for p in held.series.patches for c in p.changes} if held is not None else set()
    paths = tuple(dict.fromkeys([*sorted(earlier), *series_files(target.series.patches)]))
    peeled: Mapping[str, bytes] = {}
    if held is not None and held.unknown:
        texts = recover_texts(held.series, workspace.patches_dir)
        peeled = peel_unknown(target, held, texts, into.with_name(f"{into.name}-peel"))
    if held is not None and (unknown := [rel for rel in held.unknown if rel not in peeled]):
        raise BadInput(
            f"{target.shown} has changes of its own in {listing(unknown)}, which {held.series.shown} changes: they "
            f"are in no state that series wrote (a local edit, or a patch merged with --3way onto changed code), so "
            f"taking the series out would lose them; nothing was changed. Next: commit or stash those changes "
            f"elsewhere, or restore the files (git checkout -- FILE), then run --upgrade again"
        )
    # uncommitted changes in the files today's series changes and the earlier did not are refused; others left alone
    status = gitops.status_paths(target.worktree)
    if (dirty := [rel for rel in paths if rel in status and rel not in earlier]) and not allow_dirty:
        raise BadInput(
            f"{target.shown} has uncommitted changes in {listing(dirty)}, which the series changes; nothing was "
            f"changed. Next: commit or stash them, or pass --allow-dirty to patch on top of them"
        )
    others = sorted(rel for rel in status if rel not in paths)
    gitops.scratch_copy(target.root, paths, into)
    if held is not None:
        console.step(f"Taking {held.series.shown} out of {target.shown} (on a scratch copy)")
        lost = restore_originals(target, held, into, vanilla, peeled)
        if lost:
            raise BadInput(
                f"the release's own {listing(lost)} could not be found for {target.shown} (neither in its git objects "
                f"nor in the pinned release's checkout), so the earlier series cannot be taken out exactly; nothing "
                f"was changed. Next: run in a git checkout of the release"
            )
    console.step(f"Applying today's {target.series.name} series there")
    _apply_today(target, into, held, console)
    if others:
        console.step(f"Leaving {len(others)} other uncommitted change(s) in {target.shown} alone: {listing(others)}")
    return Upgrade(target, held, today, paths, into)


def _install(upgrades: Sequence[Upgrade], homes: Mapping[Path, Path], guard: Guard) -> list[tuple[Snapshot, str]]:
    """Snapshot each tree's files, then install the scratch files over them; all or nothing."""
    snapshots: list[tuple[Snapshot, str]] = []
    try:
        for item in upgrades:
            with guard.critical():
                snapshot = Snapshot(item.target.root, item.paths, homes.get(item.target.root))
                snapshots.append((snapshot, item.target.shown))
                files.install_paths(item.scratch, item.target.root, item.paths)
            guard.check()
    except BaseException as exc:
        stuck = restore(snapshots, guard)
        if isinstance(exc, OSError):
            restored = f"; restoring failed too: {'; '.join(stuck)}" if stuck else "; every tree was restored"
            raise BadInput(f"could not change the tree: {exc}{restored}") from None
        raise
    return snapshots


def run_upgrade(
    plans: Sequence[tuple[TreeToPatch, Held | None, KnownSeries]],
    *,
    workspace: Workspace,
    homes: Mapping[Path, Path],
    test: Callable[[], tuple[int, list[str]]] | None,
    allow_dirty: bool,
    dry_run: bool,
    console: Console,
    guard: Guard,
) -> int:
    """Upgrade every tree of ``plans``, then ``test`` them (status, lines to show); unless 0, the trees are restored."""
    with tempfile.TemporaryDirectory(prefix=tempdirs.prefix("upgrade")) as tmp:
        work_out = functools.partial(prepare, workspace=workspace, allow_dirty=allow_dirty, console=console)
        upgrades = [work_out(target, held, today, Path(tmp) / str(n)) for n, (target, held, today) in enumerate(plans)]
        if dry_run:
            for item in upgrades:
                was = f"{item.held.series.shown} would be replaced by" if item.held else "would be given"
                console.summary(f"{item.target.label} at {item.target.shown}: {was} {item.today.shown} (--check)")
            return 0
        snapshots = _install(upgrades, homes, guard)
    try:
        for item in upgrades:
            was = f"{item.held.series.shown} replaced by" if item.held is not None else "applied"
            console.summary(f"{item.target.label} at {item.target.shown}: {was} {item.today.shown}")
        status, lines = test() if test is not None else (0, [])
        for line in lines:
            console.summary(line)
    except BaseException:
        stuck = restore(snapshots, guard)
        if stuck:
            console.warn(f"restoring the trees failed: {'; '.join(stuck)}; copy those files back from there")
        raise
    if status != 0:
        stuck = restore(snapshots, guard)
        restored = f"restoring failed: {'; '.join(stuck)}" if stuck else "every tree was put back as it was"
        console.warn(f"the upgrade is undone because the regression tests failed: {restored}")
        return status
    with guard.critical():
        for snapshot, _ in snapshots:
            snapshot.discard()
        for item in upgrades:
            if (problem := write_record(homes, item.target, item.today)) is not None:
                console.warn(f"{problem}; the tree is upgraded, and a later run recognises it by content")
    return 0
