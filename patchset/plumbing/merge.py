"""A patch that does not apply as it is, tried as a 3-way merge (``git apply --3way``) on a scratch copy.

The scratch repository borrows the tree's objects read-only (the patches are ``--full-index``, so each names the blob
it was made against): the tree, its index and its repository are never written, except by ``install``.
"""

from __future__ import annotations

import enum
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from patchset.plumbing import files, gitops, tempdirs


class Merge(enum.Enum):
    RESOLVES = "resolves"  # merges cleanly
    CONFLICTS = "conflicts"  # merging leaves conflicts in ``detail``
    UNAVAILABLE = "unavailable"  # the repository lacks the blob the patch was made against
    APPLIED = "applied"  # merging changes nothing: the change is in the file already


@dataclass(frozen=True)
class MergeResult:
    outcome: Merge
    detail: str = ""


def three_way(
    root: Path, patch: Path, paths: Sequence[str], objects: Path | None, *, install: bool = False
) -> MergeResult:
    """Merge the patch file ``patch``, which changes ``paths`` (relative to ``root``), into the files under ``root``
    with the blobs in ``objects``; copy the result into ``root`` only when ``install`` and the merge is clean."""
    if objects is None:
        return MergeResult(Merge.UNAVAILABLE, "the tree has no git objects")
    with tempfile.TemporaryDirectory(prefix=tempdirs.prefix("merge")) as tmp:
        scratch = Path(tmp)
        gitops.init_scratch(scratch)
        files.copy_paths(root, scratch, paths)
        proc = gitops.merge_apply(scratch, patch, objects)
        if proc.returncode != 0:
            if "lacks the necessary blob" in proc.stderr:
                return MergeResult(Merge.UNAVAILABLE, "the repository lacks the blob the patch was made against")
            conflicted = [line[2:].strip() for line in proc.stderr.splitlines() if line.startswith("U ")]
            if conflicted:
                return MergeResult(Merge.CONFLICTS, ", ".join(conflicted))
            errors = [line.removeprefix("error: ") for line in proc.stderr.splitlines() if line.startswith("error: ")]
            return MergeResult(Merge.UNAVAILABLE, f"git: {errors[0]}" if errors else "git apply --3way failed")
        if all(files.same(scratch / rel, root / rel) for rel in paths):
            return MergeResult(Merge.APPLIED)
        if install:
            files.install_paths(scratch, root, paths)
        return MergeResult(Merge.RESOLVES)
