"""Save some files of a tree before changing them, and put them back exactly (bytes, mode, mtime, symlinks, absence).
A manifest, written durably and last, removed first, lets the next run ``load`` the snapshot of a killed run."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchset.plumbing import files, tempdirs

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class _Entry:
    rel: str
    kind: str  # "file", "symlink" or "absent"
    mode: int = 0
    times: tuple[int, int] = (0, 0)
    link: str = ""
    missing_dirs: tuple[str, ...] = ()  # absent: folders below the root that did not exist either, deepest first
    dir_modes: tuple[tuple[str, int], ...] = ()  # the existing folders above it, to recreate them as they were


def _entry(data: dict[str, Any]) -> _Entry:
    """The ``_Entry`` that ``dataclasses.asdict`` wrote into a manifest (JSON made its tuples lists)."""
    tuples = {key: tuple(data[key]) for key in ("times", "missing_dirs")}
    return _Entry(**{**data, **tuples, "dir_modes": tuple((rel, mode) for rel, mode in data["dir_modes"])})


class Snapshot:
    """Copies of ``paths`` under ``root``, kept in ``folder`` (else a private temporary one) until ``discard()``."""

    def __init__(self, root: Path, paths: Iterable[str], folder: Path | None = None) -> None:
        self.root = root
        if folder is None:
            self.backup = Path(tempfile.mkdtemp(prefix=tempdirs.prefix("backup")))
        else:
            folder.mkdir(parents=True)
            self.backup = folder
        try:
            self._entries = [self._save(number, rel) for number, rel in enumerate(dict.fromkeys(paths))]
            manifest = {"root": str(root), "entries": [dataclasses.asdict(entry) for entry in self._entries]}
            files.write_durably(self.backup / MANIFEST, json.dumps(manifest).encode("utf-8"))
        except BaseException:
            self.discard()
            raise

    @classmethod
    def load(cls, folder: Path) -> Snapshot | None:
        """The snapshot an earlier process left in ``folder``; None without a manifest (nothing was changed)."""
        try:
            manifest = json.loads((folder / MANIFEST).read_text())
        except FileNotFoundError:
            return None
        snapshot = cls.__new__(cls)
        snapshot.root = Path(manifest["root"])
        snapshot.backup = folder
        snapshot._entries = [_entry(data) for data in manifest["entries"]]
        return snapshot

    def _save(self, number: int, rel: str) -> _Entry:
        path = self.root / rel
        above = [folder.as_posix() for folder in reversed(Path(rel).parents[:-1])]  # its folders, top first
        dir_modes = tuple((d, stat.S_IMODE((self.root / d).stat().st_mode)) for d in above if (self.root / d).is_dir())
        if path.is_symlink():
            return _Entry(rel, "symlink", link=os.readlink(path), dir_modes=dir_modes)
        if path.is_file():
            info = path.stat()
            shutil.copyfile(path, self.backup / str(number))
            files.fsync(self.backup / str(number))
            times = (info.st_atime_ns, info.st_mtime_ns)
            return _Entry(rel, "file", mode=stat.S_IMODE(info.st_mode), times=times, dir_modes=dir_modes)
        if path.exists():
            raise OSError(f"{path} is neither a file nor a symlink")
        missing = tuple(d for d in reversed(above) if not (self.root / d).exists())
        return _Entry(rel, "absent", missing_dirs=missing, dir_modes=dir_modes)

    @property
    def paths(self) -> list[str]:
        return [entry.rel for entry in self._entries]

    def restore(self) -> list[str]:
        """Put every saved path back; return ``path: reason`` for each one that could not be."""
        failed: list[str] = []
        for number, entry in enumerate(self._entries):
            try:
                self._restore(number, entry)
            except OSError as exc:
                failed.append(f"{entry.rel}: {exc.strerror or exc}")
        for entry in self._entries:  # folders last: another entry may have needed one until now
            for rel in entry.missing_dirs:
                folder = self.root / rel
                if folder.is_dir() and not folder.is_symlink() and not any(folder.iterdir()):
                    folder.rmdir()
        return failed

    def _restore(self, number: int, entry: _Entry) -> None:
        path = self.root / entry.rel
        if entry.kind == "absent":
            if path.is_symlink() or path.is_file():
                path.unlink()
            return
        for rel, mode in entry.dir_modes:
            folder = self.root / rel
            if not folder.is_dir():
                folder.mkdir()
                folder.chmod(mode)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        if entry.kind == "symlink":
            if path.is_symlink() or path.exists():
                path.unlink()
            os.symlink(entry.link, path)
            return
        staged = path.with_name(f".{path.name}.patchset-restore")
        try:
            shutil.copyfile(self.backup / str(number), staged)
            os.chmod(staged, entry.mode)
            os.utime(staged, ns=entry.times)
            os.replace(staged, path)
        finally:
            staged.unlink(missing_ok=True)

    def keep(self) -> Path:
        """Keep the backup for the user (a restore failed), renamed so that no later run sweeps it away."""
        temporary = tempdirs.prefix("backup")
        if self.backup.name.startswith(temporary):
            kept = self.backup.with_name("patchset-backup-kept-" + self.backup.name.removeprefix(temporary))
            self.backup = self.backup.rename(kept)
        return self.backup

    def discard(self) -> None:
        """Remove the backup; the manifest first, so that a kill half-way leaves a folder ``load`` ignores."""
        (self.backup / MANIFEST).unlink(missing_ok=True)
        shutil.rmtree(self.backup, ignore_errors=True)
