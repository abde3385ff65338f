"""One run per tree: ``<git-dir>/patchset/lock``, taken in path order before any tree is read (``--check`` too); first
restore what a killed run left half-done from its snapshot there (SIGKILL runs no handler). Unwritable: not locked."""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from patchset.apply.target import TreeToPatch
from patchset.plumbing import gitops, treelock
from patchset.plumbing.errors import BadInput, TreeLocked
from patchset.plumbing.signals import Guard
from patchset.plumbing.snapshot import Snapshot
from patchset.plumbing.ui import Console

FOLDER = "patchset"


def _busy_message(shown: str, busy: treelock.Busy) -> str:
    who = f"another run ({busy.holder})" if busy.holder else "another run"
    return (
        f"{shown} is being changed or checked by {who}, which holds {busy.path}; nothing was changed. Next: wait "
        f"for that run to end, then run again"
    )


def _recover(folder: Path, shown: str, stale: treelock.Holder | None, console: Console) -> None:
    """Restore the trees from the snapshots a killed run (or a failed rollback) left in ``folder``, and say so."""
    if stale is not None:
        run = f"a run that was killed (pid {stale.pid}, started {stale.started})"
    else:  # its lock was released: the run ended, but could not restore everything from its snapshot
        run = "an earlier run that could not restore it"
    for backup in sorted(folder.glob("snapshot-*")):
        snapshot = Snapshot.load(backup)
        if snapshot is None:  # killed while saving the files, before it changed any
            shutil.rmtree(backup, ignore_errors=True)
            continue
        failed = snapshot.restore()
        if failed:
            raise BadInput(
                f"{shown} was left half-changed by {run}, and restoring it from that run's snapshot failed: "
                f"{', '.join(failed)}; nothing else was changed. Next: copy those files back from {backup} (its "
                f"manifest.json names them by number), then remove {backup}"
            )
        snapshot.discard()
        console.warn(
            f"{shown} was left half-changed by {run}: restored {len(snapshot.paths)} file(s) from its snapshot, as "
            f"they were before it; now doing what was asked"
        )


def refuse_if_held(path: Path, shown: str) -> None:
    """Raise ``TreeLocked`` naming the run that holds the tree at ``path``, if one does: a tree not recognised may be
    mid-change by that run, and exit 4 naming it says more than "not a checkout"."""
    try:
        tree = gitops.find_worktree(path) if path.is_dir() else None
        folder = gitops.git_dir(tree) / FOLDER if tree is not None else None
    except (gitops.GitError, OSError):
        return
    if folder is not None and (held := treelock.busy(folder)) is not None:  # None: not a git checkout, no run holds it
        raise TreeLocked(_busy_message(shown, held))


@contextmanager
def locked(targets: Sequence[TreeToPatch], command: str, console: Console, guard: Guard) -> Iterator[dict[Path, Path]]:
    """Hold the trees of ``targets`` for ``command``, first restoring what a killed run left; {root: snapshot home}."""
    folders: dict[Path, list[TreeToPatch]] = {}
    for target in targets:
        folders.setdefault(gitops.git_dir(target.worktree) / FOLDER, []).append(target)
    locks: list[treelock.Lock] = []
    homes: dict[Path, Path] = {}
    try:
        for folder in sorted(folders):
            shown = ", ".join(target.shown for target in folders[folder])
            with guard.critical():
                try:
                    lock = treelock.acquire(folder, command)
                except treelock.Busy as busy:
                    raise TreeLocked(_busy_message(shown, busy)) from None
                except OSError as exc:
                    console.warn(
                        f"could not lock {shown} ({exc.strerror or exc}: {folder}); going on without the lock, so no "
                        f"other run may change it meanwhile"
                    )
                    continue
                locks.append(lock)
                if lock.stale is not None:
                    console.warn(f"{shown}: taking over the lock of a run that is gone ({lock.stale})")
                _recover(folder, shown, lock.stale, console)
            guard.check()
            homes.update({target.root: folder / f"snapshot-{target.key}" for target in folders[folder]})
        yield homes
    finally:
        with guard.critical():
            for lock in reversed(locks):
                lock.release()
