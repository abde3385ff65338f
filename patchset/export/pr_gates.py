"""An upstream's own gates for a PR branch: its pre-commit lint hooks and its tests (chosen by ``test_selection``).

The hooks run as ``repo: local`` hooks calling the test venv's pinned tools, since no hook repository can be cloned
here; upstream checks that exist only as its scripts are hooks of this project's own (``lint_hooks``)."""

from __future__ import annotations

import json
import os
import re
import shlex
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from patchset.export import gate_record
from patchset.export.test_selection import Selected
from patchset.plumbing import tempdirs
from patchset.plumbing.paths import REPO_ROOT
from patchset.testenv import suite_forks
from patchset.upstreams import lint_hooks, registry
from patchset.upstreams.lint_hooks import LintHook
from patchset.upstreams.registry import UPSTREAMS


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
