"""The project's test command (scripts/test.sh): every check, on a fresh machine, in one run.

Steps: build the pinned venv; lint this project; fetch the pinned upstreams and make patched trees of them;
test the tooling (including the real series on copies of the pinned checkouts); run the regression suite on
the vanilla trees expecting the bug (the teeth), then on the patched trees expecting the fix; print the
measured gradient ratios side by side; build the patched wheels, install them into a fresh venv and run the
regression suite against the installed packages; apply the series onto a clone of verl 0.9.1, which must skip the
critic patch as upstream since 0.9.0 (recognised by content) and pass the critic tests on upstream's code; then the
overlays: a fresh venv with the pinned verl and trinity-rft sdists and this project pip-installed, the regression
suite there with the overlays on (fix) and off (teeth), and tests/overlay (parity with the patched trees, guards,
activation, pickles, a local Ray run). Every step
runs even when an earlier one failed, so one run reports everything; the exit code is 0 only if all passed.
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
from collections.abc import Sequence
from pathlib import Path

from patchset.errors import PatchsetError
from patchset.fetch import ensure_upstream, resolve_cache
from patchset.overlay_env import build_overlay_env, site_packages
from patchset.pins import load_pins
from patchset.regression import run_overlay_regression_tests, run_regression_tests
from patchset.series import load_series
from patchset.ui import Console
from patchset.venv import REPO_ROOT, VenvError, ensure_venv
from patchset.wheels import check_wheels

SHELL_SCRIPTS = (
    "scripts/apply.sh",
    "scripts/build-wheels.sh",
    "scripts/export.sh",
    "scripts/export-pr.sh",
    "scripts/test.sh",
    ".ci/run",
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
    """``patchset apply`` on a fresh clone of the pinned verl 0.9.1: it must exit 0, having skipped every patch of
    the verl series with the message that names 0.9.0 and what the tree has (the Upstream-Check lines matched), and
    having run the regression tests on that tree."""
    key, version, since = UPSTREAM_MERGED
    print(f"\n=== {key} {version}: the {key} patches are recognised as upstream since {since}, their tests pass there")
    started = time.monotonic()
    pin = load_pins(patches_dir / "upstreams.toml").find(key, version)
    if pin is None:
        print(f"error: patches/upstreams.toml has no pin for {key} {version}", file=sys.stderr)
        return False
    try:
        vanilla = ensure_upstream(pin, resolve_cache(str(cache_root), os.environ, REPO_ROOT), Console())
        names = [patch.name for patch in load_series(patches_dir, pin.series).patches]
    except PatchsetError as error:
        print(f"error: {error}", file=sys.stderr)
        return False
    expected = [f"* {name} skipped: in upstream since {since} ({pin.label} has it: " for name in names]
    with tempfile.TemporaryDirectory(prefix="patchset-upstream-merged-") as tmp:
        clone = Path(tmp) / pin.dirname
        subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(vanilla), str(clone)], check=True)
        command = [sys.executable, "-m", "patchset", "apply", "--cache", str(cache_root), "--patches-dir"]
        command += [str(patches_dir), str(clone)]
        with subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as child:
            assert child.stdout is not None
            output = []
            for line in child.stdout:
                print(line, end="", flush=True)
                output.append(line)
        returncode = child.wait()
    missing = [line for line in expected if not any(said.startswith(line) for said in output)]
    for line in missing:
        print(f"error: the output does not say '{line}...'", file=sys.stderr)
    found = not missing
    print(f"({key} {version} step: exit {returncode}, {time.monotonic() - started:.0f} s)", flush=True)
    return returncode == 0 and found


def _fixed_verl(cache_root: Path) -> Path:
    """The pinned verl release that has the critic fix upstream, fetched and checked by sha256 like every pin."""
    key, version, _ = UPSTREAM_MERGED
    pin = load_pins(REPO_ROOT / "patches" / "upstreams.toml").find(key, version)
    if pin is None:
        raise PatchsetError(f"patches/upstreams.toml has no pin for {key} {version}")
    return ensure_upstream(pin, resolve_cache(str(cache_root), os.environ, REPO_ROOT), Console())


def _overlay_step(python: str, vanilla: dict[str, Path], patched: dict[str, Path], cache_root: Path) -> bool:
    """The overlays on pip-installed releases: build the environment, run the regression suite there with the
    overlays off (teeth) and on (fix), then tests/overlay. The engine end-to-end module is left to the patch
    mode (it takes minutes on two cores); parity compares every loss case with the patched trees instead."""
    print("\n=== overlays on pip-installed releases (fresh venv: pinned sdists + this project)", flush=True)
    started = time.monotonic()
    results_dir = cache_root / "results"
    with tempfile.TemporaryDirectory(prefix="patchset-overlay-venv-") as tmp:
        try:
            overlay_python = build_overlay_env(Path(tmp) / "venv", Path(python), cache_root / "sdists")
        except VenvError as error:
            print(f"error: {error}", file=sys.stderr)
            return False
        site = site_packages(Path(tmp) / "venv")
        print(f"* Installed verl, trinity-rft and this project into {site}", flush=True)
        skip_e2e = ["--ignore", str(REPO_ROOT / "tests" / "regression" / "test_engine_e2e.py")]
        passed = {
            "teeth": run_overlay_regression_tests(overlay_python, site, "bug", results_dir / "overlay", skip_e2e) == 0,
            "fix": run_overlay_regression_tests(overlay_python, site, "fixed", results_dir / "overlay", skip_e2e) == 0,
        }
        (results_dir / "overlay-guards.txt").unlink(missing_ok=True)
        env = {
            **os.environ,
            "PATCHSET_OVERLAY_PYTHON": str(overlay_python),
            "PATCHSET_PATCHED_VERL_TREE": str(patched["verl"]),
            "PATCHSET_PATCHED_TRINITY_TREE": str(patched["trinity"]),
            "PATCHSET_VANILLA_VERL_TREE": str(vanilla["verl"]),
            "PATCHSET_OVERLAY_RESULTS": str(results_dir),
        }
        env["PATCHSET_VANILLA_TRINITY_TREE"] = str(vanilla["trinity"])
        try:  # the real release with the fix (guards; its own CPU test of the critic fix, run on the overlay)
            env["PATCHSET_FIXED_VERL_TREE"] = str(_fixed_verl(cache_root))
        except PatchsetError as error:
            print(f"error: {error}", file=sys.stderr)
            return False
        env.pop("PYTHONPATH", None)
        print("* Running tests/overlay", flush=True)
        command = [python, "-m", "pytest", str(REPO_ROOT / "tests" / "overlay"), "-q", "-rs", "-p", "no:cacheprovider"]
        passed["tests/overlay"] = subprocess.run(command, cwd=REPO_ROOT, env=env).returncode == 0
    guards = results_dir / "overlay-guards.txt"
    if guards.exists():
        print("* Guards tried, and the message each printed:\n" + guards.read_text(encoding="utf-8"), end="")
    print(f"(overlay step: {passed}, {time.monotonic() - started:.0f} s)", flush=True)
    return all(passed.values())


def _ratio_table(results_dir: Path) -> str:
    """Gradient-norm ratio to one micro-batch on one rank, per case: vanilla next to patched."""
    ratios: dict[tuple[str, str], dict[str, float]] = {}
    for expect in ("bug", "fixed"):
        path = results_dir / f"ratios-{expect}.jsonl"
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            row = json.loads(line)
            ratios.setdefault((row["component"], row["case"]), {})[expect] = row["ratio"]
    lines = [f"{'component':<9} {'case':<58} {'vanilla':>8} {'patched':>8}"]
    for (component, case), values in sorted(ratios.items()):
        vanilla = f"{values['bug']:.3f}" if "bug" in values else "-"
        patched = f"{values['fixed']:.6f}" if "fixed" in values else "-"
        lines.append(f"{component:<9} {case:<58} {vanilla:>8} {patched:>8}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/test.sh",
        description="Run every test of the patchset: lint, tooling tests, and the regression suite on the "
        "vanilla (expecting the bug) and the patched (expecting the fix) pinned upstreams.",
        epilog="Exit codes: 0 all passed; 1 a step failed (its output says which); 2 the environment could not "
        "be built.",
    )
    parser.add_argument("--cache", type=Path, default=Path(os.environ.get("PATCHSET_CACHE", REPO_ROOT / ".cache")))
    parser.add_argument("--quick", action="store_true", help="skip lint and tooling tests (regression suite only)")
    args = parser.parse_args(argv)

    try:
        python = str(ensure_venv())
    except VenvError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PATCHSET_CACHE": str(args.cache)}
    results: dict[str, bool] = {}
    if not args.quick:
        shellcheck = str(Path(python).parent / "shellcheck")
        lint_steps = [
            ("lint (ruff)", [python, "-m", "ruff", "check", "."]),
            ("format (ruff)", [python, "-m", "ruff", "format", "--check", "."]),
            ("shell (shellcheck)", [shellcheck, *SHELL_SCRIPTS]),
        ]
        results["lint"] = all([_run_step(name, command) for name, command in lint_steps])
    results["pinned trees"] = _run_step(
        "fetch and patch the pinned upstreams",
        [sys.executable, "-m", "patchset", "apply", "--no-test", "--cache", str(args.cache)],
        env,
    )
    if not args.quick:
        # after the fetch, so the round trip of the real series on the pinned checkouts runs too
        results["tooling tests"] = _run_step("tooling tests", [python, "-m", "pytest", "tests/scripts", "-q"], env)
    if results["pinned trees"]:
        vanilla, patched = _pinned_trees(args.cache)
        results_dir = args.cache / "results"
        shutil.rmtree(results_dir, ignore_errors=True)
        print("\n=== regression suite on the vanilla trees (the teeth: must show the bug)", flush=True)
        results["teeth (vanilla)"] = run_regression_tests(vanilla, expect="bug", baseline_dir=results_dir) == 0
        print("\n=== regression suite on the patched trees (must show the fix)", flush=True)
        results["regression (patched)"] = run_regression_tests(patched, expect="fixed", baseline_dir=results_dir) == 0
        print("\n=== gradient norm relative to one micro-batch on one rank\n" + _ratio_table(results_dir))
        print("\n=== patched wheels: build, install into a fresh venv, regression suite on the installed packages")
        results["patched wheels"] = check_wheels(Console(), args.cache)
    key, version, _ = UPSTREAM_MERGED
    results[f"upstream-merged ({key} {version})"] = _upstream_merged_step(args.cache, env)
    if results["pinned trees"]:
        vanilla, patched = _pinned_trees(args.cache)
        results["overlays (pip-installed releases)"] = _overlay_step(python, vanilla, patched, args.cache)

    print("\n=== summary")
    for name, passed in results.items():
        print(f"  {'ok  ' if passed else 'FAIL'} {name}")
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
