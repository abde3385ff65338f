"""Which test each pytest process is running, so that whoever waits on the run can name a hang.

A waiter (``bounded``) gives its run a folder, first in ``PATCHSET_RUNNING_DIR`` (a list: the waiters further up
follow); each suite's conftest calls ``register``, and each test process keeps ``<folder>/<pid>`` naming its test.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from patchset.plumbing.stacks import is_running

RUNNING_DIR_VARIABLE = "PATCHSET_RUNNING_DIR"


class RunningTests:
    """A pytest plugin: ``<folder>/<pid>`` holds the node id of the test this process is in, while it is in one."""

    def __init__(self, folders: list[Path]) -> None:
        self.files = [folder / str(os.getpid()) for folder in folders]

    def pytest_runtest_logstart(self, nodeid: str, location: object) -> None:
        for file in self.files:
            file.write_text(nodeid + "\n", encoding="utf-8")

    def pytest_runtest_logfinish(self, nodeid: str, location: object) -> None:
        for file in self.files:
            file.unlink(missing_ok=True)


def folders_for(own: Path, inherited: str | None) -> str:
    """The ``PATCHSET_RUNNING_DIR`` of a run whose waiter has the folder ``own``: it first, then those inherited."""
    return os.pathsep.join([str(own), *([inherited] if inherited else [])])


def register(config: Any) -> None:
    """Register ``RunningTests`` with pytest's ``config`` when a waiter asked for it (``PATCHSET_RUNNING_DIR``), in
    every process that runs tests: not in pytest-xdist's controller, which would only echo its workers."""
    folders = [Path(f) for f in os.environ.get(RUNNING_DIR_VARIABLE, "").split(os.pathsep) if f and Path(f).is_dir()]
    controller = bool(config.getoption("numprocesses", None)) and not hasattr(config, "workerinput")
    if folders and not controller:
        config.pluginmanager.register(RunningTests(folders), "patchset-running-tests")


def running_tests(folder: Path) -> list[str]:
    """The tests the live processes of a run were in when it was read (each at most once, in pid order); a file left
    by a process that was killed in a test names nothing."""
    if not folder.is_dir():
        return []
    files = [path for path in folder.iterdir() if path.name.isdigit() and is_running(int(path.name))]
    files.sort(key=lambda path: int(path.name))
    names = [path.read_text(encoding="utf-8", errors="replace").strip() for path in files]
    return list(dict.fromkeys(name for name in names if name))
