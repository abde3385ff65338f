"""The project's test command (scripts/test.sh): every deployment mode proven once, by its cheapest exact means.

Steps (each timed; the summary lists every step, its time and what it proves):

- environment: the pinned venv, built from requirements/lock.txt on first use (pip's progress shown);
- lint: ruff, ruff format and shellcheck on this project;
- pinned trees: fetch the pinned upstreams and make patched trees of them (``patchset apply --no-test``);
- tooling tests: tests/scripts, the real series on copies of the pinned checkouts and the fault suite included;
- teeth: the regression suite on the vanilla trees, expecting the bug, one batch shape per test, loss and mode
  (every check must fail there once), the engine end-to-end module included;
- fix: the whole regression suite on the patched trees, expecting the fix;
- patched wheels: built, installed into a fresh venv, every installed file equal by sha256 to the patched
  tree's, versions and manifests as labelled, and a smoke run of the loss tests on the installed packages;
- verl 0.9.1: the series applied to it skips the verl patches by content, and the suite passes on upstream's fix;
- overlays: a fresh venv with the pinned sdists and this project pip-installed; a smoke run of the suite with the
  overlays on, then tests/overlay: parity with the patched trees bit for bit, the import-order matrix, guards,
  activation, verl 0.9.1's own CPU test of the critic fix, a local Ray run, the installed file list.

Independent tests run on every core (pytest-xdist). Every step runs even when an earlier one failed, so one run
reports everything; the exit code is 0 only if all passed. ``--quick``, a loop while editing, runs the environment
and pinned trees, then teeth and fix one batch shape per test, loss and mode, without the engine end-to-end module
or the legacy-path run beside verl 0.7.1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from patchset.plumbing.errors import PatchsetError
from patchset.plumbing.ui import Console
from patchset.series.model import load_series
from patchset.testenv.regression import parallel_args, run_overlay_regression_tests, run_regression_tests
from patchset.testenv.venv import REPO_ROOT, VenvError, ensure_venv
from patchset.upstreams.fetch import ensure_upstream, resolve_cache
from patchset.upstreams.pins import load_pins
from tests.harness.overlay_env import build_overlay_env
from tests.harness.wheel_checks import SMOKE, check_wheels

SHELL_SCRIPTS = (
    "scripts/apply.sh",
    "scripts/build-wheels.sh",
    "scripts/export.sh",
    "scripts/export-pr.sh",
    "scripts/test.sh",
    ".ci/run",
)
# The tooling test that installs real wheels into a fresh venv and checks what they report: the patched wheels step
# runs the same check (wheel_checks.verify_install) on the wheels it builds, and more (the sha256 of every file).
PROVEN_BY_THE_WHEELS_STEP = (
    "tests/scripts/test_wheels.py::test_real_wheels_install_into_a_fresh_venv_and_report_the_labelled_version"
)
# A pinned release that has the fixes of the verl series upstream, and the first release that had them.
UPSTREAM_MERGED = ("verl", "0.9.1", "0.9.0")


def _run_step(name: str, command: Sequence[str], env: dict[str, str] | None = None) -> bool:
    print(f"\n=== {name}", flush=True)
    return subprocess.run(list(command), cwd=REPO_ROOT, env=env).returncode == 0


def _pinned_trees(cache_root: Path) -> tuple[dict[str, Path], dict[str, Path]]:
    """Vanilla and patched checkouts of the default pins, as `patchset apply` lays them out in the cache."""
    cache = resolve_cache(str(cache_root), os.environ, REPO_ROOT)
    pins = load_pins(REPO_ROOT / "patches" / "upstreams.toml")
    vanilla = {pin.key: cache.upstreams / pin.dirname for pin in pins.defaults()}
    patched = {pin.key: cache.patched / pin.dirname for pin in pins.defaults()}
    return vanilla, patched


def _upstream_merged_step(cache_root: Path, env: dict[str, str], patches_dir: Path = REPO_ROOT / "patches") -> bool:
    """``patchset apply`` on a fresh clone of the pinned verl 0.9.1 must exit 0, having skipped every patch of the
    verl series with the message that names 0.9.0 and what the tree has (the Upstream-Check lines matched); then
    the regression suite, expecting the fix, on upstream's code (one batch shape per test, loss and mode: the
    whole suite ran on the patched trees)."""
    key, version, since = UPSTREAM_MERGED
    pin = load_pins(patches_dir / "upstreams.toml").find(key, version)
    if pin is None:
        print(f"error: patches/upstreams.toml has no pin for {key} {version}", file=sys.stderr)
        return False
    vanilla = ensure_upstream(pin, resolve_cache(str(cache_root), os.environ, REPO_ROOT), Console())
    names = [patch.name for patch in load_series(patches_dir, pin.series).patches]
    expected = [f"* {name} skipped: in upstream since {since} ({pin.label} has it: " for name in names]
    with tempfile.TemporaryDirectory(prefix="patchset-upstream-merged-") as tmp:
        clone = Path(tmp) / pin.dirname
        subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(vanilla), str(clone)], check=True)
        command = [sys.executable, "-m", "patchset", "apply", "--no-test", "--cache", str(cache_root)]
        command += ["--patches-dir", str(patches_dir), str(clone)]
        applied = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
        print(applied.stdout + applied.stderr, end="", flush=True)
        said = (applied.stdout + applied.stderr).splitlines()
        missing = [line for line in expected if not any(text.startswith(line) for text in said)]
        for line in missing:
            print(f"error: the output does not say '{line}...'", file=sys.stderr)
        tested = run_regression_tests({key: clone}, expect="fixed", sample=True) == 0
    return applied.returncode == 0 and not missing and tested


def _fixed_verl(cache_root: Path) -> Path:
    """The pinned verl release that has the critic fix upstream, fetched and checked by sha256 like every pin."""
    key, version, _ = UPSTREAM_MERGED
    pin = load_pins(REPO_ROOT / "patches" / "upstreams.toml").find(key, version)
    if pin is None:
        raise PatchsetError(f"patches/upstreams.toml has no pin for {key} {version}")
    return ensure_upstream(pin, resolve_cache(str(cache_root), os.environ, REPO_ROOT), Console())


def _overlay_step(python: str, vanilla: dict[str, Path], patched: dict[str, Path], cache_root: Path) -> bool:
    """The overlays on pip-installed releases: build the environment, a smoke run of the regression suite there
    with the overlays on, then tests/overlay, which holds their proof: parity with the patched trees on every loss
    case, the import-order matrix (with its teeth: the same probes with the overlays off find upstream's code),
    guards, activation, and verl 0.9.1's own test of the critic fix."""
    results_dir = cache_root / "results"
    with tempfile.TemporaryDirectory(prefix="patchset-overlay-venv-") as tmp:
        try:
            overlay_python, site = build_overlay_env(Path(tmp) / "venv", Path(python), cache_root / "sdists")
        except VenvError as error:
            print(f"error: {error}", file=sys.stderr)
            return False
        print(f"* Installed verl, trinity-rft and this project into {site}", flush=True)
        smoke = [REPO_ROOT / "tests" / "regression" / name for name in SMOKE]
        smoke_run = run_overlay_regression_tests(
            overlay_python, site, "fixed", None, sample=True, paths=smoke, parallel=False
        )
        passed = {"smoke": smoke_run == 0}
        (results_dir / "overlay-guards.txt").unlink(missing_ok=True)
        env = {
            **os.environ,
            "PATCHSET_OVERLAY_PYTHON": str(overlay_python),
            "PATCHSET_PATCHED_VERL_TREE": str(patched["verl"]),
            "PATCHSET_PATCHED_TRINITY_TREE": str(patched["trinity"]),
            "PATCHSET_VANILLA_VERL_TREE": str(vanilla["verl"]),
            "PATCHSET_VANILLA_TRINITY_TREE": str(vanilla["trinity"]),
            "PATCHSET_OVERLAY_RESULTS": str(results_dir),
        }
        try:  # the real release with the fix (guards; its own CPU test of the critic fix, run on the overlay)
            env["PATCHSET_FIXED_VERL_TREE"] = str(_fixed_verl(cache_root))
        except PatchsetError as error:
            print(f"error: {error}", file=sys.stderr)
            return False
        env.pop("PYTHONPATH", None)
        print("* Running tests/overlay", flush=True)
        command = [python, "-m", "pytest", str(REPO_ROOT / "tests" / "overlay"), "-q", "-rs", "-p", "no:cacheprovider"]
        command += parallel_args(Path(python))
        passed["tests/overlay"] = subprocess.run(command, cwd=REPO_ROOT, env=env).returncode == 0
    guards = results_dir / "overlay-guards.txt"
    if guards.exists():
        print("* Guards tried, and the message each printed:\n" + guards.read_text(encoding="utf-8"), end="")
    return all(passed.values())


def _ratio_table(results_dir: Path) -> str:
    """Gradient-norm ratio to one micro-batch on one rank, per case measured on both sides: vanilla next to patched;
    then how far from 1 the cases measured on the patched trees only (the teeth run samples the shapes) came."""
    ratios: dict[tuple[str, str], dict[str, float]] = {}
    for expect in ("bug", "fixed"):
        path = results_dir / f"ratios-{expect}.jsonl"
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            row = json.loads(line)
            ratios.setdefault((row["component"], row["case"]), {})[expect] = row["ratio"]
    lines = [f"{'component':<9} {'case':<58} {'vanilla':>8} {'patched':>8}"]
    patched_only: list[float] = []
    for (component, case), values in sorted(ratios.items()):
        if "bug" not in values:
            patched_only.append(values["fixed"])
            continue
        patched = f"{values['fixed']:.6f}" if "fixed" in values else "-"
        lines.append(f"{component:<9} {case:<58} {values['bug']:>8.3f} {patched:>8}")
    if patched_only:
        worst = max(abs(ratio - 1.0) for ratio in patched_only)
        lines.append(
            f"(+{len(patched_only)} cases measured on the patched trees only; largest |ratio - 1|: {worst:.1e})"
        )
    return "\n".join(lines)


@dataclass
class StepResult:
    name: str
    proves: str
    passed: bool
    seconds: float


class Steps:
    """Runs the steps of the test command, each announced, timed and kept for the summary."""

    def __init__(self) -> None:
        self.results: list[StepResult] = []
        self.started = time.monotonic()

    def run(self, name: str, proves: str, step: Callable[[], bool]) -> bool:
        print(f"\n=== {name}: {proves}", flush=True)
        started = time.monotonic()
        try:
            passed = step()
        except (PatchsetError, VenvError, OSError, subprocess.CalledProcessError) as error:
            print(f"error: {error}", file=sys.stderr)
            passed = False
        seconds = time.monotonic() - started
        print(f"=== {name}: {'ok' if passed else 'FAILED'} in {_duration(seconds)}", flush=True)
        self.results.append(StepResult(name, proves, passed, seconds))
        return passed

    def summary(self) -> str:
        width = max(len(result.name) for result in self.results)
        lines = [
            f"  {'ok  ' if result.passed else 'FAIL'} {_duration(result.seconds):>7}  {result.name:<{width}}  "
            f"{result.proves}"
            for result in self.results
        ]
        return "\n".join([*lines, f"  total {_duration(time.monotonic() - self.started)}"])


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"


def _run(command: Sequence[str], env: dict[str, str] | None = None) -> bool:
    return subprocess.run(list(command), cwd=REPO_ROOT, env=env).returncode == 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/test.sh",
        description="Run every test of the patchset, proving each deployment mode once: lint, the tooling tests, "
        "the regression suite on the vanilla trees (the teeth: one batch shape per test, loss and mode) and on the "
        "patched trees (every case), the patched wheels (sha256 of every installed file, smoke run), verl 0.9.1 "
        "(patches skipped by content) and the overlays on pip-installed releases (parity, import order, smoke).",
        epilog="Exit codes: 0 all passed; 1 a step failed (its output says which); 2 the environment could not "
        "be built. PATCHSET_WORKERS=N sets the pytest-xdist workers (default: the cores, at most 4; 1: none).",
    )
    parser.add_argument("--cache", type=Path, default=Path(os.environ.get("PATCHSET_CACHE", REPO_ROOT / ".cache")))
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a quick loop: the pinned trees and the regression suite on them, vanilla and patched, one batch shape "
        "per test, loss and mode, without the engine end-to-end module or Trinity's legacy-path run beside verl "
        "0.7.1; no lint, tooling tests, wheels, verl 0.9.1 or overlays",
    )
    args = parser.parse_args(argv)

    steps = Steps()
    venv: list[str] = []

    def environment() -> bool:
        venv.append(str(ensure_venv()))
        return True

    if not steps.run("environment", "the pinned venv of requirements/lock.txt", environment):
        print("\n=== summary\n" + steps.summary())
        return 2
    python = venv[0]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PATCHSET_CACHE": str(args.cache)}
    if not args.quick:
        shellcheck = str(Path(python).parent / "shellcheck")
        lint = [
            [python, "-m", "ruff", "check", "."],
            [python, "-m", "ruff", "format", "--check", "."],
            [shellcheck, *SHELL_SCRIPTS],
        ]
        steps.run("lint", "ruff, ruff format and shellcheck are clean", lambda: all([_run(c) for c in lint]))
    pinned = steps.run(
        "pinned trees",
        "the series applies to the pinned releases",
        lambda: _run([sys.executable, "-m", "patchset", "apply", "--no-test", "--cache", str(args.cache)], env),
    )
    if not args.quick:
        # after the fetch, so the round trip of the real series on the pinned checkouts runs too
        tooling = [python, "-m", "pytest", "tests/scripts", "-q", *parallel_args(Path(python), "worksteal")]
        tooling += ["--deselect", PROVEN_BY_THE_WHEELS_STEP]
        steps.run(
            "tooling tests",
            "apply, export, wheels and their faults leave every tree intact",
            lambda: _run(tooling, env),
        )
    if pinned:
        vanilla, patched = _pinned_trees(args.cache)
        results_dir = args.cache / "results"
        shutil.rmtree(results_dir, ignore_errors=True)
        # --quick: without the engine end-to-end module (minutes: real FSDP2 engines) or the companion verl's runs
        e2e = str(REPO_ROOT / "tests" / "regression" / "test_engine_e2e.py")
        narrowed = {"pytest_args": ["--ignore", e2e] if args.quick else [], "companions": not args.quick}
        steps.run(
            "teeth (vanilla)",
            "every check fails on the vanilla trees (one batch shape per test, loss and mode)",
            lambda: run_regression_tests(vanilla, "bug", results_dir, sample=True, **narrowed) == 0,
        )
        steps.run(
            "fix (patched)",
            "every check passes on the patched trees"
            + (" (one batch shape per test, loss and mode; no engine runs)" if args.quick else ", every case"),
            lambda: run_regression_tests(patched, "fixed", results_dir, sample=args.quick, **narrowed) == 0,
        )
        print("\n=== gradient norm relative to one micro-batch on one rank\n" + _ratio_table(results_dir))
        if not args.quick:
            steps.run(
                "patched wheels",
                "every installed file is the patched tree's (sha256); labels, manifests; smoke run",
                lambda: check_wheels(Console(), patched, args.cache),
            )
    if not args.quick:
        key, version, _ = UPSTREAM_MERGED
        steps.run(
            f"{key} {version}",
            "the verl patches are skipped by content; the suite passes on upstream's fix",
            lambda: _upstream_merged_step(args.cache, env),
        )
        if pinned:
            vanilla, patched = _pinned_trees(args.cache)
            steps.run(
                "overlays",
                "parity with the patched trees, import order, guards, Ray; smoke run",
                lambda: _overlay_step(python, vanilla, patched, args.cache),
            )

    print("\n=== summary\n" + steps.summary())
    return 0 if all(result.passed for result in steps.results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
