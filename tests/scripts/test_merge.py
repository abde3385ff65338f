"""``gitops.three_way`` on a patch that does not apply as it is tells a clean merge (RESOLVES) from a
conflict (CONFLICTS), a change already in (APPLIED) and a missing base blob (UNAVAILABLE); only ``install`` on a
clean merge writes the tree, and the tree's repository is never written."""

from __future__ import annotations

from pathlib import Path

import pytest
from patchset_fakes import FORMAT_PATCH, git, make_repo, tree_state

from patchset.plumbing import gitops
from patchset.plumbing.gitops import Merge, MergeResult, three_way
from patchset.series.model import Patch, read_patch

CORE = "core.py"
BASE = "".join(f"# line {n}\n" for n in range(1, 21))


@pytest.fixture
def patch(tmp_path: Path) -> Patch:
    """A ``git format-patch --full-index`` patch of BASE that turns ``# line 10`` into ``# line ten``."""
    work = make_repo(tmp_path / "work", {CORE: BASE})
    (work / CORE).write_text(BASE.replace("# line 10\n", "# line ten\n"))
    git(work, "commit", "-qam", "line ten")
    dest = tmp_path / "0001-line-ten.patch"
    dest.write_text(git(work, *FORMAT_PATCH, "-1", "--stdout"))
    return read_patch(dest)


def tree_with(tmp_path: Path, content: str) -> tuple[Path, Path]:
    """A repository whose HEAD has BASE (so it holds the patch's base blob) and whose work tree has ``content``;
    returns it and its object store."""
    root = make_repo(tmp_path / "tree", {CORE: BASE})
    (root / CORE).write_text(content)
    tree = gitops.find_worktree(root)
    objects = gitops.objects_dir(tree) if tree is not None else None
    assert objects is not None
    return root, objects


def test_clean_merge_resolves_and_only_install_writes_the_merged_file(patch: Patch, tmp_path: Path) -> None:
    """A patch whose context changed nearby merges cleanly: RESOLVES without touching the tree or its repository;
    with install the file holds both changes, and nothing else changed."""
    root, objects = tree_with(tmp_path, BASE.replace("# line 8\n", "# line eight\n"))
    assert not gitops.apply_patch(root, patch.path, check=True).ok  # plain git apply refuses it
    before = tree_state(root)
    head = git(root, "rev-parse", "HEAD")

    assert three_way(root, patch.path, patch.files, objects) == MergeResult(Merge.RESOLVES)
    assert tree_state(root) == before

    assert three_way(root, patch.path, patch.files, objects, install=True) == MergeResult(Merge.RESOLVES)
    merged = BASE.replace("# line 8\n", "# line eight\n").replace("# line 10\n", "# line ten\n")
    assert (root / CORE).read_text() == merged
    assert git(root, "status", "--porcelain", "--untracked-files=all") == f" M {CORE}\n"
    assert git(root, "rev-parse", "HEAD") == head


def test_conflicting_merge_names_the_file_and_never_writes_it(patch: Patch, tmp_path: Path) -> None:
    """When the tree changed the patch's own line, the result is CONFLICTS naming the file, even with install the
    tree is left alone."""
    root, objects = tree_with(tmp_path, BASE.replace("# line 10\n", "# line TEN\n"))
    before = tree_state(root)

    assert three_way(root, patch.path, patch.files, objects, install=True) == MergeResult(Merge.CONFLICTS, CORE)
    assert tree_state(root) == before


def test_merge_that_changes_nothing_is_applied_already(patch: Patch, tmp_path: Path) -> None:
    """A tree that already has the patch's change merges to itself: APPLIED, and the tree is not written."""
    root, objects = tree_with(tmp_path, BASE.replace("# line 10\n", "# line ten\n"))
    before = tree_state(root)

    assert three_way(root, patch.path, patch.files, objects, install=True) == MergeResult(Merge.APPLIED)
    assert tree_state(root) == before


def test_merge_without_the_base_blob_is_unavailable(patch: Patch, tmp_path: Path) -> None:
    """Objects that lack the patch's base blob, or no objects at all, give UNAVAILABLE with the reason."""
    root, _ = tree_with(tmp_path, BASE.replace("# line 8\n", "# line eight\n"))
    other = make_repo(tmp_path / "other", {CORE: "unrelated\n"})
    other_tree = gitops.find_worktree(other)
    assert other_tree is not None
    before = tree_state(root)

    lacking = three_way(root, patch.path, patch.files, gitops.objects_dir(other_tree), install=True)

    assert lacking == MergeResult(Merge.UNAVAILABLE, "the repository lacks the blob the patch was made against")
    assert three_way(root, patch.path, patch.files, None).outcome is Merge.UNAVAILABLE
    assert tree_state(root) == before
