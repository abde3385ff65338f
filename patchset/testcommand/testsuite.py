"""The test command (``python -m patchset test``, scripts/test.sh): every deployment mode proven once, by its
cheapest exact means (docs/testing.md). Its steps, each a process of its own (``--step NAME``):

- environment: the pinned venv of requirements/lock.txt, built on first use;
- lint: ruff, ruff format and shellcheck;
- pinned trees: the pinned upstreams fetched and patched, and every other pin later steps read;
- tooling: tests/scripts;
- teeth: the regression suite on the vanilla trees, expecting the bug, one batch shape per test, loss and mode;
- fix: the suite on the patched trees, sampled as teeth is (every case: `scripts/apply.sh`); its
  ``vanilla_baseline`` tests run last, each waiting for teeth's record;
- wheels: the patched wheels' files equal to the patched trees' (sha256), labels and manifests; verl 0.9.1's and
  0.7.1's too;
- verl 0.9.1, a partial target: what upstream has skipped by content, fix on the patched clone, teeth on vanilla;
- verl 0.7.1, a release of another line with its own series: the same three checks;
- overlays: tests/overlay on pip-installed releases, then the teeth of the patches the overlay carries on
  pip-installed verl 0.9.1 and 0.7.1.

`patchset.testcommand.scheduler` runs independent steps at once (``--jobs``); every step runs even when another
failed, unless it needs that one; the exit code is 0 only if all passed.
"""

from __future__ import annotations

import compileall
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TextIO

from patchset.plumbing.errors import EXIT_TIMED_OUT, PatchsetError
from patchset.plumbing.limits import scaled
from patchset.plumbing.ui import Console
from patchset.series.model import load_series
from patchset.series.parts import without_overlay
from patchset.testcommand.overlay_env import WARM_PROBE_MODULES, build_overlay_env
from patchset.testcommand.releases import find_releases, other_lines, patched_clone, split_by_upstream
from patchset.testcommand.scheduler import Scheduler, Step, duration, summary
from patchset.testcommand.scratch import Scratch
from patchset.testcommand.wheel_checks import check_wheels
from patchset.testenv.regression import (
    BASELINE_DONE_FILE,
    SUITE_LIMIT_S,
    WARM_SERVER_VARIABLE,
    SuiteRun,
    parallel_args,
    run_overlay_regression_tests,
    run_regression_tests,
)
from patchset.testenv.suite_forks import SOCKET_VARIABLE, SuiteForkServer, module_list_name
from patchset.testenv.venv import LOCK_FILE, REPO_ROOT, VenvError, ensure_venv
from patchset.upstreams.fetch import ensure_upstream, unusable
from patchset.upstreams.pins import Pin
from patchset.upstreams.workspace import Workspace, resolve_workspace

SHELL_SCRIPTS = ("scripts/apply.sh", "scripts/build-wheels.sh", "scripts/export.sh", "scripts/export-pr.sh")
SHELL_SCRIPTS += ("scripts/test.sh", ".ci/run")
# The tooling test that installs real wheels into a fresh venv and checks what they report: the patched wheels step
# runs the same check (wheel_checks.verify_install) on the wheels it builds, and more (the sha256 of every file).
PROVEN_BY_THE_WHEELS_STEP = (
    "tests/scripts/test_wheels.py::test_real_wheels_install_into_a_fresh_venv_and_report_the_labelled_version"
)
# The steps every run has; the test command adds one per pinned release of a role (`patchset.testcommand.releases`):
# verl 0.9.1, which has part of the verl series upstream, and verl 0.7.1, of another release line.
STEP_NAMES = ("environment", "pinned trees", "lint", "teeth", "tooling", "fix", "overlays", "wheels")
# what the suite fork server imports, to learn the third-party modules the suite's runs import: the trees' loss and
# engine modules the tests and their children import, and the model classes the engine's fork servers preload
SUITE_ENTRY_MODULES = ("verl.trainer.ppo.core_algos", "verl.workers.utils.losses", "verl.trainer.distillation.losses")
SUITE_ENTRY_MODULES += ("verl.workers.engine.fsdp.transformer_impl", "trinity.trainer.verl.losses")
SUITE_ENTRY_MODULES += ("engine_harness.fork_server_warmup",)


def _pinned_trees(workspace: Workspace) -> tuple[dict[str, Path], dict[str, Path]]:
    """Vanilla and patched checkouts of the default pins, as `patchset apply` lays them out in the cache."""
    cache, defaults = workspace.cache, workspace.pins.defaults()
    vanilla = {pin.key: cache.upstreams / pin.dirname for pin in defaults}
    patched = {pin.key: cache.patched / pin.dirname for pin in defaults}
    return vanilla, patched


def _teeth_selection(teeth: Mapping[str, str], applied: Sequence[str]) -> str:
    """The pytest -k expression of the tests that show the bugs of the patches ``applied`` (the series' ``teeth``:
    ``patchset.series.parts``)."""
    return " or ".join(f"({teeth[name]})" for name in applied if name in teeth)


def _partial_target_teeth(
    teeth: Mapping[str, str],
    applied: Sequence[str],
    vanilla: Path,
    key: str,
    workspace: Workspace,
    output: TextIO,
) -> bool:
    """The teeth of the patches that apply to a release taking part of the series, on its vanilla tree. A patch that
    applies there without teeth fails the step: its bug would go unshown. ``output``: where the run prints."""
    missing = [name for name in applied if name not in teeth]
    for name in missing:
        print(
            f"error: {name} applies to {vanilla.name}, but its series' parts.toml names no teeth that shows its bug",
            file=output,
        )
    selected = _teeth_selection(teeth, applied)
    if not selected:
        return not missing
    run = SuiteRun(expect="bug", sample=True, pytest_args=["-k", selected], companions=False, output=output)
    return not missing and run_regression_tests({key: vanilla}, run, workspace) == 0


def _upstream_merged_step(workspace: Workspace, env: dict[str, str], pin: Pin) -> bool:
    """verl 0.9.1 (part of the series upstream) or 0.7.1 (its own series): ``patchset apply`` on a fresh clone skips
    what upstream has, saying so, and applies the rest; the suite, sampled, passes on the clone; beside it, the teeth
    of the applied patches fail on the vanilla tree (printed after)."""
    vanilla = ensure_upstream(pin, workspace.cache, Console())
    series = load_series(workspace.patches_dir, pin.series)
    patches = series.patches
    merged, applies = split_by_upstream(pin, patches)
    expected = [f"* {p.name} skipped: in upstream since {p.upstream_since} ({pin.label} has it: " for p in merged]
    expected += [f"* Applying {p.name} ({patches.index(p) + 1}/{len(patches)})" for p in applies]
    applied = [p.name for p in applies]
    with tempfile.TemporaryFile("w+", encoding="utf-8") as teeth_output, ThreadPoolExecutor(max_workers=1) as pool:
        teeth_run = pool.submit(_partial_target_teeth, series.teeth, applied, vanilla, pin.key, workspace, teeth_output)
        passed = _apply_and_fix(pin, workspace, env, vanilla, expected)
        teeth = teeth_run.result()
        teeth_output.seek(0)
        print(teeth_output.read(), end="", flush=True)
    return passed and teeth


def _apply_and_fix(pin: Pin, workspace: Workspace, env: dict[str, str], vanilla: Path, expected: list[str]) -> bool:
    """``patchset apply`` on a fresh clone of ``vanilla``, saying each of the ``expected`` lines; then the suite,
    expecting the fix, on the patched clone."""
    with tempfile.TemporaryDirectory(prefix="patchset-upstream-merged-") as tmp:
        clone = Path(tmp) / pin.dirname
        try:
            said = patched_clone(vanilla, clone, workspace, env).splitlines()
        except PatchsetError as error:
            print(f"error: {error}", file=sys.stderr)
            return False
        missing = [line for line in expected if not any(text.startswith(line) for text in said)]
        for line in missing:
            print(f"error: the output does not say '{line}...'", file=sys.stderr)
        fixed = run_regression_tests({pin.key: clone}, SuiteRun(expect="fixed", sample=True), workspace) == 0
    return not missing and fixed


def _overlay_step(python: str, vanilla: dict[str, Path], patched: dict[str, Path], workspace: Workspace) -> bool:
    """The overlays on pip-installed releases: tests/overlay in a venv of the pinned releases (parity with the patched
    trees bit for bit, import order, guards, activation), then `_overlay_partial_target` on verl 0.9.1 and 0.7.1."""
    results_dir, releases = workspace.cache.root / "results", find_releases(workspace)
    with tempfile.TemporaryDirectory(prefix="patchset-overlay-venv-") as tmp:
        try:
            defaults = list(workspace.pins.defaults())
            overlay_python, site = build_overlay_env(Path(tmp) / "venv", Path(python), workspace.cache.sdists, defaults)
        except VenvError as error:
            print(f"error: {error}", file=sys.stderr)
            return False
        print(f"* Installed verl, trinity-rft and this project into {site}", flush=True)
        passed: dict[str, bool] = {}
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
        # the real release with the fix (guards; its own CPU test of the critic fix, run on the overlay)
        env["PATCHSET_FIXED_VERL_TREE"] = str(ensure_upstream(releases.partial, workspace.cache, Console()))
        line = ensure_upstream(releases.line, workspace.cache, Console())
        env["PATCHSET_RELEASE_LINE_VERL_TREE"] = str(line)  # its fingerprints
        env.pop("PYTHONPATH", None)
        print("* Running tests/overlay", flush=True)
        command = [python, "-m", "pytest", str(REPO_ROOT / "tests" / "overlay"), "-q", "-rs", "-p", "no:cacheprovider"]
        # where the overlay tests' warm parents keep the modules they learned to preload, for the next run: named by
        # the locked environment, the releases installed (their sdists) and the modules they learn it from
        learned_from = [*WARM_PROBE_MODULES, *(pin.sdist_sha256 for pin in defaults)]
        warm_list = workspace.cache.root / "overlay-warm-parents" / module_list_name(LOCK_FILE, learned_from)
        command += ["--warm-list", str(warm_list)]
        command += parallel_args()
        passed["tests/overlay"] = subprocess.run(command, cwd=REPO_ROOT, env=env).returncode == 0
        for pin in (releases.partial, releases.line):
            passed[pin.label] = _overlay_partial_target(python, workspace, Path(tmp) / f"venv-{pin.dirname}", pin)
    guards = results_dir / "overlay-guards.txt"
    if guards.exists():
        print("* Guards tried, and the message each printed:\n" + guards.read_text(encoding="utf-8"), end="")
    return all(passed.values())


def _overlay_partial_target(python: str, workspace: Workspace, venv_dir: Path, pin: Pin) -> bool:
    """``pin`` (verl 0.9.1 or 0.7.1) pip-installed alone: the teeth of the patches that apply there and the overlay
    carries pass with the overlays on (their failing on the vanilla code is the release's own step's)."""
    try:
        overlay_python, site = build_overlay_env(venv_dir, Path(python), workspace.cache.sdists, [pin])
    except VenvError as error:
        print(f"error: {error}", file=sys.stderr)
        return False
    print(f"* Installed {pin.label} and this project into {site}", flush=True)
    series = load_series(workspace.patches_dir, pin.series)
    applies = [p.name for p in split_by_upstream(pin, series.patches)[1]]
    # a patch the overlay does not carry on this release (its parts.toml says why) has nothing to show here
    uncarried = without_overlay(workspace.patches_dir / pin.series, applies)
    for name in uncarried:
        print(f"* Leaving out {name}'s tests: the overlay does not carry it on {pin.label} (its parts.toml says why)")
    carried = [name for name in applies if name not in uncarried]
    selected = _teeth_selection(series.teeth, carried)
    return run_overlay_regression_tests(overlay_python, site, ["-k", selected]) == 0


def _ratio_table(results_dir: Path) -> str:
    """Gradient-norm ratio to one micro-batch on one rank, per case measured on both sides: vanilla next to patched;
    then how far from 1 the cases measured on the patched trees only (the teeth run samples the shapes) came; then
    the largest relative error of the gradients measured so (0 where exact), on each side."""
    ratios: dict[tuple[str, str], dict[str, float]] = {}
    errors: dict[str, list[float]] = {"bug": [], "fixed": []}
    for expect in ("bug", "fixed"):
        path = results_dir / f"ratios-{expect}.jsonl"
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if "relative_error" in row:
                errors[expect].append(row["relative_error"])
            else:
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
    measured = [
        f"{label} {max(errors[expect]):.1e} ({len(errors[expect])} cases)"
        for expect, label in (("bug", "vanilla"), ("fixed", "patched"))
        if errors[expect]
    ]
    if measured:
        lines.append(f"(largest relative error of a gradient to one micro-batch's: {', '.join(measured)})")
    return "\n".join(lines)


def _lint(python: str) -> bool:
    shellcheck = str(Path(python).parent / "shellcheck")
    commands = [
        [python, "-m", "ruff", "check", "."],
        [python, "-m", "ruff", "format", "--check", "."],
        [shellcheck, *SHELL_SCRIPTS],
    ]
    return all([_run(command) for command in commands])


def _pinned_trees_step(workspace: Workspace, env: dict[str, str], quick: bool) -> bool:
    """Patch the default pins (``patchset apply --no-test``), then fetch every other pin a later step reads, so that
    steps running at once never fetch into the cache."""
    if not _run([sys.executable, "-m", "patchset", "apply", "--no-test", "--cache", str(workspace.cache.root)], env):
        return False
    if quick:
        return True
    cache, pins = workspace.cache, workspace.pins
    for pin in pins.companions("verl", of="trinity"):
        ensure_upstream(pin, cache, Console())
    ensure_upstream(find_releases(workspace).partial, cache, Console())  # raises, naming the file, when none is pinned
    # every release of another line (verl 0.7.0 and 0.7.1): the verl 0.7.1 step and the tooling tests read them
    for pin in other_lines(pins):
        ensure_upstream(pin, cache, Console())
    return True


def _regression_step(workspace: Workspace, name: str, quick: bool) -> bool:
    """Teeth (the vanilla trees; its record marked complete as it ends) or fix (the patched trees), both one batch
    shape per test, loss and mode, so that each case is measured on both sides (every case: `scripts/apply.sh`);
    ``quick``: without the engine end-to-end module or the companion verl."""
    vanilla, patched = _pinned_trees(workspace)
    e2e = str(REPO_ROOT / "tests" / "regression" / "test_engine_e2e.py")
    trees = vanilla if name == "teeth" else patched
    # fix, beside teeth: its tests that read teeth's record wait for it, at most 2/3 of a run's limit (so that a teeth
    # step that hung fails them, not the whole run)
    wait = ["--baseline-wait", f"{scaled(SUITE_LIMIT_S) * 2 / 3:g}"] if name == "fix" else []
    run = SuiteRun(
        expect="bug" if name == "teeth" else "fixed",
        pytest_args=[*(["--ignore", e2e] if quick else []), *wait],
        sample=True,
        companions=not quick,
        baseline_dir=workspace.cache.root / "results",
    )
    try:
        return run_regression_tests(trees, run, workspace) == 0
    finally:
        if name == "teeth":
            run.baseline_dir.mkdir(parents=True, exist_ok=True)
            (run.baseline_dir / BASELINE_DONE_FILE).write_text("the teeth step has ended\n", encoding="utf-8")


def _tooling_step(python: str, env: dict[str, str], workspace: Workspace) -> bool:
    """tests/scripts, then: the cache's vanilla trees, which the other steps read as these tests run, are still usable
    as `ensure_upstream` judges them (one that is not is made again by the next step that asks for it, under the feet
    of those reading it)."""
    command = [python, "-m", "pytest", "tests/scripts", "-q", *parallel_args("worksteal")]
    passed = _run([*command, "--deselect", PROVEN_BY_THE_WHEELS_STEP], env)
    for pin in workspace.pins.pins:
        checkout = workspace.cache.upstreams / pin.dirname
        if checkout.is_dir() and (problem := unusable(checkout, pin)) is not None:
            print(f"error: after the tooling tests, the cache's {pin.label} ({checkout}): {problem}", flush=True)
            passed = False
    return passed


def _run_one_step(name: str, workspace: Workspace, quick: bool) -> bool:
    """The body of step ``name``, run in its own process by the scheduler."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PATCHSET_CACHE": str(workspace.cache.root)}
    if name == "pinned trees":  # beside the environment build: needs no venv
        return _pinned_trees_step(workspace, env, quick)
    found = find_releases(workspace)
    releases = {pin.label: pin for pin in (found.partial, found.line)}
    if name not in (*STEP_NAMES, *releases):
        raise PatchsetError(f"unknown step {name!r} (steps: {', '.join((*STEP_NAMES, *releases))})")
    python = str(ensure_venv())  # the environment step builds it (uv's summary shown); the others find it ready
    if name == "environment":
        return True
    if name == "lint":
        return _lint(python)
    if name in ("teeth", "fix"):
        return _regression_step(workspace, name, quick)
    if name == "tooling":
        return _tooling_step(python, env, workspace)
    if name == "wheels":  # and the wheels of verl 0.9.1 (part of the series) and 0.7.1 (its own), each in a venv
        return check_wheels(Console(), _pinned_trees(workspace)[1], workspace, also=list(releases.values()))
    if name == "overlays":
        return _overlay_step(python, *_pinned_trees(workspace), workspace)
    return _upstream_merged_step(workspace, env, releases[name])


def plan(workspace: Workspace, quick: bool, jobs: int = 1, suite_forks: str | None = None) -> list[Step]:
    """The steps, in the order they take a free slot (the long ones first, so that the last ones running are short).
    ``jobs`` run at once: teeth, fix and the overlays share the cores among their pytest-xdist workers
    (``PATCHSET_WORKERS`` unless set), the tooling tests take every core, verl 0.9.1 and 0.7.1 one process each.
    ``suite_forks``: the socket of the suite fork server (`patchset.testenv.suite_forks`) for the suite's steps."""
    cores = os.cpu_count() or 1
    shared = () if os.environ.get("PATCHSET_WORKERS") else (("PATCHSET_WORKERS", str(max(1, cores // jobs))),)
    # a short suite run beside the others: one process, not a worker per core that each import torch and verl first
    alone = () if os.environ.get("PATCHSET_WORKERS") else (("PATCHSET_WORKERS", "1"),)
    forks = ((SOCKET_VARIABLE, suite_forks),) if suite_forks else ()  # for the steps that run the suite
    cache, releases = workspace.cache.root, find_releases(workspace)
    partial, line = releases.partial, releases.line

    def step(name: str, proves: str, needs: tuple[str, ...] = ("environment", "pinned trees"), **how: object) -> Step:
        argv = [sys.executable, "-m", "patchset", "test", "--step", name, "--cache", str(cache)]
        return Step(name, proves, (*argv, *(["--quick"] if quick else [])), needs, **how)  # type: ignore[arg-type]

    shapes = "one batch shape per test, loss and mode"
    steps = [
        # limit_s: each step's time limit, about 4 times what it takes on 2 cores (the environment: a slow download)
        step("environment", "the pinned venv of requirements/lock.txt", needs=(), stream=True, limit_s=1800),
        step("pinned trees", "the series applies to the pinned releases", needs=(), limit_s=900),
        step("lint", "ruff, ruff format and shellcheck are clean", needs=("environment",), limit_s=300),
        step("teeth", f"every check fails on the vanilla trees ({shapes})", env=(*shared, *forks)),
        step("tooling", "apply, export, wheels and their faults leave every tree intact", env=forks),
        step(
            "overlays",
            "on pip-installed releases: parity with the patched trees, import order, guards, Ray",
            env=shared,
        ),
        step(
            "fix",
            f"every check passes on the patched trees ({shapes}" + ("; no engine runs)" if quick else ")"),
            after=("teeth",) if quick else (),  # --quick: one at a time; else beside teeth (`_regression_step`)
            env=(*shared, *forks),
            limit_s=1500,
        ),
        step(
            "wheels",
            f"every installed file is the patched tree's (sha256); labels, manifests; {partial.label}'s and "
            f"{line.version}'s wheels too",
            limit_s=900,
        ),
        step(
            partial.label,
            "a partial target: what upstream has is skipped by content, the rest applies; fix on the patched clone, "
            "teeth of the applied patches on vanilla",
            env=(*alone, *forks),
            limit_s=900,
        ),
        step(
            line.label,
            f"another release line: its own series ({line.series}) applies; fix on the patched clone, teeth on "
            f"vanilla ({shapes})",
            env=(*alone, *forks),
            limit_s=900,
        ),
    ]
    quick_steps = ("environment", "pinned trees", "teeth", "fix")
    return [step for step in steps if not quick or step.name in quick_steps]


def _suite_fork_server(workspace: Workspace) -> SuiteForkServer:
    """The suite fork server of this run (`patchset.testenv.suite_forks`), not started yet: it learns what the suite's
    runs import from the patched default trees (the same third-party modules as the vanilla ones)."""
    address = os.path.join(tempfile.gettempdir(), f"patchset-suite-forks-{os.getpid()}.sock")
    folder = workspace.cache.root / "suite-fork-server"
    listed = folder / module_list_name(LOCK_FILE, SUITE_ENTRY_MODULES)
    log = workspace.cache.root / "results" / "suite-fork-server.log"
    return SuiteForkServer(address, list(_pinned_trees(workspace)[1].values()), SUITE_ENTRY_MODULES, listed, log)


# this project's own code, which the steps' processes import (git ignores the __pycache__ folders)
PROJECT_CODE = ("engine_harness", "hydra_plugins", "patchset", "patchset_overlay")
PROJECT_CODE += ("patchset_overlay_registry", "scripts", "tests", "trinity_overlay", "verl_overlay")


def _compile_project() -> None:
    """Byte-compile this project's own modules once (0.4 CPU-s): with PYTHONDONTWRITEBYTECODE set, as on CI
    machines, each of the hundreds of processes the steps start would compile them anew."""
    for name in PROJECT_CODE:
        compileall.compile_dir(REPO_ROOT / name, quiet=1, workers=1)


def _run(command: Sequence[str], env: dict[str, str] | None = None) -> bool:
    return subprocess.run(list(command), cwd=REPO_ROOT, env=env).returncode == 0


def run_step(name: str, cache: Path, quick: bool) -> int:
    """Step ``name`` alone, as the scheduler runs it in a process of its own: 0 passed, 1 failed, 2 no environment."""
    try:
        return 0 if _run_one_step(name, resolve_workspace(None, str(cache), os.environ), quick) else 1
    except (VenvError, PatchsetError, OSError, subprocess.CalledProcessError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2 if isinstance(error, VenvError) else 1


def run(cache: Path, quick: bool, jobs: int) -> int:
    """Every step of the plan (``quick``: the quick loop), ``jobs`` at a time; the test command's exit code. The
    steps' temporary files go to a scratch folder (`patchset.testcommand.scratch`), kept when a step failed."""
    scratch = Scratch(os.environ)
    print(scratch.describe(), flush=True)
    failed = True
    try:
        code = _run_steps(cache, quick, jobs, scratch.environ())
        failed = code != 0
        return code
    except KeyboardInterrupt:
        failed = False  # nothing to look into
        raise
    finally:
        if kept := scratch.close(keep=failed):
            print(kept, file=sys.stderr, flush=True)


def _run_steps(cache: Path, quick: bool, jobs: int, scratch_env: Mapping[str, str]) -> int:
    """Every step of the plan, the steps' environment given ``scratch_env`` too; the test command's exit code."""
    started = time.monotonic()
    shutil.rmtree(cache / "results", ignore_errors=True)
    _compile_project()
    env = {**os.environ, **scratch_env, "PYTHONPATH": str(REPO_ROOT)}
    # every test process computes on one thread: the tensors are tiny, and the steps and workers running at once
    # are the parallelism (threads of several processes spinning on 2 cores cost ~10 % more CPU in all)
    env.setdefault("OMP_NUM_THREADS", "1")
    if env["OMP_NUM_THREADS"] == "1":  # a warm fork server needs one thread: with more, runs fork from fresh ones
        env[WARM_SERVER_VARIABLE] = "required"
    # the kernels torch.compile builds (Trinity's legacy Megatron actor compiles one): kept for the next run, not in
    # the scratch folder that TMPDIR names (measured: the legacy Megatron tests, 20.4 CPU-s cold, 12.4 warm)
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache / "torchinductor"))
    # and no precompiled header: torch keeps it under TMPDIR whatever that says, so it was built again each run
    # (5.7 CPU-s), and its key (the preprocessed header) is read even where the kernel is cached
    env.setdefault("TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS", "0")
    # --quick runs teeth, then fix, one at a time: each gets every core
    workspace = resolve_workspace(None, str(cache), os.environ)
    server = _suite_fork_server(workspace)
    steps = plan(workspace, quick, 1 if quick else jobs, suite_forks=server.address)
    served = {step.name for step in steps if SOCKET_VARIABLE in dict(step.env)}

    def start_server(step: Step) -> None:  # once the environment step has built the venv it runs in
        if step.name in served:
            server.start(ensure_venv(), REPO_ROOT, env)  # the steps' environment: their runs' thread settings

    try:
        results = Scheduler(steps, jobs, REPO_ROOT, env, before_start=start_server).run()
    finally:
        forked_cpu = server.stop()
    if any(result.name == "fix" for result in results):
        print("\n=== gradient norm relative to one micro-batch on one rank\n" + _ratio_table(cache / "results"))
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # every step, and every process each step waited for
    cpu = children.ru_utime + children.ru_stime
    print("\n=== summary\n" + summary(results, time.monotonic() - started, jobs, cpu), flush=True)
    if forked_cpu is not None:  # the runs of the suite it forked are its children, not their steps'
        print(
            f"  (the suite's runs in {', '.join(sorted(served))}: {duration(forked_cpu)} of CPU, forked by the suite "
            "fork server, in the total, not in their steps' column)",
            flush=True,
        )
    hung = [result for result in results if result.timed_out]
    if hung:
        print("\n".join(f"error: {result.note}" for result in hung), file=sys.stderr)
        return EXIT_TIMED_OUT
    if not results[0].passed:
        return 2
    return 0 if all(result.passed for result in results) else 1
