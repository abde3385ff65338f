"""``transaction`` on its own: ``apply_plans`` changes the trees all or nothing. A patch that fails after its check
passed, an interrupt, an OSError or any other exception part-way leaves every tree of the run exactly as it was
found; a run that works leaves no backup behind. Tiny repositories in ``tmp_path``, plans from ``plan_target``."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from patchset_fakes import FORMAT_PATCH, TEST_GIT_ENV, git, make_repo, tree_state

from patchset.apply.plan import Action, Plan, plan_target
from patchset.apply.target import TreeToPatch
from patchset.apply.transaction import apply_plans
from patchset.plumbing import gitops
from patchset.plumbing.errors import BadInput, DoesNotApply
from patchset.plumbing.signals import Guard, Interrupted, handled
from patchset.plumbing.ui import Console
from patchset.series.model import Series, read_patch

CORE = "core.py"
BASE = "".join(f"# line {n}\n" for n in range(1, 21))
FILES = {CORE: BASE, "README.md": "readme\n"}
FIRST = "0001-add-scale.patch"
SECOND = "0002-fix-scale.patch"


# every test: backups go to a temp folder of its own (the `temp` fixture of conftest)
pytestmark = pytest.mark.usefixtures("temp")


@pytest.fixture(scope="module")
def series(tmp_path_factory: pytest.TempPathFactory) -> Series:
    """0001 adds ``scale`` to core.py and a new test file; 0002 changes a line 0001 adds and appends to README.md.
    Made once per module (the tests only read the patches)."""
    with pytest.MonkeyPatch.context() as env:
        for key, value in TEST_GIT_ENV.items():
            env.setenv(key, value)
        return make_series(tmp_path_factory.mktemp("transaction-series"))


def make_series(base: Path) -> Series:
    work = make_repo(base / "work", FILES)
    folder = base / "patches"
    folder.mkdir()
    (work / CORE).write_text(BASE.replace("# line 10\n", "# line 10\ndef scale(x):\n    return x * 1\n"))
    (work / "tests").mkdir()
    (work / "tests/test_scale.py").write_text("def test_scale():\n    pass\n")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "add scale")
    (work / CORE).write_text((work / CORE).read_text().replace("return x * 1", "return x * 2"))
    (work / "README.md").write_text("readme\nscale by two\n")
    git(work, "commit", "-qam", "fix scale")
    git(work, *FORMAT_PATCH, "-2", "-o", str(folder))
    made = sorted(folder.glob("*.patch"))
    made[0].rename(folder / FIRST)
    made[1].rename(folder / SECOND)
    patches = tuple(read_patch(folder / name) for name in (FIRST, SECOND))
    return Series(name="fake", path=folder / "series", patches=patches)


def plan_for(root: Path, series: Series, *, reverse: bool = False) -> Plan:
    tree = gitops.find_worktree(root)
    assert tree is not None
    target = TreeToPatch(root.resolve(), root.name, "fake", "fake 1.0", "1.0", series, tree)
    return plan_target(target, reverse=reverse)


def break_readme(root: Path) -> None:
    """Change README.md after planning, so that 0002 (but not 0001) no longer applies."""
    (root / "README.md").write_text("readme, edited since the check\n")


def test_apply_plans_applies_every_planned_patch_and_keeps_no_backup(
    series: Series, tmp_path: Path, temp: Path
) -> None:
    """Every CHANGE step of every plan is applied, after which the trees are fully patched and no backup is left."""
    trees = [make_repo(tmp_path / name, FILES) for name in ("a", "b")]
    plans = [plan_for(root, series) for root in trees]
    assert [step.action for plan in plans for step in plan.steps] == [Action.CHANGE] * 4

    apply_plans(plans, Console(quiet=True), Guard())

    for root in trees:
        assert [step.action for step in plan_for(root, series).steps] == [Action.NOTHING, Action.NOTHING]
        assert "return x * 2" in (root / CORE).read_text()
    assert list(temp.iterdir()) == []


def test_second_patch_failing_restores_the_first_patch_exactly(
    series: Series, tmp_path: Path, temp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """When 0002 fails after 0001 was applied, DoesNotApply says so and the tree is byte for byte as it was found."""
    root = make_repo(tmp_path / "tree", FILES)
    plan = plan_for(root, series)
    break_readme(root)
    before = tree_state(root)

    with pytest.raises(
        DoesNotApply, match=f"{SECOND} failed to apply .* 1 patch\\(es\\) changed before it were rolled"
    ):
        apply_plans([plan], Console(), Guard())

    out = capsys.readouterr().out
    assert f"* Applying {FIRST} (1/2)" in out and f"* Rolling back {FIRST}" in out
    assert tree_state(root) == before
    assert not (root / "tests").exists()
    assert list(temp.iterdir()) == []


def test_failure_in_a_later_tree_restores_the_trees_patched_before_it(series: Series, tmp_path: Path) -> None:
    """A failure in the second tree's plan also rolls back the first tree, which had been fully patched."""
    first, second = (make_repo(tmp_path / name, FILES) for name in ("first", "second"))
    plans = [plan_for(first, series), plan_for(second, series)]
    break_readme(second)
    before = tree_state(first, second)

    with pytest.raises(DoesNotApply, match="and so were the trees patched before it in this run: first"):
        apply_plans(plans, Console(quiet=True), Guard())

    assert tree_state(first, second) == before


def test_reverse_plan_reverts_to_head_and_a_failure_restores_the_patched_tree(series: Series, tmp_path: Path) -> None:
    """A reverse plan takes a patched tree back to HEAD; one that fails half-way restores what it had reverted."""
    root = make_repo(tmp_path / "tree", FILES)
    vanilla = tree_state(root)
    apply_plans([plan_for(root, series)], Console(quiet=True), Guard())

    apply_plans([plan_for(root, series, reverse=True)], Console(quiet=True), Guard())
    assert tree_state(root) == vanilla

    apply_plans([plan_for(root, series)], Console(quiet=True), Guard())
    plan = plan_for(root, series, reverse=True)
    (root / "tests/test_scale.py").write_text("edited since the check\n")  # 0001 (only) cannot be reverted now
    before = tree_state(root)

    with pytest.raises(DoesNotApply, match=f"{FIRST} failed to revert"):
        apply_plans([plan], Console(quiet=True), Guard())

    assert tree_state(root) == before


def after_first_apply(monkeypatch: pytest.MonkeyPatch, then: Callable[[], None]) -> list[str]:
    """Make ``gitops.apply_patch`` run ``then`` right after the first patch it applies; returns the patches it ran."""
    real = gitops.apply_patch
    ran: list[str] = []

    def apply_patch(
        cwd: Path, patch: Path, *, reverse: bool = False, check: bool = False, directory: str = ""
    ) -> gitops.ApplyResult:
        result = real(cwd, patch, reverse=reverse, check=check, directory=directory)
        ran.append(patch.name)
        if len(ran) == 1:
            then()
        return result

    monkeypatch.setattr(gitops, "apply_patch", apply_patch)
    return ran


def test_interrupt_during_a_patch_finishes_it_then_rolls_everything_back(
    series: Series, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGINT while 0001 is applied lets it finish, runs no further patch, restores the tree and says so."""
    root = make_repo(tmp_path / "tree", FILES)
    plan = plan_for(root, series)
    before = tree_state(root)
    ran = after_first_apply(monkeypatch, lambda: os.kill(os.getpid(), signal.SIGINT))

    with handled() as guard, pytest.raises(Interrupted) as raised:
        apply_plans([plan], Console(quiet=True), guard)

    assert ran == [FIRST]
    assert raised.value.signum == signal.SIGINT
    assert raised.value.outcome == (
        "the 1 patch(es) applied in this run were rolled back and every tree is as it was found"
    )
    assert tree_state(root) == before


@pytest.mark.parametrize(
    ("error", "expected", "message"),
    [
        (OSError(28, "No space left on device"), BadInput, "could not change the tree: .*every tree was restored"),
        (RuntimeError("bug"), RuntimeError, "bug"),
    ],
    ids=["oserror", "other"],
)
def test_unexpected_error_part_way_restores_the_tree(
    series: Series,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    error: Exception,
    expected: type[BaseException],
    message: str,
) -> None:
    """An OSError (as BadInput) or any other exception after 0001 was applied propagates with the tree restored."""
    root = make_repo(tmp_path / "tree", FILES)
    plan = plan_for(root, series)
    before = tree_state(root)

    def fail() -> None:
        raise error

    ran = after_first_apply(monkeypatch, fail)

    with pytest.raises(expected, match=message):
        apply_plans([plan], Console(quiet=True), Guard())

    assert ran == [FIRST]
    assert tree_state(root) == before
