"""Fault injection on the pinned checkouts: every bad input leaves every tree exactly as it was, and says what and
where.

Invariant, for each case: the command exits with its documented code, never 0 (that would be a silent success);
its error is one line that names the path, patch or file concerned (and the hunk, for a patch that does not
apply) and the next step; and ``tree_state`` of every tree involved (every file, folder and mode, untracked and
ignored files, .git byte for byte, HEAD, status, index, branches, stashes, refs) is identical before and after.
Cases run on throwaway copies of the pinned vanilla checkouts with the real series, or with fake series through
``--patches-dir`` (a second patch, a corrupt patch, a bad series file). Each case is recorded in the fault registry
(conftest.py), whose summary closes the run: ``faults tried: N, trees intact: N, silent successes: 0``.

The successes that guard the same invariants from the other side (already applied is never reversed, a partly
applied series is finished and reported patch by patch, ``--3way`` only when asked and without touching the
index, paths with spaces and unicode, a read-only tree with nothing to do) close the module.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from patchset_fakes import DEPENDENT_PATCH, INDEPENDENT_PATCH, REPO_ROOT, Case, git, run_fault, tree_state

from patchset.cli import main
from patchset.plumbing import gitops
from patchset.series.model import load_series

VERL_PATCH = "0001-trainer-critic-value-loss-global-normalization.patch"
TRINITY_PATCH = "0001-trainer-policy-loss-global-normalization.patch"
CORE = "verl/trainer/ppo/core_algos.py"
LOSSES = "trinity/trainer/verl/losses.py"
NEW_TEST = "tests/trainer/ppo/test_value_loss_global_normalization_on_cpu.py"
PARAMS_HUNK = "@@ -2088,6 +2088,10 @@ def compute_value_loss("
AGG_HUNK = "@@ -2118,7 +2132,16 @@ def compute_value_loss("
CONTEXT_LINE = "    response_mask: torch.Tensor,\n    cliprange_value: float,\n"  # context of PARAMS_HUNK only
REMOVED_LINE = "    vf_loss = 0.5 * agg_loss(loss_mat=clipped_vf_losses"  # a line the patch replaces


@dataclass(frozen=True)
class Env:
    pinned: Callable[..., Path]
    series: dict[str, Path]
    tmp: Path


def _apply(*argv: str | Path) -> list[str]:
    return ["apply", "--no-test", *map(str, argv)]


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def _commit(tree: Path, message: str = "local change") -> None:
    git(tree, "commit", "-qam", message)


def _drift(tree: Path, old: str, new: str) -> Path:
    _edit(tree / CORE, old, new)
    _commit(tree, "drift")
    return tree


def _resolvable_drift(env: Env) -> Path:
    return _drift(env.pinned("verl"), CONTEXT_LINE, CONTEXT_LINE.replace("Tensor,", "Tensor,  # (bs, response_length)"))


def _conflicting_drift(env: Env) -> Path:
    return _drift(env.pinned("verl"), REMOVED_LINE, REMOVED_LINE.replace("0.5", "0.25"))


def _patches_copy(env: Env, source: Path | None = None) -> Path:
    return shutil.copytree(source or REPO_ROOT / "patches", env.tmp / "patches-copy")


def _with_series(env: Env, text: str) -> tuple[Path, Path]:
    patches = _patches_copy(env)
    (patches / "verl" / "series").write_text(text)
    return patches, patches / "verl" / "series"


def _damaged_patch(env: Env, damage: Callable[[bytes], bytes]) -> Case:
    patches = _patches_copy(env)
    patch = patches / "verl" / VERL_PATCH
    patch.write_bytes(damage(patch.read_bytes()))
    tree = env.pinned("verl")
    return Case(_apply("--patches-dir", patches, tree), [tree, patches], 2, [str(patch), "is not a valid patch"])


def _read_only(tree: Path, paths: list[Path]) -> Callable[[], None]:
    modes = {path: stat.S_IMODE(path.lstat().st_mode) for path in paths}
    for path in paths:
        path.chmod(modes[path] & ~0o222)
    return lambda: [path.chmod(mode) for path, mode in modes.items()]


# --- the cases --------------------------------------------------------------------------------------------


def case_not_verl_or_trinity(env: Env) -> Case:
    tree = env.pinned("verl")
    git(tree, "rm", "-q", "verl/version/version")
    _commit(tree)
    return Case(_apply(tree), [tree], 2, [str(tree), "is not a verl or Trinity-RFT checkout"])


def case_path_does_not_exist(env: Env) -> Case:
    missing = env.tmp / "no such tree"
    return Case(_apply(missing), [env.tmp / "trees", missing], 2, [str(missing), "does not exist"])


def case_path_is_a_file(env: Env) -> Case:
    file = env.tmp / "verl.tar.gz"
    file.write_bytes(b"not a tree")
    return Case(_apply(file), [env.tmp], 2, [str(file), "is not a directory"])


def case_unsupported_verl_version(env: Env) -> Case:
    tree = env.pinned("verl")
    (tree / "verl/version/version").write_text("0.6.1\n")
    _commit(tree)
    supported = "supported: 0.7.0, 0.7.1, 0.8.0, 0.9.0, 0.9.1"
    return Case(_apply(tree), [tree], 2, [str(tree), "verl 0.6.1", supported, "--force-version"])


def case_unsupported_trinity_version(env: Env) -> Case:
    tree = env.pinned("trinity")
    _edit(tree / "trinity/__init__.py", '__version__ = "0.6.0"', '__version__ = "0.5.0"')
    _commit(tree)
    return Case(_apply(tree), [tree], 2, [str(tree), "Trinity-RFT 0.5.0", "supported: 0.6.0", "--force-version"])


def case_dirty_unstaged_edit(env: Env) -> Case:
    tree = env.pinned("verl")
    (tree / CORE).write_text((tree / CORE).read_text() + "# my own edit\n")
    (tree / "README.md").write_text("my notes\n")
    (tree / "notes.txt").write_text("untracked, elsewhere\n")
    names = [str(tree), CORE, "README.md", "notes.txt", "not in the way", "--allow-dirty"]
    return Case(_apply(tree), [tree], 2, names)


def case_dirty_staged_edit(env: Env) -> Case:
    tree = env.pinned("trinity")
    (tree / LOSSES).write_text((tree / LOSSES).read_text() + "# staged edit\n")
    git(tree, "add", LOSSES)
    return Case(_apply(tree), [tree], 2, [str(tree), LOSSES, "commit or stash", "--allow-dirty"])


def case_dirty_untracked_file_the_patch_creates(env: Env) -> Case:
    tree = env.pinned("verl")
    (tree / NEW_TEST).write_text("# my own test\n")
    return Case(_apply(tree), [tree], 2, [str(tree), NEW_TEST, "--allow-dirty"])


def case_dirty_edit_in_a_hunk_with_allow_dirty(env: Env) -> Case:
    tree = env.pinned("verl")
    _edit(tree / CORE, REMOVED_LINE, REMOVED_LINE.replace("0.5", "0.25"))
    names = [VERL_PATCH, str(tree), CORE, AGG_HUNK, "has uncommitted changes", "nothing was changed"]
    return Case(_apply("--allow-dirty", tree), [tree], 3, names)


def case_drift_a_3way_merge_would_resolve(env: Env) -> Case:
    tree = _resolvable_drift(env)
    names = [VERL_PATCH, str(tree), f"{CORE}, hunk {PARAMS_HUNK}", "A 3-way merge would resolve it", "--3way"]
    return Case(_apply(tree), [tree], 3, names)


def case_drift_in_a_tree_whose_path_has_spaces_and_unicode(env: Env) -> Case:
    tree = env.pinned("verl", env.tmp / "my trees" / "vérl 树 0.8")
    _drift(tree, CONTEXT_LINE, CONTEXT_LINE.replace("Tensor,", "Tensor,  # (bs, response_length)"))
    return Case(_apply(tree), [tree], 3, [VERL_PATCH, f"verl 0.8.0 at {tree}: {CORE}, hunk {PARAMS_HUNK}"])


def case_drift_check_says_so_too(env: Env) -> Case:
    tree = _resolvable_drift(env)
    return Case(_apply("--check", tree), [tree], 3, [VERL_PATCH, CORE, PARAMS_HUNK, "--3way"])


def case_drift_a_3way_merge_would_conflict(env: Env) -> Case:
    tree = _conflicting_drift(env)
    names = [VERL_PATCH, f"{CORE}, hunk {AGG_HUNK}", f"would not resolve it either (conflicts in {CORE})"]
    return Case(_apply(tree), [tree], 3, names)


def case_drift_conflicting_even_with_3way(env: Env) -> Case:
    tree = _conflicting_drift(env)
    return Case(_apply("--3way", tree), [tree], 3, [VERL_PATCH, CORE, AGG_HUNK, "would not resolve it either"])


def case_drift_without_the_original_blob(env: Env) -> Case:
    source = _resolvable_drift(env)
    tree = env.tmp / "no-history"
    shutil.copytree(source, tree, ignore=shutil.ignore_patterns(".git"))
    git(tree, "init", "-q")
    git(tree, "add", "-A")
    _commit(tree, "drifted, without the release in its history")
    return Case(_apply(tree), [tree], 3, [VERL_PATCH, CORE, PARAMS_HUNK, "A 3-way merge is not possible"])


def case_reverse_on_a_drifted_tree(env: Env) -> Case:
    tree = _resolvable_drift(env)
    return Case(_apply("--reverse", tree), [tree], 3, [VERL_PATCH, "is neither applied nor applicable", CORE])


def case_3way_with_reverse(env: Env) -> Case:
    tree = env.pinned("verl")
    return Case(_apply("--3way", "--reverse", tree), [tree], 2, ["--3way", "--reverse"])


def case_patch_of_another_upstream(env: Env) -> Case:
    patches = _patches_copy(env)
    shutil.copy(patches / "trinity" / TRINITY_PATCH, patches / "verl" / TRINITY_PATCH)
    (patches / "verl" / "series").write_text(f"{VERL_PATCH}\n{TRINITY_PATCH}\n")
    tree = env.pinned("verl")
    names = [TRINITY_PATCH, str(tree), LOSSES, "[series: 1/2 ", "2/2 "]
    return Case(_apply("--patches-dir", patches, tree), [tree, patches], 3, names)


def case_series_applied_out_of_order(env: Env) -> Case:
    tree = env.pinned("verl")
    assert gitops.apply_patch(tree, env.series["independent"] / "verl" / INDEPENDENT_PATCH).ok
    names = [
        str(tree),
        "applied out of order",
        f"1/2 {VERL_PATCH} not applied",
        f"2/2 {INDEPENDENT_PATCH} applied",
        "--reverse",
    ]
    return Case(_apply("--patches-dir", env.series["independent"], tree), [tree], 2, names)


def case_partly_applied_and_the_rest_drifted(env: Env) -> Case:
    tree = env.pinned("verl")
    _edit(tree / "README.md", "interested in intern", "interested in an intern")
    _commit(tree, "drift in README.md")
    assert gitops.apply_patch(tree, REPO_ROOT / "patches" / "verl" / VERL_PATCH).ok
    names = [DEPENDENT_PATCH, "README.md", f"[series: 1/2 {VERL_PATCH} applied, 2/2 {DEPENDENT_PATCH} does not apply]"]
    return Case(_apply("--patches-dir", env.series["dependent"], tree), [tree], 3, names)


def case_corrupt_hunk_header(env: Env) -> Case:
    return _damaged_patch(env, lambda raw: raw.replace(b"@@ -63,6 +63,10 @@", b"@@ -63,6 +63,30 @@", 1))


def case_truncated_patch(env: Env) -> Case:
    return _damaged_patch(env, lambda raw: raw[: len(raw) // 2])


def case_truncated_at_a_line_end_inside_a_hunk(env: Env) -> Case:
    def cut(raw: bytes) -> bytes:  # after the docstring hunk's header, three context lines and two added lines
        lines = raw.splitlines(keepends=True)
        hunk = next(i for i, line in enumerate(lines) if line.startswith(b"@@ -2107,"))
        return b"".join(lines[: hunk + 6])

    return _damaged_patch(env, cut)


def case_empty_patch_file(env: Env) -> Case:
    return _damaged_patch(env, lambda raw: b"")


def case_patch_without_a_diff(env: Env) -> Case:
    return _damaged_patch(env, lambda raw: raw.partition(b"\ndiff --git ")[0] + b"\n")


def case_series_names_a_missing_patch(env: Env) -> Case:
    patches, series = _with_series(env, f"{VERL_PATCH}\n0002-missing.patch\n")
    tree = env.pinned("verl")
    names = [f"{series}:2", "0002-missing.patch is listed but", "does not exist"]
    return Case(_apply("--patches-dir", patches, tree), [tree, patches], 2, names)


def case_series_lists_a_patch_twice(env: Env) -> Case:
    patches, series = _with_series(env, f"{VERL_PATCH}\n# again\n{VERL_PATCH}\n")
    tree = env.pinned("verl")
    names = [f"{series}:3", f"{VERL_PATCH} is listed twice (first on line 1)"]
    return Case(_apply("--patches-dir", patches, tree), [tree, patches], 2, names)


def case_series_lists_a_patch_twice_spelled_differently(env: Env) -> Case:
    patches, series = _with_series(env, f"{VERL_PATCH}\n./{VERL_PATCH}\n")
    tree = env.pinned("verl")
    names = [f"{series}:2", f"./{VERL_PATCH} is listed twice"]
    return Case(_apply("--patches-dir", patches, tree), [tree, patches], 2, names)


def case_series_lists_no_patch(env: Env) -> Case:
    patches, series = _with_series(env, "# every patch dropped\n")
    tree = env.pinned("verl")
    return Case(_apply("--patches-dir", patches, tree), [tree, patches], 2, [str(series), "lists no patches"])


def case_series_not_utf8(env: Env) -> Case:
    patches, series = _with_series(env, "")
    series.write_bytes(b"\xff\xfe0001\n")
    tree = env.pinned("verl")
    return Case(_apply("--patches-dir", patches, tree), [tree, patches], 2, [str(series), "cannot read"])


def case_read_only_tree(env: Env) -> Case:
    tree = env.pinned("verl")
    paths = [Path(folder) / name for folder, dirs, names in os.walk(tree) for name in dirs + names] + [tree]
    restore = _read_only(tree, [p for p in paths if not p.is_symlink()])
    return Case(_apply(tree), [tree], 2, [str(tree), "is read-only", "chmod -R u+w"], [restore])


def case_read_only_file(env: Env) -> Case:
    tree = env.pinned("verl")
    restore = _read_only(tree, [tree / CORE])
    return Case(_apply(tree), [tree], 2, [str(tree), f"read-only where the patches write: {CORE}"], [restore])


def case_read_only_folder_where_a_file_is_created(env: Env) -> Case:
    tree = env.pinned("verl")
    restore = _read_only(tree, [tree / "tests/trainer/ppo"])
    return Case(_apply(tree), [tree], 2, [str(tree), "tests/trainer/ppo/", "is read-only"], [restore])


def case_not_a_git_checkout(env: Env) -> Case:
    plain = env.tmp / "verl-0.8.0 unpacked"
    shutil.copytree(env.pinned("verl"), plain, ignore=shutil.ignore_patterns(".git"))
    return Case(_apply(plain), [plain], 2, [str(plain), "is not a git checkout", "git init"])


def _inside_another_repository(env: Env, *, ignored: bool) -> Case:
    outer = env.tmp / "home"
    outer.mkdir()
    git(outer, "init", "-q")
    (outer / "dotfiles").write_text("x\n")
    if ignored:
        (outer / ".gitignore").write_text("vendor/\n")
    git(outer, "add", "-A")
    _commit(outer, "home")
    plain = outer / "vendor" / "verl"
    shutil.copytree(env.pinned("verl"), plain, ignore=shutil.ignore_patterns(".git"))
    names = [str(plain), "not tracked", "verl/version/version", "git init"]
    return Case(_apply(plain), [outer], 2, names)


def case_untracked_tree_inside_another_repository(env: Env) -> Case:
    return _inside_another_repository(env, ignored=False)


def case_ignored_tree_inside_another_repository(env: Env) -> Case:
    return _inside_another_repository(env, ignored=True)


def case_two_trees_of_one_kind(env: Env) -> Case:
    first, second = env.pinned("verl"), env.pinned("verl", env.tmp / "second verl")
    return Case(_apply(first, second), [first, second], 2, [str(first), str(second), "two verl trees"])


CASES = {
    name.removeprefix("case_").replace("_", "-"): value for name, value in globals().items() if name[:5] == "case_"
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_refused_naming_it_and_leaves_every_tree_as_it_was(
    case, pinned, fake_series, tmp_path, faults, capsys
):
    spec = CASES[case](Env(pinned, fake_series, tmp_path))
    try:
        run_fault(faults, capsys, case, spec)
    finally:
        for undo in spec.cleanup:
            undo()


def test_patch_failing_after_its_check_rolls_back_every_tree_of_the_run(pinned, faults, capsys, monkeypatch):
    """The check passed, then the real tree refused the second tree's patch: the first tree is restored too."""
    verl, trinity = pinned("verl"), pinned("trinity")
    real = gitops.apply_patch

    def refuse_trinity(cwd, patch, *, reverse=False, check=False, directory=""):
        if Path(cwd) == trinity and not check:
            return gitops.ApplyResult(
                False, f"error: patch failed: {LOSSES}:120\nerror: {LOSSES}: patch does not apply"
            )
        return real(cwd, patch, reverse=reverse, check=check, directory=directory)

    monkeypatch.setattr(gitops, "apply_patch", refuse_trinity)
    spec = Case(_apply(verl, trinity), [verl, trinity], 3, [TRINITY_PATCH, str(trinity), str(verl), "rolled back"])

    error = run_fault(faults, capsys, "apply-fails-after-check", spec)

    assert "after its check passed" in error and "the tree is as it was" in error


# --- the same invariants, from the side of the successes ---------------------------------------------------


def _index_sha(tree: Path) -> str:
    return hashlib.sha256((tree / ".git" / "index").read_bytes()).hexdigest()


def test_committed_patch_is_reported_already_applied_and_never_reversed(pinned, capsys):
    tree = pinned("verl")
    series = load_series(REPO_ROOT / "patches", "verl").patches
    for patch in series:
        assert gitops.apply_patch(tree, patch.path).ok
    git(tree, "add", "-A")
    _commit(tree, "patched and committed")
    before = tree_state(tree)

    assert main(_apply(tree)) == 0
    out = capsys.readouterr().out
    assert all(f"* {patch.name} already applied" in out for patch in series)
    assert main(_apply("--check", tree)) == 0
    assert tree_state(tree) == before


def test_partly_applied_series_is_reported_patch_by_patch_and_finished(pinned, fake_series, capsys):
    tree = pinned("verl")
    pristine = tree_state(tree)
    assert gitops.apply_patch(tree, REPO_ROOT / "patches" / "verl" / VERL_PATCH).ok
    patches = fake_series["dependent"]

    assert main(_apply("--patches-dir", patches, tree)) == 0

    out = capsys.readouterr().out
    state = f"1/2 {VERL_PATCH} applied, 2/2 {DEPENDENT_PATCH} not applied"
    assert f"verl 0.8.0 at {tree}: the series is partly applied ({state}); applying the rest" in out
    assert f"* {VERL_PATCH} already applied" in out and f"* Applying {DEPENDENT_PATCH} (2/2)" in out
    assert main(["apply", "--reverse", "--patches-dir", str(patches), str(tree)]) == 0
    assert tree_state(tree) == pristine


def test_3way_only_when_asked_merges_without_touching_the_index_and_is_then_applied(pinned, capsys):
    tree = _resolvable_drift(Env(pinned, {}, Path()))
    head, index = git(tree, "rev-parse", "HEAD"), _index_sha(tree)

    assert main(_apply("--check", "--3way", tree)) == 0
    verl_patches = len(load_series(REPO_ROOT / "patches", "verl").patches)
    assert f"* Would apply {VERL_PATCH} (1/{verl_patches}) with a 3-way merge" in capsys.readouterr().out
    assert main(_apply("--3way", tree)) == 0

    assert f"{verl_patches} applied (1 by a 3-way merge)" in capsys.readouterr().out
    text = (tree / CORE).read_text()
    assert "# (bs, response_length)" in text and "batch_num_tokens: Optional[int] = None," in text
    assert (tree / NEW_TEST).is_file()
    assert (git(tree, "rev-parse", "HEAD"), _index_sha(tree)) == (head, index)
    assert git(tree, "diff", "--cached", "--name-only") == ""
    merged = tree_state(tree)
    assert main(_apply(tree)) == 0
    assert f"* {VERL_PATCH} already applied (by a 3-way merge)" in capsys.readouterr().out
    assert tree_state(tree) == merged


@pytest.mark.parametrize("where", ["dir with spaces/vérl ü 0.8", "ünïcödé/树/verl"])
def test_tree_paths_with_spaces_and_unicode_apply_reapply_and_reverse(pinned, fake_series, tmp_path, capsys, where):
    tree = pinned("verl", tmp_path / where)
    patches = shutil.copytree(fake_series["dependent"], tmp_path / "patches dir ü")
    pristine = tree_state(tree)

    assert main(_apply("--patches-dir", patches, tree)) == 0
    assert f"verl 0.8.0 at {tree}: 2 applied, 0 already applied" in capsys.readouterr().out
    patched = tree_state(tree)
    assert main(_apply("--patches-dir", patches, tree)) == 0
    assert tree_state(tree) == patched
    assert main(["apply", "--reverse", "--patches-dir", str(patches), str(tree)]) == 0
    assert tree_state(tree) == pristine


def test_read_only_tree_with_nothing_to_do_works(pinned, capsys):
    tree = pinned("trinity")
    series = load_series(REPO_ROOT / "patches", "trinity").patches
    for patch in series:
        assert gitops.apply_patch(tree, patch.path).ok
    paths = [Path(folder) / name for folder, dirs, names in os.walk(tree) for name in dirs + names] + [tree]
    restore = _read_only(tree, [p for p in paths if not p.is_symlink()])
    try:
        before = tree_state(tree)
        assert main(_apply(tree)) == 0
        out = capsys.readouterr().out
        assert all(f"* {patch.name} already applied" in out for patch in series), out
        assert tree_state(tree) == before
    finally:
        restore()
