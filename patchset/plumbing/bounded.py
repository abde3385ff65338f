"""Run a command within a time limit; past it, end it whole and raise ``TimedOut`` naming its tests, its stacks kept.
Each test process names its test in ``<folder>/<pid>`` of each folder of ``PATCHSET_RUNNING_DIR``, for every waiter."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO

from patchset.plumbing import stacks, tempdirs
from patchset.plumbing.errors import TimedOut

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
    """Register ``RunningTests`` where a waiter asked for it, but not in xdist's controller (it echoes its workers)."""
    folders = [Path(f) for f in os.environ.get(RUNNING_DIR_VARIABLE, "").split(os.pathsep) if f and Path(f).is_dir()]
    controller = bool(config.getoption("numprocesses", None)) and not hasattr(config, "workerinput")
    if folders and not controller:
        config.pluginmanager.register(RunningTests(folders), "patchset-running-tests")


def running_tests(folder: Path) -> list[str]:
    """The tests the live processes of a run are in (each once, in pid order); a killed process names nothing."""
    if not folder.is_dir():
        return []
    files = [path for path in folder.iterdir() if path.name.isdigit() and stacks.is_running(int(path.name))]
    files.sort(key=lambda path: int(path.name))
    names = [path.read_text(encoding="utf-8", errors="replace").strip() for path in files]
    return list(dict.fromkeys(name for name in names if name))


@dataclass(frozen=True)
class Limit:
    """How long a run may take, and what the user sets to give it longer (named in the message of a hang)."""

    seconds: float
    raise_with: str


def hang_report(what: str, limit: Limit, root: int, running_dir: Path | None, near: Sequence[Path] = ()) -> str:
    """End the hung tree under ``root`` and return the one line that says so; its stacks go to stderr (a CI log
    keeps them) and to a file that line names."""
    pids = stacks.tree(root)
    tests = running_tests(running_dir) if running_dir is not None else []
    text = f"{what}: still running after {limit.seconds:g} s\n" + "".join(f"in test: {test}\n" for test in tests)
    text += "\n" + stacks.dump_stacks(pids, near)
    stacks.kill_all(pids)
    with tempfile.NamedTemporaryFile(
        "w", prefix="patchset-hang-", suffix=".txt", delete=False, encoding="utf-8"
    ) as report:
        report.write(text)
    print(f"=== the stacks of the hung processes (kept in {report.name})\n{text}", file=sys.stderr, flush=True)
    hung = f"{what} hung in {', '.join(tests)}" if tests else f"{what} hung"
    return (
        f"{hung}: still running after {limit.seconds:g} s, ended (to allow longer: {limit.raise_with}); the stacks of "
        f"its {len(pids)} processes are in {report.name}"
    )


class Started(Protocol):
    """What a run needs of the process it started: a `subprocess.Popen`, or another that behaves as one."""

    pid: int

    def wait(self, timeout: float | None = None) -> int: ...


# another way to start (command, cwd, env, output): its process, or None to leave it to `subprocess.Popen`
Launch = Callable[[Sequence[str], "Path | None", Mapping[str, str], "TextIO | None"], "Started | None"]


def run_bounded(
    command: Sequence[str],
    what: str,
    limit: Limit,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    output: TextIO | None = None,
    launch: Launch | None = None,
) -> int:
    """Run ``command`` and return its exit status; past ``limit``, end its whole tree and raise ``TimedOut``."""
    env = dict(os.environ if env is None else env)
    with tempfile.TemporaryDirectory(prefix=tempdirs.prefix("running")) as own:
        running_dir = Path(own)
        env[RUNNING_DIR_VARIABLE] = folders_for(running_dir, env.get(RUNNING_DIR_VARIABLE))
        process = launch(command, cwd, env, output) if launch is not None else None
        if process is None:
            to = {} if output is None else {"stdout": output, "stderr": subprocess.STDOUT}
            process = subprocess.Popen(list(command), cwd=cwd, env=env, **to)  # type: ignore[call-overload]
        try:
            return process.wait(timeout=limit.seconds)
        except subprocess.TimeoutExpired:
            line = hang_report(what, limit, process.pid, running_dir, near=(Path(command[0]),))
            process.wait()
            raise TimedOut(line) from None
        except BaseException:
            stacks.kill_all(stacks.tree(process.pid))
            process.wait()
            raise
