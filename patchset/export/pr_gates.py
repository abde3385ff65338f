"""An upstream's own gates for a PR branch: its pre-commit lint hooks and its tests of what the branch changes
(``test_selection``), less what cannot count against it (an import gap, or a failure the vanilla release has too).
The hooks are ``repo: local`` ones calling the test venv's pinned tools, since no hook repository can be cloned here;
checks upstream keeps only as scripts are hooks of this project's own (``lint_hooks``)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from patchset.export import gate_record, test_selection
from patchset.export.test_selection import Selected
from patchset.plumbing import gitops, tempdirs
from patchset.plumbing.paths import REPO_ROOT
from patchset.plumbing.ui import Console
from patchset.testenv import suite_forks
from patchset.upstreams import lint_hooks, registry
from patchset.upstreams.fetch import ensure_upstream
from patchset.upstreams.lint_hooks import LintHook
from patchset.upstreams.pins import Pin
from patchset.upstreams.registry import UPSTREAMS
from patchset.upstreams.workspace import Workspace


def _local_hook(key: str, hook: LintHook, python: Path) -> dict[str, object]:
    """The hook as pre-commit's ``repo: local`` one; its ``entry``: its command with the venv's tool, this project's
    own check, or a pygrep pattern."""
    if hook.language == "pygrep":
        entry = hook.command[0]
    elif not hook.command:
        entry = shlex.join([str(python), "-m", *lint_hooks.RUNNER, key, hook.id])
    else:
        tool, *args = hook.command
        entry = shlex.join([str(python if tool == "python" else python.parent / tool), *args])
    return {"id": hook.id, "name": hook.name, "entry": entry, "language": hook.language, **dict(hook.options)}


def precommit_config(key: str, python: Path) -> dict[str, object]:
    """The pre-commit config (a dict; written as JSON, which is YAML) of ``key``'s lint gates (the registry's)."""
    upstream = UPSTREAMS.get(key)
    if upstream is None or not upstream.lint_hooks:
        raise ValueError(f"no lint gates for {key!r}")
    hooks = [_local_hook(key, hook, python) for hook in upstream.lint_hooks]
    return {"repos": [{"repo": "local", "hooks": hooks}]}


@dataclass(frozen=True)
class HookResult:
    name: str
    status: str  # Passed, Failed or Skipped


@dataclass(frozen=True)
class LintResult:
    passed: bool
    hooks: tuple[HookResult, ...]
    output: str
    recorded: str | None = None  # when the same gate passed on the same content, if that pass was reused

    def summary(self) -> str:
        counts = {status: sum(1 for h in self.hooks if h.status == status) for status in ("Passed", "Failed")}
        skipped = [h.name for h in self.hooks if h.status == "Skipped"]
        text = f"{counts['Passed']} passed, {counts['Failed']} failed"
        if skipped:
            text += f", {len(skipped)} skipped: no changed file they check ({'; '.join(skipped)})"
        return text + (gate_record.reused(self.recorded) if self.recorded else "")


_HOOK_LINE = re.compile(r"^(?P<name>.+?)\.{3,}(?:\([^)]*\))?(?P<status>Passed|Failed|Skipped)$")


def parse_precommit(output: str) -> tuple[HookResult, ...]:
    """(hook name, status) for each ``name.....Passed`` line of ``pre-commit run`` output."""
    matches = (_HOOK_LINE.match(line.rstrip()) for line in output.splitlines())
    return tuple(HookResult(match["name"].strip(), match["status"]) for match in matches if match)


def tool_env(python: Path, pythonpath: Sequence[Path] = (REPO_ROOT,)) -> dict[str, str]:
    """The venv's tools' environment: its bin first on PATH, ``pythonpath`` (default: this package, for lint hooks)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(python.parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    env.pop("PYTHONHOME", None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


# the code that decides how a gate runs, part of a remembered pass's key: this module, upstreams/, the hook runner
GATE_CODE = (
    Path(__file__),
    Path(gate_record.__file__),
    *sorted(Path(registry.__file__).parent.glob("*.py")),
    REPO_ROOT / "patchset" / "cli" / "lint_hook.py",
)


def run_lint(key: str, tree: Path, files: Sequence[str], python: Path, records: Path | None = None) -> LintResult:
    """Run ``key``'s lint gates through pre-commit on ``files``; with ``records``, a pass is remembered and reused."""
    config_text = json.dumps(precommit_config(key, python), indent=2) + "\n"
    memo = gate_record.gate_key(f"lint {key}", [tree], python, [config_text, *files], GATE_CODE) if records else None
    if earlier := gate_record.recall(records, memo):
        hooks = parse_precommit(earlier.output)
        return LintResult(passed=True, hooks=hooks, output=earlier.output, recorded=earlier.recorded)
    with tempfile.TemporaryDirectory(prefix=tempdirs.prefix("precommit")) as tmp:
        config = Path(tmp) / "pre-commit-config.yaml"
        config.write_text(config_text, encoding="utf-8")
        env = tool_env(python)
        env["PRE_COMMIT_HOME"] = str(Path(tmp) / "home")
        env["MYPY_CACHE_DIR"] = str(Path(tmp) / "mypy-cache")  # not in the tree under test
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")  # the compile hook's bytecode: not in it either
        env["PRE_COMMIT_COLOR"] = "never"
        env.pop("PRE_COMMIT_ALLOW_NO_CONFIG", None)
        args = ["run", "--config", str(config), "--show-diff-on-failure", "--color=never", "--files", *files]
        proc = suite_forks.run_captured([str(python), "-m", "pre_commit", *args], tree, env)
    hooks = parse_precommit(proc.stdout)
    passed = proc.returncode == 0 and not any(h.status == "Failed" for h in hooks)
    if passed:
        gate_record.remember(records, memo, "lint", proc.stdout)
    return LintResult(passed=passed, hooks=hooks, output=proc.stdout)


@dataclass(frozen=True)
class TestRun:
    """The tests gate of a branch: upstream's test files that ran and did not (with why), and the branch's own."""

    upstream: tuple[Selected, ...]
    own_files: tuple[str, ...]
    passed: bool
    summary: str
    output: str = field(repr=False, default="")
    notes: tuple[str, ...] = ()
    not_run: tuple[Selected, ...] = ()

    @property
    def files(self) -> tuple[str, ...]:
        return (*(test.path for test in self.upstream), *self.own_files)


_PYTEST_SUMMARY = re.compile(r"^=*\s*(?P<text>(\d+ \w+(, )?)+.* in [\d.]+s.*?)\s*=*$")


def only_package(tree: Path, package: str, folder: Path) -> Path:
    """A folder below ``folder`` from which only ``tree``'s ``package`` can be imported: ``tree`` itself on the path
    would let verl's ``tests`` package shadow Trinity-RFT's ``tests`` folder."""
    shim = folder / f"only-{package}"
    shim.mkdir(parents=True, exist_ok=True)
    if not (shim / package).is_symlink():
        (shim / package).symlink_to(tree / package, target_is_directory=True)
    return shim


def run_tests(
    tree: Path,
    files: Sequence[str],
    python: Path,
    pythonpath: Sequence[Path],
    records: Path | None = None,
    importable: Sequence[Path] | None = None,
) -> tuple[bool, str, str]:
    """Run pytest on ``files`` in ``tree``: (passed, its summary line, its output); ``importable`` replaces
    ``pythonpath`` on the path; ``records``: as `run_lint`."""
    command = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", *files]
    trees = [tree, *(path for path in pythonpath if path != tree)]
    memo = gate_record.gate_key("tests", trees, python, command[1:], GATE_CODE) if records else None
    if earlier := gate_record.recall(records, memo):
        return True, earlier.summary + gate_record.reused(earlier.recorded), earlier.output
    proc = suite_forks.run_captured(command, tree, tool_env(python, pythonpath if importable is None else importable))
    summary = next(
        (m["text"] for line in reversed(proc.stdout.splitlines()) if (m := _PYTEST_SUMMARY.match(line.strip()))),
        f"pytest exit status {proc.returncode}",
    )
    if proc.returncode == 0:
        gate_record.remember(records, memo, summary, proc.stdout)
    return proc.returncode == 0, summary, proc.stdout


@dataclass(frozen=True)
class Teeth:
    """The teeth of a cherry-picked fix's patches (``-k selection``), run on the branch expecting the fix."""

    selection: str
    passed: bool
    summary: str


@dataclass(frozen=True)
class Gates:
    """What the gates said of one branch: its lint, its tests and, for a cherry-pick, the teeth of its fix."""

    lint: LintResult
    tests: TestRun
    teeth: Teeth | None = None

    def failures(self) -> list[str]:
        """The gates that failed, as the error line names them."""
        hooks = [hook.name for hook in self.lint.hooks if hook.status == "Failed"]
        failed = [f"upstream lint ({', '.join(hooks) or 'pre-commit'})"] if not self.lint.passed else []
        failed += [] if self.tests.passed else [f"upstream CPU tests ({self.tests.summary})"]
        failed += [f"the fix's regression tests ({self.teeth.summary})"] if self.teeth and not self.teeth.passed else []
        return failed

    @property
    def passed(self) -> bool:
        return self.lint.passed and self.tests.passed and (self.teeth is None or self.teeth.passed)


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
    lint = run_lint(key, tree.path, changed, python, records)
    notes = list(notes)
    pythonpath = [tree.path]
    importable = [tree.path]  # the other upstreams' packages only, not their tests (only_package)
    if not any(path.startswith("tests/") for path in tree.files):
        notes.append(
            f"{label}'s checkout has no tests/ folder (its sdist ships none), so none of upstream's own tests of the "
            "touched modules ran; only the patch's own tests ran. Run export-pr on a git clone of upstream to run them."
        )
    for other in UPSTREAMS[key].tests_import:
        other_pin = gating.workspace.pins.default_for(other)
        assert other_pin is not None
        pythonpath.append(ensure_upstream(other_pin, gating.workspace.cache, console))
        importable.append(only_package(pythonpath[-1], UPSTREAMS[other].package, tree.scratch))
        notes.append(f"{UPSTREAMS[key].title}'s tests import {other}: run beside vanilla {other_pin.label}.")
    env = tool_env(python, importable)
    upstream, not_run, own = test_selection.select(key, tree.path, changed, tree.files, python, env)
    # which upstream files cannot be imported here (on the release either) is remembered like a pass: the same
    # content gives the same answer, so a second run neither probes again nor runs the first, failing, attempt
    inputs = [tree.release, *(test.path for test in upstream)]
    memo = gate_record.gate_key("import gaps", pythonpath, python, inputs, GATE_CODE) if records else None
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
        passed, summary, output = run_tests(tree.path, files, python, pythonpath, records, importable)
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
    tests = TestRun(tuple(upstream), own, passed, summary, output, tuple(notes), tuple(not_run))
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


_FAILED = re.compile(r"^(?:FAILED|ERROR) (?P<test>\S+)")


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
        _, _, before = run_tests(vanilla, files, gating.python, paths, None, paths)
    return sorted(failed) if failed <= _failed_tests(before) else []


def _import_gaps(
    gating: Gating, pin: Pin, tree: WorkTree, files: list[str], output: str, importable: Sequence[Path]
) -> dict[str, str]:
    """{upstream test file of ``files``: why} for those that import a module the test venv lacks, on the release too."""
    gaps = test_selection.import_gaps(output, files)
    env = tool_env(gating.python, importable)
    absent = test_selection.missing_modules(gating.python, {name.split(".")[0] for name in gaps.values()}, env)
    gaps = {test: name for test, name in gaps.items() if name.split(".")[0] in absent}
    if not gaps:
        return {}
    pytest = [str(gating.python), "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", "-o", "addopts="]
    with temp_worktree(tree.path, tree.release, "pr-vanilla") as vanilla:  # collected only: which cannot be imported
        paths = [vanilla, *(path for path in importable if path != tree.path)]
        collected = suite_forks.run_captured([*pytest, *gaps], vanilla, tool_env(gating.python, paths))
        before = test_selection.import_gaps(collected.stdout, files)
    return {
        test: f"imports {name} (through what it imports), which the test venv does not have; it cannot be "
        f"imported on vanilla {pin.label} either"
        for test, name in gaps.items()
        if before.get(test) == name
    }
