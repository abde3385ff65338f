"""Copy, install and compare the files of a tree by relative path: files with their mode, symlinks, absence."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from patchset.plumbing import tempdirs


def fsync(path: Path) -> None:
    """Flush ``path`` (a file, or a folder: its entries) to disk."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durably(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all, on disk before this returns: what a later run trusts after a crash."""
    staged = path.with_name(tempdirs.prefix("write", hidden=True) + path.name)
    try:
        with staged.open("wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(staged, path)
    finally:
        staged.unlink(missing_ok=True)
    fsync(path.parent)


def copy_paths(source: Path, dest: Path, paths: Iterable[str]) -> None:
    """Copy the files and symlinks of ``paths`` (relative) from ``source`` into ``dest``, which lacks them."""
    install_paths(source, dest, [rel for rel in paths if (source / rel).is_symlink() or (source / rel).is_file()])


def install_paths(source: Path, dest: Path, paths: Iterable[str]) -> None:
    """Make ``paths`` in ``dest`` what they are in ``source``: each file replaced in one rename, a path absent from
    ``source`` removed from ``dest`` (and the folders that leaves empty, as git does)."""
    for rel in paths:
        src, target = source / rel, dest / rel
        if not os.path.lexists(src):
            if os.path.lexists(target) and not target.is_dir():
                target.unlink()
                folder = target.parent
                while folder != dest and folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()
                    folder = folder.parent
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        staged = target.with_name(f".{target.name}.patchset-new")
        try:
            if src.is_symlink():
                os.symlink(os.readlink(src), staged)
            else:
                shutil.copyfile(src, staged)
                os.chmod(staged, src.stat().st_mode & 0o777)
            os.replace(staged, target)
        finally:
            staged.unlink(missing_ok=True)


def same(path_a: Path, path_b: Path) -> bool:
    """Same content: both absent, the same symlink target, or regular files with the same bytes."""
    if not (os.path.lexists(path_a) and os.path.lexists(path_b)):
        return os.path.lexists(path_a) == os.path.lexists(path_b)
    if path_a.is_symlink() or path_b.is_symlink():
        return path_a.is_symlink() and path_b.is_symlink() and os.readlink(path_a) == os.readlink(path_b)
    return path_a.is_file() and path_b.is_file() and path_a.read_bytes() == path_b.read_bytes()
