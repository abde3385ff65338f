"""The test command's scratch folder (`patchset.testcommand.scratch`): the steps' TMPDIR on a tmpfs with room, unless
the user set TMPDIR; removed after a run that passed, kept (and named) after one that failed.

The tmpfs is a folder of the test's own, declared one in a mounts file of the test's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from patchset.testcommand import testsuite
from patchset.testcommand.scheduler import Step
from patchset.testcommand.scratch import KEPT, Scratch


def _ram(tmp_path: Path, kind: str = "tmpfs") -> tuple[Path, Path]:
    folder = tmp_path / "ram"
    folder.mkdir()
    mounts = tmp_path / "mounts"
    mounts.write_text(f"/dev/vda / ext4 rw 0 0\n{kind} {folder} {kind} rw,relatime 0 0\n", encoding="utf-8")
    return folder, mounts


@pytest.mark.parametrize(
    ("environ", "kind", "needed", "reason"),
    [
        ({"TMPDIR": "/var/tmp"}, "tmpfs", 0, "TMPDIR is set (/var/tmp)"),
        ({}, "ext4", 0, "is not a tmpfs"),
        ({}, "tmpfs", 1 << 60, "GiB free, 1073741824 GiB needed"),
    ],
    ids=["users-tmpdir", "not-a-tmpfs", "no-room"],
)
def test_a_scratch_is_not_made_where_the_user_chose_or_where_it_would_not_fit(tmp_path, environ, kind, needed, reason):
    folder, mounts = _ram(tmp_path, kind)

    scratch = Scratch(environ, folder, needed, mounts)

    assert scratch.path is None and scratch.environ() == {}
    assert reason in scratch.describe()
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize(("code", "kept"), [(0, False), (1, True)], ids=["passed", "failed"])
def test_the_steps_write_into_the_scratch_which_a_passing_run_removes_and_a_failing_one_keeps(
    monkeypatch, capsys, tmp_path, test_command, code, kept
):
    folder, mounts = _ram(tmp_path)
    monkeypatch.delenv("TMPDIR", raising=False)
    monkeypatch.setattr(testsuite, "Scratch", lambda environ: Scratch(environ, folder, 0, mounts))
    writes = f"import os, pathlib, tempfile; pathlib.Path(tempfile.mkdtemp()).joinpath('made').touch(); exit({code})"

    assert test_command(Step("environment", "proves it", (sys.executable, "-c", writes), ())) == (2 if code else 0)

    (scratch,) = folder.iterdir() if kept else [None]
    captured = capsys.readouterr()
    if kept:
        assert scratch.name.startswith(KEPT) and len(list(scratch.glob("*/made"))) == 1
        assert f"The temporary files of this run are kept in {scratch}" in captured.err
    assert list(folder.iterdir()) == ([scratch] if kept else [])
    assert f"* Temporary files: {folder}/patchset-test-{os.getpid()}-" in captured.out


def test_a_new_scratch_removes_those_of_runs_that_are_gone_and_leaves_kept_and_live_ones(tmp_path):
    folder, mounts = _ram(tmp_path)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead, kept, live = (
        folder / name
        for name in (f"patchset-test-{gone.stdout.strip()}-x", f"{KEPT}y", f"patchset-test-{os.getppid()}-z")
    )
    for path in (dead, kept, live):
        (path / "inside").mkdir(parents=True)

    scratch = Scratch({}, folder, 0, mounts)

    assert sorted(folder.iterdir()) == sorted([scratch.path, kept, live])
