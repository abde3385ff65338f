"""The test command's scratch folder: its steps' temporary files go to a tmpfs where one has room. On an ext4 file
system without a journal, as on this project's CI machines, each new inode steps over the recently deleted ones: a
quarter of the tooling tests' CPU (``perf``; docs/testing.md)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from patchset.plumbing import tempdirs

RAM_FOLDER = Path("/dev/shm")
MOUNTS = Path("/proc/mounts")
# about three times the most a test command's run has held there at once (1.2 GB:
# docs/evidence/2026-12-06-test-command-timings.md)
NEEDED_BYTES = 4 << 30
KIND = "test"  # the scratch folder's name: patchset-test-<pid>-..., swept once that process is gone
KEPT = "patchset-test-kept-"  # a kept one's


def unusable(folder: Path, environ: Mapping[str, str], needed: int = NEEDED_BYTES, mounts: Path = MOUNTS) -> str | None:
    """Why ``folder`` is not taken for the scratch (None: it is): the user's TMPDIR stands, and the folder must be a
    writable tmpfs with ``needed`` bytes free once the scratch folders of runs that are gone are removed."""
    if environ.get("TMPDIR"):
        return f"TMPDIR is set ({environ['TMPDIR']})"
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is not a writable folder"
    try:
        mounted = mounts.read_text(encoding="utf-8").splitlines()
    except OSError:
        mounted = []
    if not any(line.split()[1:3] == [str(folder), "tmpfs"] for line in mounted):
        return f"{folder} is not a tmpfs"
    tempdirs.sweep(folder)  # a run killed with SIGKILL leaves its folder in RAM: named by its process, removed here
    stats = os.statvfs(folder)
    if (free := stats.f_bavail * stats.f_frsize) < needed:
        return f"{folder} has {free / (1 << 30):.1f} GiB free, {needed / (1 << 30):.0f} GiB needed"
    return None


class Scratch:
    """A folder of its own under ``folder`` for the steps' TMPDIR, or none (the steps then use the system's)."""

    def __init__(
        self, environ: Mapping[str, str], folder: Path = RAM_FOLDER, needed: int = NEEDED_BYTES, mounts: Path = MOUNTS
    ) -> None:
        self.reason = unusable(folder, environ, needed, mounts)
        self.path = None if self.reason else Path(tempfile.mkdtemp(prefix=tempdirs.prefix(KIND), dir=folder))

    def environ(self) -> dict[str, str]:
        """What the steps' environment gets: TMPDIR, when there is a scratch folder."""
        return {"TMPDIR": str(self.path)} if self.path else {}

    def describe(self) -> str:
        if self.path is None:
            return f"* Temporary files: the system's ({self.reason})"
        return f"* Temporary files: {self.path} (RAM; removed at the end, kept if a step fails)"

    def close(self, keep: bool) -> str | None:
        """Remove the folder, or with ``keep`` leave it for the user; a line to print when it is kept."""
        if self.path is None:
            return None
        if keep:  # out of the sweep's reach: its name loses this process's id
            kept = self.path.with_name(KEPT + self.path.name.removeprefix(tempdirs.prefix(KIND)))
            self.path = self.path.rename(kept)
            return f"* The temporary files of this run are kept in {self.path} (RAM: remove it when done)"
        shutil.rmtree(self.path, ignore_errors=True)
        return None
