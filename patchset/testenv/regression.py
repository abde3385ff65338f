"""Run the CPU regression tests (tests/regression) against given upstream trees, in the pinned venv."""

from __future__ import annotations

import os
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from patchset.plumbing.bounded import Limit, run_bounded
from patchset.plumbing.limits import RAISE_HINT, scaled
from patchset.plumbing.ui import Console, display_path
from patchset.testenv import suite_forks
from patchset.testenv.venv import REPO_ROOT, ensure_venv
from patchset.upstreams.fetch import Cache, ensure_upstream
from patchset.upstreams.pins import Pins
from patchset.upstreams.registry import UPSTREAMS
from patchset.upstreams.workspace import Workspace

SUITE = REPO_ROOT / "tests" / "regression"
EXPECTATIONS = ("fixed", "bug")
TREE_VARIABLES = {upstream.key: upstream.tree_variable for upstream in UPSTREAMS.values()}
# the variable that says a tree is only there because another's tests import it (``dependency``), by upstream
ROLE_VARIABLES = {upstream.key: upstream.role_variable for upstream in UPSTREAMS.values() if upstream.role_variable}
SAMPLE_VARIABLE = "PATCHSET_SAMPLE"
# the vanilla run's record in PATCHSET_BASELINE_DIR is complete once this file is there (the teeth step writes it as it
# ends); a patched run started beside it with pytest's --baseline-wait SECONDS (the suite's conftest) runs its tests
# that read the record (marked vanilla_baseline) last, each waiting for the file that long at most
BASELINE_DONE_FILE = "vanilla-run.done"
# one pytest run of the suite: the whole suite on patched trees takes about 2 minutes on 2 cores; past this it hangs
SUITE_LIMIT_S = 900


@dataclass(frozen=True)
class SuiteRun:
    """How one call runs the regression suite: ``expect`` "fixed" (patched trees) or "bug" (vanilla); ``sample``: one
    batch shape per test, loss and mode; ``companions=False``: not beside the companion verl; ``baseline_dir``: the
    teeth run's record; ``junit_dir``: a ``run-<n>.xml`` report per run; ``parallel=False``: one process; ``limit``:
    per pytest run (default `suite_limit`); ``output``: a file for what the runs print."""

    expect: str = "fixed"
    pytest_args: Sequence[str] = ()
    sample: bool = False
    companions: bool = True
    baseline_dir: Path | None = None
    junit_dir: Path | None = None
    parallel: bool = True
    limit: Limit | None = None
    output: TextIO | None = None


def suite_limit(seconds: float | None = None) -> Limit:
    """The limit of one pytest run of the suite: ``seconds`` as given (``apply --test-timeout``), else
    ``SUITE_LIMIT_S`` times ``PATCHSET_TIME_SCALE``."""
    if seconds is not None:
        return Limit(seconds, "--test-timeout SECONDS")
    return Limit(scaled(SUITE_LIMIT_S), f"apply's --test-timeout SECONDS, or {RAISE_HINT}")


# "required" (set by the test command, on one thread): a run outside pytest-xdist whose ranks cannot fork from it
# (`children.start_warm_server`) fails, instead of paying a fresh interpreter's imports (57 CPU-s a test command)
WARM_SERVER_VARIABLE = "PATCHSET_WARM_SERVER"


def parallel_args(dist: str = "loadfile") -> list[str]:
    """pytest-xdist options (the lock pins it) that run tests on every core (``PATCHSET_WORKERS`` overrides; 1: none).
    ``loadfile`` (the regression suite): one file per worker, so that a module's fixtures (the engine end-to-end run)
    are built once; ``worksteal``: tests of uneven length, spread as workers fall idle."""
    workers = int(os.environ.get("PATCHSET_WORKERS") or min(os.cpu_count() or 1, 4))
    return ["-n", str(workers), "--dist", dist] if workers > 1 else []


def regression_env(
    trees: Mapping[str, Path],
    expect: str,
    baseline_dir: Path | None,
    dependencies: Collection[str] = (),
    sample: bool = False,
) -> dict[str, str]:
    """Environment for the child pytest: the trees first on PYTHONPATH and the suite's PATCHSET_* settings.
    ``dependencies``: the keys of the trees that are there only because another's tests import them (their own tests
    are skipped); ``sample``: one batch shape per test, loss and mode (``PATCHSET_SAMPLE=shapes``, see the suite's
    conftest)."""
    if expect not in EXPECTATIONS:
        raise ValueError(f"expect must be one of {EXPECTATIONS}, not {expect!r}")
    ours = (*TREE_VARIABLES.values(), *ROLE_VARIABLES.values(), SAMPLE_VARIABLE, "PATCHSET_BASELINE_DIR")
    env = {key: value for key, value in os.environ.items() if key not in ours}
    ordered = {key: str(trees[key].resolve()) for key in TREE_VARIABLES if key in trees}
    env["PYTHONPATH"] = os.pathsep.join(ordered.values())
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the trees under test, a user's checkout among them, get no __pycache__
    env.update({TREE_VARIABLES[key]: path for key, path in ordered.items()})
    env["PATCHSET_EXPECT"] = expect
    if sample:
        env[SAMPLE_VARIABLE] = "shapes"
    for key in dependencies:
        env[ROLE_VARIABLES[key]] = "dependency"
    if baseline_dir is not None:
        env["PATCHSET_BASELINE_DIR"] = str(baseline_dir.resolve())
    return env


def run_overlay_regression_tests(python: Path, site_packages: Path, pytest_args: Sequence[str]) -> int:
    """Run the regression suite, sampled, in one process and expecting the fix, with ``python``, whose environment has
    verl, Trinity-RFT and this project installed (in ``site_packages``; nothing on PYTHONPATH), the overlays on; past
    `suite_limit` ``TimedOut``."""
    what = f"the regression tests (expecting fixed) on the releases in {site_packages}"
    print(f"* Running {what}, overlays on")
    # -P, and pytest's append import mode: the checkout's own verl_overlay/ must not shadow the installed one (cwd is
    # the repository root, and in its default mode pytest puts the root of the tests/ package first on sys.path)
    command = [str(python), "-P", "-m", "pytest", str(SUITE), "-q", "-rs", "-p", "no:cacheprovider"]
    command += ["--import-mode=append", *pytest_args]
    env = regression_env({key: site_packages for key in TREE_VARIABLES}, "fixed", None, sample=True)
    env.pop("PYTHONPATH")
    env["PATCHSET_MODE"] = "overlay"
    env["PATCHSET_OVERLAYS"] = "1"
    return run_bounded(command, what, suite_limit(), cwd=REPO_ROOT, env=env)


def imported_only(trees: Mapping[str, Path]) -> list[str]:
    """The upstreams the tests of ``trees`` import (``Upstream.tests_import``) that are not among them."""
    imported = [other for key in trees for other in UPSTREAMS[key].tests_import if other not in trees]
    return list(dict.fromkeys(imported))


def _runs(
    trees: Mapping[str, Path], run: SuiteRun, pins: Pins, cache: Cache, console: Console
) -> list[tuple[dict[str, Path], Collection[str], bool]]:
    """The pytest runs ``trees`` need, as (trees, dependencies, parallel). A tree whose tests import another upstream,
    given without it, is tested beside that upstream's pinned vanilla release (Trinity's engine loss imports verl),
    only a dependency there: its own tests are skipped. With ``run.companions``, also beside each release pinned as
    the companion (``companion_for``) of that upstream (Trinity's legacy path, verl 0.7.1), in one process: only
    Trinity's legacy-path tests run there (seconds), rather than a worker per core that each import torch first."""
    completed, beside = dict(trees), []
    for key, tree in trees.items():
        upstream = UPSTREAMS[key]
        for other in upstream.tests_import:
            if other not in completed:
                pin = pins.default_for(other)
                assert pin is not None, f"{pins.source} names no default {other}"
                completed[other] = ensure_upstream(pin, cache, console)
                shown = display_path(completed[other])
                console.step(f"{upstream.tests_import_note}: testing it beside {pin.label} ({shown})")
            for pin in pins.companions(other, of=key) if run.companions else ():
                checkout = ensure_upstream(pin, cache, console)
                shown = display_path(checkout)
                console.step(f"{upstream.companion_note}: testing it beside {pin.label} ({shown}) as well")
                beside.append(({other: checkout, key: tree}, (other,), False))
    return [(completed, imported_only(trees), run.parallel), *beside]


def _run_suite(
    python: Path,
    trees: Mapping[str, Path],
    run: SuiteRun,
    junit: Sequence[str],
    dependencies: Collection[str],
    parallel: bool,
) -> int:
    described = ", ".join(f"{key} at {path}" for key, path in trees.items()) or "no tree"
    shapes = " (one batch shape per test, loss and mode)" if run.sample else ""
    running = f"* Running the regression tests (expecting {run.expect}){shapes} on {described}"
    print(running, file=run.output or sys.stdout, flush=True)
    command = [str(python), "-m", "pytest", str(SUITE), "-q", "-rs", "-p", "no:cacheprovider", *run.pytest_args]
    command += [*junit, *(parallel_args() if parallel else [])]
    env = regression_env(trees, run.expect, run.baseline_dir, dependencies, run.sample)
    what = f"the regression tests (expecting {run.expect}) on {described}"
    launch = suite_forks.launcher(python)  # a fork of the test command's suite fork server, where it has one
    limit = run.limit or suite_limit()
    return run_bounded(command, what, limit, cwd=REPO_ROOT, env=env, output=run.output, launch=launch)


def run_regression_tests(
    trees: Mapping[str, Path], run: SuiteRun, workspace: Workspace, console: Console | None = None
) -> int:
    """Run the regression suite on ``trees`` ({"verl": path, "trinity": path}) as ``run`` says, with the trees their
    tests import and beside each companion (`_runs`); pytest's exit code (the first failing run's), or ``TimedOut``
    naming the test that hung. The verl trees fetched come from ``workspace``; what is said goes to ``console``
    (default: one that prints everything)."""
    python = ensure_venv()
    console = console if console is not None else Console()
    runs = _runs(trees, run, workspace.pins, workspace.cache, console)
    junit = [[f"--junitxml={run.junit_dir / f'run-{n}.xml'}"] if run.junit_dir else [] for n in range(len(runs))]
    returncodes = [
        _run_suite(python, completed, run, junit[n], dependencies, parallel)
        for n, (completed, dependencies, parallel) in enumerate(runs)
    ]
    return next((code for code in returncodes if code != 0), 0)
