"""The gates on one PR branch: upstream's lint and tests of what it changes, less what cannot count against it (an
import gap or a failure the vanilla release has too, told apart on a worktree of it)."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from patchset.export import gate_record, pr_gates, test_selection
from patchset.export.pr_gates import Gates, Teeth
from patchset.plumbing import gitops, tempdirs
from patchset.plumbing.paths import REPO_ROOT
from patchset.plumbing.ui import Console
from patchset.testenv import suite_forks
from patchset.upstreams.fetch import ensure_upstream
from patchset.upstreams.pins import Pin
from patchset.upstreams.registry import UPSTREAMS
from patchset.upstreams.workspace import Workspace

_FAILED = re.compile(r"^(?:FAILED|ERROR) (?P<test>\S+)")


@dataclass(frozen=True)
class Gating:
    """How every branch of a run is gated; ``records``: where passes are remembered (None: every gate runs)."""

    python: Path
    records: Path | None
    workspace: Workspace


@dataclass(frozen=True)
class WorkTree:
    """The temporary git worktree of the user's checkout in which each branch is made and gated."""

    path: Path
    release: str  # the commit the branches start on: the release tag's, else the checkout's HEAD
    files: tuple[str, ...]  # every file of the release tree
    scratch: Path  # a folder for this run's own files


def run_gates(
    gating: Gating, pin: Pin, tree: WorkTree, changed: list[str], console: Console, notes: Sequence[str] = ()
) -> Gates:
    """The gates on the branch checked out in ``tree``; ``notes``: more lines for the tests' report."""
    key, label, python, records = pin.key, pin.name, gating.python, gating.records
    console.step(f"Running {key}'s lint gates through pre-commit on {len(changed)} changed file(s)")
    lint = pr_gates.run_lint(key, tree.path, changed, python, records)
    notes = list(notes)
    pythonpath = [tree.path]
    importable = [tree.path]  # the other upstreams' packages only, not their tests (pr_gates.only_package)
    if not any(path.startswith("tests/") for path in tree.files):
        notes.append(
            f"{label}'s checkout has no tests/ folder (its sdist ships none), so none of upstream's own tests of the "
            "touched modules ran; only the patch's own tests ran. Run export-pr on a git clone of upstream to run them."
        )
    for other in UPSTREAMS[key].tests_import:
        other_pin = gating.workspace.pins.default_for(other)
        assert other_pin is not None
        pythonpath.append(ensure_upstream(other_pin, gating.workspace.cache, console))
        importable.append(pr_gates.only_package(pythonpath[-1], UPSTREAMS[other].package, tree.scratch))
        notes.append(f"{UPSTREAMS[key].title}'s tests import {other}: run beside vanilla {other_pin.label}.")
    env = pr_gates.tool_env(python, importable)
    upstream, not_run, own = test_selection.select(key, tree.path, changed, tree.files, python, env)
    # which upstream files cannot be imported here (on the release either) is remembered like a pass: the same
    # content gives the same answer, so a second run neither probes again nor runs the first, failing, attempt
    inputs = [tree.release, *(test.path for test in upstream)]
    memo = gate_record.gate_key("import gaps", pythonpath, python, inputs, pr_gates.GATE_CODE) if records else None
    known = gate_record.recall(records, memo)
    gaps: dict[str, str] = json.loads(known.summary) if known else {}
    for attempt in range(2):  # once more without the files that cannot be imported here
        if gaps:
            console.step(f"Not running {', '.join(gaps)}: they cannot be imported here, on vanilla {pin.tag} either")
            not_run += [replace(test, not_run=gaps[test.path]) for test in upstream if test.path in gaps]
            upstream = [test for test in upstream if test.path not in gaps]
        files = [*(test.path for test in upstream), *own]
        if not files:
            none = "no upstream test that can run here covers the touched modules, and the patch adds none"
            passed, summary, output = True, none, ""
            break
        console.step(f"Running the CPU tests: {' '.join(files)}")
        passed, summary, output = pr_gates.run_tests(tree.path, files, python, pythonpath, records, importable)
        if passed or gaps or attempt:
            break
        gaps = _import_gaps(gating, pin, tree, [test.path for test in upstream], output, importable)
        if not gaps:
            break
        gate_record.remember(records, memo, json.dumps(gaps), "")
    if not passed and upstream:
        on_release = _fail_on_release(gating, tree, [test.path for test in upstream], changed, output, importable)
        if on_release:
            passed = True
            summary += f"; every failure also fails on vanilla {pin.tag}, run the same way: {', '.join(on_release)}"
            notes.append(
                f"Upstream's own tests that fail on vanilla {pin.tag} too (the same files, in the same order), so not "
                f"because of this branch: {', '.join(on_release)}."
            )
    tests = pr_gates.TestRun(tuple(upstream), own, passed, summary, output, tuple(notes), tuple(not_run))
    return Gates(lint=lint, tests=tests)


def run_teeth(gating: Gating, pin: Pin, tree: WorkTree, selection: str, console: Console) -> Teeth:
    """The fix's teeth (``tests/regression -k selection``) on the branch: upstream's commit fixes what ours does."""
    from patchset.testenv import regression  # imported late: only a cherry-pick runs them
    from patchset.testenv.junit import junit_counts

    records = gating.records
    memo = gate_record.gate_key("teeth", [tree.path], gating.python, [selection], _teeth_code()) if records else None
    if earlier := gate_record.recall(records, memo):
        return Teeth(selection, True, earlier.summary + gate_record.reused(earlier.recorded))
    console.step(f"Running the fix's regression tests on the branch (tests/regression -k {selection!r})")
    with tempfile.TemporaryDirectory(prefix=tempdirs.prefix("teeth")) as tmp:
        run = regression.SuiteRun(
            expect="fixed",
            pytest_args=["-k", selection, "--tb=short", "-p", "no:warnings"],
            sample=True,
            companions=False,
            junit_dir=Path(tmp),
            parallel=False,
        )
        code = regression.run_regression_tests({pin.key: tree.path}, run, gating.workspace, console)
        counts = junit_counts(code, Path(tmp))
    passed = code == 0 and counts.passed > 0
    if passed:
        gate_record.remember(records, memo, str(counts), "")
    return Teeth(selection, passed, str(counts))


def _teeth_code() -> list[Path]:
    """What a teeth run's result depends on beside the branch: the suite, its harness, this package, the series."""
    patterns = (
        "tests/regression/**/*.py",
        "engine_harness/**/*.py",
        *(f"patchset/{package}/**/*.py" for package in ("apply", "plumbing", "series", "testenv", "upstreams")),
        "patches/**/*",
    )
    return sorted(path for pattern in patterns for path in REPO_ROOT.glob(pattern) if path.is_file())


def _failed_tests(output: str) -> set[str]:
    """The test ids pytest's short summary names as failed or in error."""
    return {m["test"] for line in output.splitlines() if (m := _FAILED.match(line))}


@contextmanager
def temp_worktree(repo: Path, commit: str, kind: str) -> Iterator[Path]:
    """A temporary detached worktree of ``repo`` at ``commit``, in a scratch folder of its own (``kind``)."""
    tree = Path(tempfile.mkdtemp(prefix=tempdirs.prefix(kind))) / "tree"
    try:
        gitops.git_text(repo, "worktree", "add", "-q", "--detach", str(tree), commit)
        yield tree
    finally:
        gitops.run_git(["worktree", "remove", "--force", str(tree)], cwd=repo, check=False)
        gitops.run_git(["worktree", "prune"], cwd=repo, check=False)
        shutil.rmtree(tree.parent, ignore_errors=True)


def _fail_on_release(
    gating: Gating, tree: WorkTree, files: list[str], changed: Sequence[str], output: str, importable: Sequence[Path]
) -> list[str]:
    """The branch's failures of upstream's test ``files`` when every one is of a test it does not change that fails
    on the release too, run the same way (order matters: verl 0.7.1's ``test_algo_config_on_cpu.py`` fails after
    ``test_core_algos``)."""
    failed = _failed_tests(output)
    if not failed or any(test.split("::")[0] not in files or test.split("::")[0] in changed for test in failed):
        return []
    with temp_worktree(tree.path, tree.release, "pr-vanilla") as vanilla:
        paths = [vanilla, *(path for path in importable if path != tree.path)]
        _, _, before = pr_gates.run_tests(vanilla, files, gating.python, paths, None, paths)
    return sorted(failed) if failed <= _failed_tests(before) else []


def _import_gaps(
    gating: Gating, pin: Pin, tree: WorkTree, files: list[str], output: str, importable: Sequence[Path]
) -> dict[str, str]:
    """{upstream test file of ``files``: why} for those that import a module the test venv lacks, on the release too."""
    gaps = test_selection.import_gaps(output, files)
    env = pr_gates.tool_env(gating.python, importable)
    absent = test_selection.missing_modules(gating.python, {name.split(".")[0] for name in gaps.values()}, env)
    gaps = {test: name for test, name in gaps.items() if name.split(".")[0] in absent}
    if not gaps:
        return {}
    pytest = [str(gating.python), "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", "-o", "addopts="]
    with temp_worktree(tree.path, tree.release, "pr-vanilla") as vanilla:  # collected only: which cannot be imported
        paths = [vanilla, *(path for path in importable if path != tree.path)]
        collected = suite_forks.run_captured([*pytest, *gaps], vanilla, pr_gates.tool_env(gating.python, paths))
        before = test_selection.import_gaps(collected.stdout, files)
    return {
        test: f"imports {name} (through what it imports), which the test venv does not have; it cannot be "
        f"imported on vanilla {pin.label} either"
        for test, name in gaps.items()
        if before.get(test) == name
    }
