"""A patch that upstream merged is recognised by the tree's content, not only by its version number.

Invariants, on fake verl trees and a fake series whose patch says ``Applied-Upstream: 0.9.0`` and how to recognise
its change (``Upstream-Check: <path>: <regex>`` lines):

- a tree at or past 0.9.0 whose content matches every check: the patch is skipped with
  ``skipped: in upstream since 0.9.0 (verl 0.9.x has it: <file> matches /<regex>/, ...)``, in every mode
  (apply, ``--check``, ``--reverse``, ``--3way``), the tree is not touched, exit 0, and the regression tests still
  run on it expecting the fix;
- a tree at or past 0.9.0 whose content does not match: exit 3 naming the patch, the version and the check that
  failed; nothing changes and no test runs;
- a tree below 0.9.0 that has upstream's form of the change (a checkout of upstream's main): skipped as
  ``already upstream (content)``, even where a 3-way merge would have applied it a second time;
- a tree below 0.9.0 without it (the backport's target): the patch applies, is then "already applied", and
  reverts, as before;
- a malformed ``Upstream-Check`` line is bad input (exit 2) naming the patch.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from patchset_fakes import (
    UPSTREAM_CHECKS,
    UPSTREAM_MERGED_PATCH,
    UPSTREAM_SCALE,
    Case,
    git,
    make_repo,
    make_upstream_merged_patches,
    run_fault,
    tree_state,
    verl_files,
    write_files,
)

from patchset.cli import main
from patchset.series.model import UpstreamCheck, read_patch

MATCHES = ", ".join(f"{path} matches /{pattern}/" for path, pattern in UPSTREAM_CHECKS)


@pytest.fixture
def patches(tmp_path: Path) -> Path:
    return make_upstream_merged_patches(tmp_path / "patches")


def _apply(capsys: pytest.CaptureFixture[str], patches: Path, tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    code = main(["apply", "--patches-dir", str(patches), "--cache", str(tmp_path / "cache"), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _upstream_tree(tmp_path: Path, version: str) -> Path:
    """A verl checkout at ``version`` with upstream's form of the change, committed on top of the vanilla tree
    (so its repository has the blobs the patch was made from, and a 3-way merge is possible)."""
    tree = make_repo(tmp_path / f"verl-{version}", verl_files(version))
    write_files(tree, verl_files(version, upstream_fix=True))
    git(tree, "commit", "-qam", "upstream: add scale")
    return tree


def test_patch_header_declares_its_upstream_checks(patches):
    patch = read_patch(patches / "verl" / UPSTREAM_MERGED_PATCH)

    assert patch.upstream_since == "0.9.0"
    assert patch.upstream_checks == tuple(UpstreamCheck(path, pattern) for path, pattern in UPSTREAM_CHECKS)
    assert "Upstream-Check" not in patch.fields


@pytest.mark.parametrize("version", ["0.9.0", "0.9.1"])
def test_tree_with_the_change_upstream_skips_the_patch_and_still_runs_the_tests(
    capsys, patches, tmp_path, regression_calls, version
):
    tree = _upstream_tree(tmp_path, version)
    before = tree_state(tree)

    code, out, err = _apply(capsys, patches, tmp_path, str(tree))

    assert code == 0, err
    assert f"{UPSTREAM_MERGED_PATCH} skipped: in upstream since 0.9.0 (verl {version} has it: {MATCHES})" in out
    assert f"verl {version} at {tree}: 0 applied, 0 already applied, 1 skipped" in out
    assert tree_state(tree) == before
    assert regression_calls == [({"verl": tree.resolve()}, "fixed")]


@pytest.mark.parametrize("mode", [["--check"], ["--reverse"], ["--3way"], ["--check", "--reverse"]], ids=" ".join)
def test_tree_with_the_change_upstream_is_skipped_in_every_mode(capsys, patches, tmp_path, regression_calls, mode):
    tree = _upstream_tree(tmp_path, "0.9.1")
    before = tree_state(tree)

    code, out, err = _apply(capsys, patches, tmp_path, *mode, "--no-test", str(tree))

    assert code == 0, err
    assert f"{UPSTREAM_MERGED_PATCH} skipped: in upstream since 0.9.0 (verl 0.9.1 has it: {MATCHES})" in out
    assert tree_state(tree) == before


@pytest.mark.parametrize(
    ("case", "checks", "lacks"),
    [
        pytest.param(
            "content lacks the change",
            UPSTREAM_CHECKS,
            r"verl/trainer/ppo/core_algos.py does not match /^def scale\(x\b/",
            id="content-lacks-it",
        ),
        pytest.param(
            "checked file is missing",
            (*UPSTREAM_CHECKS, ("verl/trainer/ppo/scale.py", "def scale")),
            "verl/trainer/ppo/scale.py does not exist",
            id="file-missing",
        ),
    ],
)
def test_version_that_claims_the_change_without_the_content_is_refused(
    capsys, faults, tmp_path, regression_calls, case, checks, lacks
):
    patches = make_upstream_merged_patches(tmp_path / "patches", checks)
    upstream_fix = case != "content lacks the change"
    tree = make_repo(tmp_path / "verl-0.9.1", verl_files("0.9.1", upstream_fix=upstream_fix))
    argv = ["apply", "--patches-dir", str(patches), "--cache", str(tmp_path / "cache"), str(tree)]

    error = run_fault(
        faults, capsys, f"Applied-Upstream version without the content: {case}", Case(argv, [tree], 3, [])
    )

    assert f"{UPSTREAM_MERGED_PATCH} on {tree}: verl 0.9.1 is at or past 0.9.0" in error
    assert f"but its content lacks it: {lacks}" in error
    assert "Upstream-Check" in error and "nothing was changed" in error
    assert regression_calls == []


def test_version_that_claims_the_change_without_the_content_fails_the_dry_run_too(capsys, patches, tmp_path):
    tree = make_repo(tmp_path / "verl-0.9.1", verl_files("0.9.1"))

    code, out, err = _apply(capsys, patches, tmp_path, "--check", str(tree))

    assert code == 3
    assert f"{UPSTREAM_MERGED_PATCH}: verl 0.9.1 is at or past 0.9.0" in out
    assert "content lacks it" in err


@pytest.mark.parametrize("mode", [[], ["--3way"]], ids=["plain", "3way"])
def test_older_tree_that_has_the_change_is_skipped_by_content(capsys, patches, tmp_path, regression_calls, mode):
    tree = _upstream_tree(tmp_path, "0.8.0")  # e.g. upstream's main before the release that ships it
    before = tree_state(tree)

    code, out, err = _apply(capsys, patches, tmp_path, *mode, str(tree))

    assert code == 0, err
    assert f"{UPSTREAM_MERGED_PATCH} skipped: already upstream (content), verl 0.8.0 has it: {MATCHES}" in out
    assert tree_state(tree) == before
    assert (tree / "verl/trainer/ppo/core_algos.py").read_text().count("def scale(") == 1
    assert UPSTREAM_SCALE in (tree / "verl/trainer/ppo/core_algos.py").read_text()
    assert regression_calls == [({"verl": tree.resolve()}, "fixed")]


def test_backport_target_still_applies_then_is_already_applied_then_reverts(capsys, patches, tmp_path):
    tree = make_repo(tmp_path / "verl-0.8.0", verl_files("0.8.0"))
    before = tree_state(tree)

    applied = _apply(capsys, patches, tmp_path, "--no-test", str(tree))
    again = _apply(capsys, patches, tmp_path, "--no-test", str(tree))
    reverted = _apply(capsys, patches, tmp_path, str(tree), "--reverse")

    assert applied[0] == 0 and "1 applied, 0 already applied" in applied[1]
    assert again[0] == 0 and f"{UPSTREAM_MERGED_PATCH} already applied" in again[1]
    assert reverted[0] == 0 and "1 reverted" in reverted[1]
    assert tree_state(tree) == before


def test_checks_without_a_version_skip_by_content(capsys, tmp_path, regression_calls):
    patches = make_upstream_merged_patches(tmp_path / "patches", since=None)
    tree = _upstream_tree(tmp_path, "0.9.1")

    code, out, err = _apply(capsys, patches, tmp_path, str(tree))

    assert code == 0, err
    assert f"{UPSTREAM_MERGED_PATCH} skipped: already upstream (content), verl 0.9.1 has it: {MATCHES}" in out


@pytest.mark.parametrize(
    ("case", "check", "names"),
    [
        pytest.param("no expression", ("verl/trainer/ppo/core_algos.py", ""), "names no file", id="no-regex"),
        pytest.param("no file", ("", "def scale"), "names no file or no expression", id="no-file"),
        pytest.param("bad expression", ("verl/trainer/ppo/core_algos.py", "def scale("), "does not compile", id="bad"),
        pytest.param("path outside", ("../core_algos.py", "def scale"), "must be a path inside", id="outside"),
    ],
)
def test_malformed_upstream_check_is_bad_input(capsys, faults, tmp_path, case, check, names):
    patches = make_upstream_merged_patches(tmp_path / "patches", (check,))
    tree = make_repo(tmp_path / "verl-0.9.1", verl_files("0.9.1", upstream_fix=True))
    argv = ["apply", "--patches-dir", str(patches), "--cache", str(tmp_path / "cache"), str(tree)]

    error = run_fault(faults, capsys, f"malformed Upstream-Check: {case}", Case(argv, [tree, patches], 2, []))

    assert UPSTREAM_MERGED_PATCH in error and "Upstream-Check" in error and names in error
