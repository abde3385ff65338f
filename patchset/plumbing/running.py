"""Which test each pytest process is running right now, for whoever waits on the run and must name a hang.

The waiter (``patchset.plumbing.bounded``) gives the run a folder in ``PATCHSET_RUNNING_DIR``; each suite's
conftest registers ``RunningTests`` (``register``), which writes the node id of the test a process starts into a
file named by its pid, and removes it when the test ends (its teardown included). A hang past the limit then
leaves one file per stuck process, naming its test: ``running_tests`` reads them. pytest-xdist's controller only
reports what its workers run, so it writes nothing; each worker writes its own.

No pytest import here: pytest finds the hooks by name on the registered object.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

RUNNING_DIR_VARIABLE = "PATCHSET_RUNNING_DIR"


class RunningTests:
    """A pytest plugin: ``<folder>/<pid>`` holds the node id of the test this process is in, while it is in one."""

    def __init__(self, folder: Path) -> None:
        self.file = folder / str(os.getpid())

    def pytest_runtest_logstart(self, nodeid: str, location: object) -> None:
        self.file.write_text(nodeid + "\n", encoding="utf-8")

    def pytest_runtest_logfinish(self, nodeid: str, location: object) -> None:
        self.file.unlink(missing_ok=True)


def register(config: Any) -> None:
    """Register ``RunningTests`` with pytest's ``config`` when a waiter asked for it (``PATCHSET_RUNNING_DIR``), in
    every process that runs tests: not in pytest-xdist's controller, which would only echo its workers."""
    folder = os.environ.get(RUNNING_DIR_VARIABLE)
    controller = bool(config.getoption("numprocesses", None)) and not hasattr(config, "workerinput")
    if folder and Path(folder).is_dir() and not controller:
        config.pluginmanager.register(RunningTests(Path(folder)), "patchset-running-tests")


def running_tests(folder: Path) -> list[str]:
    """The tests the processes of a run were in when it was read (each at most once, in pid order)."""
    if not folder.is_dir():
        return []
    files = sorted((path for path in folder.iterdir() if path.name.isdigit()), key=lambda path: int(path.name))
    names = [path.read_text(encoding="utf-8", errors="replace").strip() for path in files]
    return list(dict.fromkeys(name for name in names if name))
