"""``plan`` on its own: the Action ``plan_series`` picks for each patch of a small series (apply, already applied,
upstream, does not apply, ambiguous, 3-way) without touching the tree, and ``unexplained_changes``, on tiny
repositories in ``tmp_path`` with patches made by ``git format-patch``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from patchset_fakes import FORMAT_PATCH, TEST_GIT_ENV, git, make_repo, tree_state

from patchset.apply.plan import Action, Finding, Step, applied_patches, plan_series, unexplained_changes
from patchset.plumbing import gitops
from patchset.plumbing.gitops import Merge
from patchset.series.model import Patch, read_patch

CORE = "core.py"
BASE = "".join(f"# line {n}\n" for n in range(1, 21))
FILES = {CORE: BASE, "README.md": "readme\n"}
SCALE_1 = "# line 10\ndef scale(x):\n    return x * 1\n"
UPSTREAM_FORM = "def scale(x, factor=1):\n    return x * factor\n"  # upstream's own form, in place of "# line 8"
CHECKS = "Upstream-Check: core.py: ^def scale\\(x\\b\nUpstream-Check: core.py: ^    return x \\* \\w+$"


@dataclass(frozen=True)
class Series:
    """0001 adds ``scale`` and a test file, 0002 changes a line 0001 adds; ``upstream`` is 0001's change with
    ``Applied-Upstream: 0.9.0`` and two ``Upstream-Check`` lines."""

    first: Patch
    second: Patch
    upstream: Patch


def commit_patch(work: Path, dest: Path, message: str) -> Patch:
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", message)
    dest.write_text(git(work, *FORMAT_PATCH, "-1", "--stdout"))
    return read_patch(dest)


def make_series(tmp_path: Path) -> Series:
    work = make_repo(tmp_path / "work", FILES)
    core = work / CORE
    core.write_text(BASE.replace("# line 10\n", SCALE_1))
    (work / "tests").mkdir()
    (work / "tests/test_scale.py").write_text("def test_scale():\n    pass\n")
    patches = tmp_path / "patches"
    patches.mkdir()
    first = commit_patch(work, patches / "0001-add-scale.patch", "add scale\n\nForwarded: no")
    core.write_text(core.read_text().replace("return x * 1", "return x * 2"))
    second = commit_patch(work, patches / "0002-fix-scale.patch", "fix scale\n\nForwarded: no")
    git(work, "reset", "-q", "--hard", "HEAD~2")
    core.write_text(BASE.replace("# line 10\n", SCALE_1))
    message = f"add scale\n\nApplied-Upstream: 0.9.0, https://example.invalid/pr/1\n{CHECKS}"
    upstream = commit_patch(work, patches / "0001-upstream-has-it.patch", message)
    return Series(first, second, upstream)


def actions(steps: list[Step]) -> list[tuple[int, Action]]:
    return [(step.index, step.action) for step in steps]


def worktree(root: Path) -> gitops.WorkTree:
    tree = gitops.find_worktree(root)
    assert tree is not None
    return tree


@pytest.fixture(scope="module")
def series(tmp_path_factory: pytest.TempPathFactory) -> Series:
    """Made once per module (the tests only read the patches)."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in TEST_GIT_ENV.items():
            patch.setenv(key, value)
        return make_series(tmp_path_factory.mktemp("plan-series"))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "tree", FILES)


def test_fresh_tree_plans_a_dependent_series_as_change_in_sequence_and_changes_nothing(
    series: Series, tree: Path
) -> None:
    """Every patch of an unpatched tree is CHANGE, 0002 judged on top of 0001, and planning writes nothing."""
    assert not gitops.apply_patch(tree, series.second.path, check=True).ok  # alone, 0002 does not apply
    before = tree_state(tree)

    steps = plan_series(tree, [series.first, series.second], version="0.8.0")

    assert actions(steps) == [(1, Action.CHANGE), (2, Action.CHANGE)]
    assert tree_state(tree) == before


def test_fully_applied_series_is_nothing_forward_and_change_in_reverse(series: Series, tree: Path) -> None:
    """Patches in the tree are NOTHING (even 0001, whose lines 0002 changed); reversing plans them last first."""
    for patch in (series.first, series.second):
        assert gitops.apply_patch(tree, patch.path).ok
    patches = [series.first, series.second]

    forward = plan_series(tree, patches, version="0.8.0")
    backward = plan_series(tree, patches, version="0.8.0", reverse=True)

    assert actions(forward) == [(1, Action.NOTHING), (2, Action.NOTHING)]
    assert actions(backward) == [(2, Action.CHANGE), (1, Action.CHANGE)]
    assert applied_patches(forward, reverse=False) == patches
    assert applied_patches(backward, reverse=True) == patches


def test_partly_applied_series_plans_only_the_missing_patches(series: Series, tree: Path) -> None:
    """With 0001 in, 0001 is NOTHING and 0002 CHANGE; in reverse 0002 is NOTHING (not applied) and 0001 CHANGE."""
    assert gitops.apply_patch(tree, series.first.path).ok
    patches = [series.first, series.second]

    assert actions(plan_series(tree, patches, version="0.8.0")) == [(1, Action.NOTHING), (2, Action.CHANGE)]
    backward = plan_series(tree, patches, version="0.8.0", reverse=True)
    assert actions(backward) == [(2, Action.NOTHING), (1, Action.CHANGE)]


def test_patch_whose_context_changed_fails_with_its_file_and_hunk_line(series: Series, tree: Path) -> None:
    """A patch whose context is gone is FAIL with the failing file and hunk line; the patch after it fails too."""
    (tree / CORE).write_text(BASE.replace("# line 9\n", "# line nine\n"))

    steps = plan_series(tree, [series.first, series.second], version="0.8.0")

    assert actions(steps) == [(1, Action.FAIL), (2, Action.FAIL)]
    assert steps[0].failure == gitops.Failure(CORE, 8, "patch does not apply")
    assert steps[0].merge is None  # no objects given: no 3-way merge tried


def test_three_way_merge_is_reported_on_fail_and_becomes_change_only_when_asked(series: Series, tree: Path) -> None:
    """A patch that only a 3-way merge resolves stays FAIL (merge RESOLVES) unless merge=True makes it a merged
    CHANGE, with the next patch judged on top of it; the tree and its repository are only read."""
    (tree / CORE).write_text(BASE.replace("# line 8\n", "# line eight\n"))  # 0001's context, not 0002's
    objects = gitops.objects_dir(worktree(tree))
    patches = [series.first, series.second]
    before = tree_state(tree)

    reported = plan_series(tree, patches, version="0.8.0", objects=objects)
    merged = plan_series(tree, patches, version="0.8.0", objects=objects, merge=True)

    assert reported[0].action is Action.FAIL and reported[0].merge is not None
    assert reported[0].merge.outcome is Merge.RESOLVES
    assert actions(merged) == [(1, Action.CHANGE), (2, Action.CHANGE)]
    assert merged[0].merged and not merged[1].merged
    assert tree_state(tree) == before


def test_patch_that_both_applies_and_reverts_is_refused_as_ambiguous(tmp_path: Path) -> None:
    """A patch whose old and new hunks both fit the tree is FAIL "ambiguous", never applied twice."""
    block = "c1\nc2\nc3\n{}\nc4\nc5\nc6\n"
    seps = "".join(f"sep {n}\n" for n in range(10))
    text = seps + block.format("foo") + seps + block.format("bar") + seps
    work = make_repo(tmp_path / "work", {"f.txt": text})
    (work / "f.txt").write_text(text.replace("foo", "bar", 1))
    patch = commit_patch(work, tmp_path / "0001-foo-to-bar.patch", "foo to bar")
    tree = make_repo(tmp_path / "tree", {"f.txt": text})

    steps = plan_series(tree, [patch], version="1.0")

    assert [(step.action, step.finding) for step in steps] == [(Action.FAIL, Finding.AMBIGUOUS)]


@pytest.mark.parametrize(
    ("version", "content", "expected"),
    [
        ("0.9.0", BASE.replace("# line 8\n", UPSTREAM_FORM), Action.SKIP),  # claimed and present
        ("0.9.1", BASE.replace("# line 10\n", SCALE_1), Action.SKIP),  # claimed, present in this patch's form
        ("0.9.0", BASE, Action.FAIL),  # claimed but the content lacks it
        ("0.8.0", BASE.replace("# line 8\n", UPSTREAM_FORM), Action.SKIP),  # older, neither applies nor reverts
        ("0.8.0", BASE, Action.CHANGE),  # older and lacking it: applied as usual
        ("0.8.0", BASE.replace("# line 10\n", SCALE_1), Action.NOTHING),  # older, applied already
    ],
    ids=["claimed-present", "claimed-present-as-patch", "claimed-missing", "older-upstream-form", "older", "applied"],
)
def test_applied_upstream_patch_is_judged_by_version_and_upstream_check(
    series: Series, tmp_path: Path, version: str, content: str, expected: Action
) -> None:
    """Applied-Upstream at or below the version: SKIP when every Upstream-Check matches, else FAIL upstream_missing;
    below it: SKIP only when the checks match and the patch neither applies nor reverts, else judged as usual."""
    tree = make_repo(tmp_path / "tree", {CORE: content})

    (step,) = plan_series(tree, [series.upstream], version=version)

    assert step.action is expected
    assert step.upstream_missing == (expected is Action.FAIL)
    if expected is Action.SKIP:
        assert step.upstream is not None and step.upstream.since == "0.9.0" and step.upstream.present


def test_unexplained_changes_ignores_exactly_what_the_applied_patches_did(series: Series, tree: Path) -> None:
    """Uncommitted changes that are HEAD plus the applied patches are explained; anything more or else is not."""
    for patch in (series.first, series.second):
        assert gitops.apply_patch(tree, patch.path).ok
    (tree / "notes.txt").write_text("mine\n")
    work_tree = worktree(tree)
    dirty = gitops.status_paths(work_tree)
    assert sorted(dirty) == [CORE, "notes.txt", "tests/test_scale.py"]
    both = [series.first, series.second]

    assert unexplained_changes(work_tree, dirty, both) == ["notes.txt"]
    assert unexplained_changes(work_tree, dirty, [series.first]) == [CORE, "notes.txt"]
    assert unexplained_changes(work_tree, dirty, []) == sorted(dirty)

    (tree / CORE).write_text((tree / CORE).read_text() + "# mine too\n")
    assert unexplained_changes(work_tree, dirty, both) == [CORE, "notes.txt"]


def test_unexplained_changes_counts_everything_when_the_patches_do_not_rebuild(series: Series, tree: Path) -> None:
    """When HEAD plus the applied patches cannot be rebuilt (0002 without 0001), no dirty path is explained."""
    for patch in (series.first, series.second):
        assert gitops.apply_patch(tree, patch.path).ok
    work_tree = worktree(tree)
    dirty = sorted(gitops.status_paths(work_tree))

    assert unexplained_changes(work_tree, dirty, [series.second]) == dirty
    assert unexplained_changes(work_tree, [], [series.second]) == []
