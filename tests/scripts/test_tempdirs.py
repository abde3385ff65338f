"""``tempdirs.sweep`` removes the scratch folders of processes that are gone, and only those: another run's (alive)
stay, and so do folders without a pid in their name (a backup kept for the user, other tools' folders)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from patchset.plumbing import tempdirs


def test_sweep_removes_the_folders_of_gone_processes_only(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        names = {
            "dead": f"patchset-check-{gone.pid}-abc",
            "live": f"patchset-parse-{alive.pid}-abc",
            "own": tempdirs.prefix("backup") + "abc",
            "kept": "patchset-backup-kept-abc",
            "other": f"other-check-{gone.pid}-abc",
        }
        for name in names.values():
            (tmp_path / name / "sub").mkdir(parents=True)

        removed = tempdirs.sweep(tmp_path)

        assert removed == [tmp_path / names["dead"]]
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(v for k, v in names.items() if k != "dead")
    finally:
        alive.kill()
        alive.wait()


def test_prefix_names_this_process() -> None:
    assert tempdirs.prefix("check") == f"patchset-check-{os.getpid()}-"
