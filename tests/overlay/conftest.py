"""Wiring for the overlay tests: the "pip-installed release" environment and the patched checkouts to compare with.

`patchset.testcommand.testsuite` builds the environment (`patchset.testcommand.overlay_env`: a fresh venv with the
pinned verl and trinity-rft sdists and this project pip-installed) and names it and the patched trees in the
environment:

- ``PATCHSET_OVERLAY_PYTHON``: that venv's python; every check runs in a child process of it, because what an
  overlay does is a property of a whole process (as it is in a Ray worker);
- ``PATCHSET_PATCHED_VERL_TREE`` / ``PATCHSET_PATCHED_TRINITY_TREE``: the patched checkouts (parity);
- ``PATCHSET_VANILLA_VERL_TREE`` / ``PATCHSET_VANILLA_TRINITY_TREE``: the vanilla checkouts (fingerprints);
- ``PATCHSET_FIXED_VERL_TREE``: the verl 0.9.1 release, which has the critic fix (a guard test; optional).

Cases run through the ``cases`` fixture: a fork of a warm parent (`warm_parent.py`: torch, transformers, ray and
the rest imported once; upstream's and the overlays' modules, Hydra and OmegaConf never) started with the case's
``PATCHSET_OVERLAYS``, or with ``fresh=True`` a new process of the venv, the shape users start. Each process shape
the import-order matrix pins keeps a fresh case, and `test_import_order.py` checks that a fork starts with the same
upstream and overlay modules as a fresh process. Ray's workers are always fresh processes, started by Ray.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from patchset.plumbing import bounded
from patchset.testcommand.overlay_env import WARM_PROBE_MODULES

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]


# the longest modules first: under pytest-xdist (one file per worker) the short ones fill in around them
LONGEST_FIRST = ("test_ray.py", "test_parity.py", "test_import_order.py", "test_activation.py", "test_guards.py")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--warm-list", metavar="FILE", help="where the warm parents keep what they preload (default: temp)"
    )


def pytest_configure(config: pytest.Config) -> None:
    bounded.register(config)  # names the test a hung run is in (`patchset.plumbing.bounded`)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: position for position, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def _every_piece() -> int:
    """How many entries `status` lists when everything is active on the default pins (the releases these tests
    install): each piece with a patch in that release's series, and the verl YAML files served on Hydra's search path
    (the critic's, 0001; rollout_correction.yaml, 0007 and 0008)."""
    from patchset.upstreams.pins import load_pins
    from patchset_overlay import overlays
    from patchset_overlay.derive import read_series, release_series

    defaults = {pin.name: pin.version for pin in load_pins(REPO_ROOT / "patches" / "upstreams.toml").defaults()}
    count = 2
    for overlay in overlays():
        series = release_series(overlay.distribution, REPO_ROOT / "patches")[defaults[overlay.distribution]]
        slugs = {patch.slug for patch in read_series(REPO_ROOT / "patches" / series)}
        count += sum(1 for piece in overlay.pieces if slugs & set(piece.patches))
    return count


EVERY_PIECE = _every_piece()


def _path_from_env(variable: str, resolve: bool = True) -> Path:
    value = os.environ.get(variable)
    if not value:
        pytest.skip(f"{variable} is not set (run the overlay tests through scripts/test.sh)")
    return Path(value).resolve() if resolve else Path(value).absolute()


@pytest.fixture(scope="session")
def overlay_python() -> Path:
    """Not resolved: a venv's python is a symlink to the base interpreter, which would leave the venv."""
    return _path_from_env("PATCHSET_OVERLAY_PYTHON", resolve=False)


@pytest.fixture(scope="session")
def overlay_site(overlay_python: Path) -> Path:
    """The site-packages of the overlay venv, where verl, trinity and the overlays are installed."""
    command = [str(overlay_python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
    return Path(subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout.strip())


@pytest.fixture(scope="session")
def patched_trees() -> dict[str, Path]:
    return {
        "verl": _path_from_env("PATCHSET_PATCHED_VERL_TREE"),
        "trinity": _path_from_env("PATCHSET_PATCHED_TRINITY_TREE"),
    }


@pytest.fixture(scope="session")
def vanilla_verl_tree() -> Path:
    return _path_from_env("PATCHSET_VANILLA_VERL_TREE")


@pytest.fixture(scope="session")
def vanilla_trees(vanilla_verl_tree: Path) -> dict[str, Path]:
    return {"verl": vanilla_verl_tree, "trinity": _path_from_env("PATCHSET_VANILLA_TRINITY_TREE")}


def overlay_env(switch: str | None, pythonpath: list[Path] = ()) -> dict[str, str]:
    """Environment for a child of the overlay venv: PATCHSET_OVERLAYS set to ``switch`` (None: unset)."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PATCHSET_OVERLAYS")}
    if switch is not None:
        env["PATCHSET_OVERLAYS"] = switch
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(str(path) for path in pythonpath)
    return env


def _completed(argv: Sequence[str], returncode: int, stdout: str, stderr: str) -> dict:
    return {"argv": list(argv), "returncode": returncode, "stdout": stdout, "stderr": stderr}


class WarmParent:
    """One `warm_parent.py` process of the overlay venv for one ``PATCHSET_OVERLAYS`` value; runs cases as forks."""

    def __init__(self, python: Path, switch: str, modules_list: Path, workdir: Path) -> None:
        self.workdir = workdir
        command = [str(python), "-P", str(HERE / "warm_parent.py"), str(modules_list), *WARM_PROBE_MODULES]
        self.process = subprocess.Popen(
            command,
            cwd=HERE,
            env=overlay_env(switch),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a case that hangs is killed with its parent, as a group
        )
        self.preloaded: dict | None = None  # what it says once ready; it boots meanwhile
        self.count = 0
        self.lock = threading.Lock()  # one case at a time
        self.ready_lock = threading.Lock()  # one reader of the ready line

    def wait_ready(self) -> None:
        with self.ready_lock:
            if self.preloaded is None:
                self.preloaded = json.loads(self._answer(600))["ready"]

    def _answer(self, timeout: int) -> str:
        assert self.process.stdout is not None
        readable, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if readable else ""
        if not line:
            self.close()
            raise AssertionError(f"the warm parent gave no answer within {timeout} s (exit {self.process.poll()})")
        return line

    def run(self, argv: Sequence[str], pythonpath: Sequence[Path], cwd: Path, timeout: int) -> dict:
        with self.lock:
            return self._run(argv, pythonpath, cwd, timeout)

    def _run(self, argv: Sequence[str], pythonpath: Sequence[Path], cwd: Path, timeout: int) -> dict:
        assert self.process.stdin is not None
        self.wait_ready()
        self.count += 1
        out, err = self.workdir / f"case-{self.count}.out", self.workdir / f"case-{self.count}.err"
        request = {"argv": list(argv), "cwd": str(cwd), "pythonpath": [str(path) for path in pythonpath]}
        request.update(stdout=str(out), stderr=str(err))
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        returncode = json.loads(self._answer(timeout))["returncode"]
        return _completed(argv, returncode, out.read_text(encoding="utf-8"), err.read_text(encoding="utf-8"))

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


class Cases:
    """Runs a case script (or ``-m module``) of the overlay venv as ``python -P ARGV`` and returns what it did."""

    def __init__(self, python: Path, tmp: Path, modules_list: Path) -> None:
        self.python, self.tmp, self.modules_list = python, tmp, modules_list
        self.parents: dict[str, WarmParent] = {}
        self.lock = threading.Lock()

    def parent(self, switch: str) -> WarmParent:
        """The warm parent for ``switch``, started (booting in the background) on first use. The first parent learns
        the modules to preload and writes their list; a second one starts once that list is there."""
        with self.lock:
            if switch not in self.parents:
                if not self.modules_list.exists():
                    for started in self.parents.values():
                        started.wait_ready()
                workdir = self.tmp / f"warm-{switch}"
                workdir.mkdir()
                self.parents[switch] = WarmParent(self.python, switch, self.modules_list, workdir)
            return self.parents[switch]

    def run(
        self,
        argv: Sequence[str],
        switch: str,
        pythonpath: Sequence[Path] = (),
        cwd: Path | None = None,
        fresh: bool = False,
        timeout: int = 600,
    ) -> dict:
        cwd = cwd or self.tmp  # not this folder: Trinity's config validators make folders where a run starts
        if fresh:
            completed = subprocess.run(
                [str(self.python), "-P", *argv],
                cwd=cwd,
                env=overlay_env(switch, list(pythonpath)),
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            return _completed(argv, completed.returncode, completed.stdout, completed.stderr)
        return self.parent(switch).run(argv, pythonpath, cwd, timeout)

    def json(self, script: Path, args: Sequence[str], switch: str, **how: object) -> dict:
        """Run ``script`` and return the JSON object it prints on its last stdout line (stderr kept with it)."""
        completed = self.run([str(script), *args], switch, **how)  # type: ignore[arg-type]
        assert completed["returncode"] == 0, (
            f"{script.name} {list(args)} failed:\n{completed['stdout']}\n{completed['stderr'][-4000:]}"
        )
        result = json.loads(completed["stdout"].strip().splitlines()[-1])
        result["stderr"] = completed["stderr"]
        return result

    def close(self) -> None:
        for parent in self.parents.values():
            parent.close()


@pytest.fixture(scope="session")
def cases(
    overlay_python: Path, tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[Cases]:
    # one list for every pytest-xdist worker (the first parent to start writes it): the root of their temp folders,
    # or the test command's, kept for the next run (a stale list costs only speed: a module it names that is gone is
    # skipped, one it lacks a case imports itself)
    shared = tmp_path_factory.getbasetemp()
    shared = shared.parent if os.environ.get("PYTEST_XDIST_WORKER") else shared
    listed = Path(pytestconfig.getoption("warm_list", None) or shared / "warm-modules.txt")
    listed.parent.mkdir(parents=True, exist_ok=True)
    before = _files_here()
    runner = Cases(overlay_python, tmp_path_factory.mktemp("cases"), listed)
    yield runner
    runner.close()
    made = sorted(_files_here() - before)
    assert not made, f"the cases made {made[:3]} in {HERE}, not in their scratch folder"


def _files_here() -> set[str]:
    return {str(path.relative_to(HERE)) for path in HERE.rglob("*") if "__pycache__" not in path.parts}
