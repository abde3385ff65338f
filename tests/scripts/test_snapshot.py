"""``snapshot`` on its own: a ``Snapshot`` taken before a change and restored after it leaves the tree as it was
(bytes, modes, mtimes, symlinks, absence, folders, git's view of tracked and untracked files), touches nothing
it did not save, and says what it could not put back."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
from patchset_fakes import git, make_repo, tree_state

from patchset.plumbing.snapshot import Snapshot

OLD_TIMES = (946684800_000000000, 946684800_000000000)  # 2000-01-01


# every test: backups go to a temp folder of its own (the `temp` fixture of conftest)
pytestmark = pytest.mark.usefixtures("temp")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.mark.parametrize("kept", [False, True], ids=["in-process", "loaded-by-the-next-run"])
def test_restore_leaves_the_tree_identical_after_edits_deletions_and_additions(tmp_path: Path, kept: bool) -> None:
    """Every saved path comes back as it was: content, mode, mtime, symlink target, absence, and the folders
    made for a new file go again; git sees the same tracked, deleted and untracked files. Alike when the snapshot
    kept in a folder is loaded from there (``Snapshot.load``), as the run after a killed one does."""
    repo = make_repo(
        tmp_path / "repo",
        {"mod.txt": "original\n", "run.sh": "#!/bin/sh\n", "gone.txt": "tracked\n", "del.txt": "to delete\n"},
    )
    (repo / "run.sh").chmod(0o755)
    os.symlink("mod.txt", repo / "link")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "exec bit and link")
    (repo / "gone.txt").unlink()  # deleted in the work tree before the snapshot: saved as absent
    (repo / "untracked.txt").write_text("not in git\n")
    (repo / "swap.txt").write_text("a file that becomes a folder\n")
    os.utime(repo / "mod.txt", ns=OLD_TIMES)
    paths = ["mod.txt", "run.sh", "link", "gone.txt", "del.txt", "untracked.txt", "swap.txt", "new/deep/file.txt"]
    before = tree_state(repo)

    folder = tmp_path / "git-dir" / "snapshot"
    snapshot = Snapshot(repo, paths, folder if kept else None)
    (repo / "mod.txt").write_text("patched\n")
    (repo / "run.sh").write_text("#!/bin/sh\nexit 1\n")
    (repo / "run.sh").chmod(0o644)
    (repo / "link").unlink()
    os.symlink("run.sh", repo / "link")
    (repo / "gone.txt").write_text("back again\n")
    (repo / "del.txt").unlink()
    (repo / "untracked.txt").unlink()
    (repo / "swap.txt").unlink()
    (repo / "swap.txt").mkdir()
    (repo / "swap.txt/inner.txt").write_text("inside\n")
    (repo / "new/deep").mkdir(parents=True)
    (repo / "new/deep/file.txt").write_text("added\n")
    assert tree_state(repo) != before
    if kept:
        loaded = Snapshot.load(folder)
        assert loaded is not None and loaded.paths == snapshot.paths and loaded.root == repo
        snapshot = loaded

    assert snapshot.restore() == []

    assert tree_state(repo) == before
    assert (repo / "mod.txt").stat().st_mtime_ns == OLD_TIMES[1]
    assert mode(repo / "run.sh") == 0o755
    assert not (repo / "new").exists()
    snapshot.discard()
    assert not snapshot.backup.exists()


def test_a_kept_snapshot_without_its_manifest_loads_as_none(tmp_path: Path) -> None:
    """The manifest is written last and removed first: a folder without it is a snapshot killed while it was being
    taken (nothing changed yet) or while it was being discarded (nothing left to restore)."""
    (tmp_path / "a.txt").write_text("a\n")
    folder = tmp_path / "kept"
    Snapshot(tmp_path, ["a.txt"], folder)
    (folder / "manifest.json").unlink()

    assert Snapshot.load(folder) is None


def test_restore_touches_only_the_saved_paths(tmp_path: Path) -> None:
    """A change to a path the snapshot did not save survives restore(); the saved one is undone."""
    root = tmp_path / "tree"
    root.mkdir()
    (root / "saved.txt").write_text("saved\n")
    (root / "other.txt").write_text("other\n")

    snapshot = Snapshot(root, ["saved.txt"])
    (root / "saved.txt").write_text("changed\n")
    (root / "other.txt").write_text("changed too\n")
    (root / "extra.txt").write_text("new\n")

    assert snapshot.restore() == []
    assert (root / "saved.txt").read_text() == "saved\n"
    assert (root / "other.txt").read_text() == "changed too\n"
    assert (root / "extra.txt").read_text() == "new\n"
    snapshot.discard()


def test_restore_recreates_removed_folders_with_their_modes(tmp_path: Path) -> None:
    """A saved file whose folders were removed comes back in folders with the modes they had."""
    root = tmp_path / "tree"
    (root / "d/sub").mkdir(parents=True)
    (root / "d/sub/f.txt").write_text("deep\n")
    (root / "d").chmod(0o750)
    (root / "d/sub").chmod(0o700)
    before = tree_state(root)

    snapshot = Snapshot(root, ["d/sub/f.txt"])
    shutil.rmtree(root / "d")

    assert snapshot.restore() == []
    assert tree_state(root) == before
    assert (mode(root / "d"), mode(root / "d/sub")) == (0o750, 0o700)
    snapshot.discard()


def test_restore_reports_what_it_cannot_put_back_and_keeps_the_backup(tmp_path: Path) -> None:
    """A path that cannot be restored is reported as ``path: reason``; its original stays in the backup until
    discard(), and the other paths are still restored."""
    root = tmp_path / "tree"
    (root / "d").mkdir(parents=True)
    (root / "d/f.txt").write_text("original\n")
    (root / "ok.txt").write_text("fine\n")

    snapshot = Snapshot(root, ["d/f.txt", "ok.txt"])
    shutil.rmtree(root / "d")
    (root / "d").write_text("a file where the folder was\n")  # the folder cannot be made again
    (root / "ok.txt").write_text("changed\n")

    failed = snapshot.restore()

    assert failed == ["d/f.txt: File exists"]
    assert (root / "ok.txt").read_text() == "fine\n"
    assert snapshot.keep().name.startswith("patchset-backup-kept-")  # no pid in it: no later run sweeps it away
    kept = sorted(path.read_text() for path in snapshot.backup.iterdir() if path.name != "manifest.json")
    assert kept == ["fine\n", "original\n"]
    snapshot.discard()
    assert not snapshot.backup.exists()


def test_snapshot_refuses_a_folder_and_leaves_no_backup_behind(tmp_path: Path, temp: Path) -> None:
    """A path that is a folder raises OSError naming it, and the backup made so far is removed."""
    root = tmp_path / "tree"
    (root / "folder").mkdir(parents=True)
    (root / "a.txt").write_text("a\n")

    with pytest.raises(OSError, match="folder is neither a file nor a symlink"):
        Snapshot(root, ["a.txt", "folder"])

    assert list(temp.iterdir()) == []


def test_each_path_is_saved_once_and_discard_removes_the_backup(tmp_path: Path, temp: Path) -> None:
    """Repeated paths are saved once, in order; the backup lives in the temp folder until discard()."""
    root = tmp_path / "tree"
    root.mkdir()
    (root / "a.txt").write_text("a\n")

    snapshot = Snapshot(root, ["a.txt", "b.txt", "a.txt"])

    assert snapshot.paths == ["a.txt", "b.txt"]
    assert [path.name for path in temp.iterdir()] == [snapshot.backup.name]
    snapshot.discard()
    assert list(temp.iterdir()) == []
