"""``apply`` on a user's checkout: every patch is checked in sequence before any is applied; a run either applies
the whole series or leaves the tree byte for byte as it was; re-running and reversing are exact; bad input is
exit 2 (a release no pin names too, but ``--check`` reports on it), a patch that does not apply exit 3."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from patchset_fakes import VERL_PATCH_1, VERL_PATCH_2, World, git, make_repo, tree_digest

from patchset.apply.job import ApplyOptions, run_apply
from patchset.cli import main
from patchset.plumbing import gitops
from patchset.plumbing.errors import BadInput
from patchset.plumbing.signals import Guard
from patchset.plumbing.ui import Console
from patchset.upstreams.workspace import resolve_workspace

CORE = "verl/trainer/ppo/core_algos.py"


def run(capsys: pytest.CaptureFixture[str], world: World, *argv: str) -> tuple[int, str, str]:
    code = main(world.args("--no-test", *argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_apply_patches_work_tree_only_patch_by_patch(capsys, world):
    head = git(world.verl, "rev-parse", "HEAD")

    code, out, err = run(capsys, world, str(world.verl))

    assert (code, err) == (0, "")
    assert f"* Applying {VERL_PATCH_1} (1/2)" in out
    assert f"* Applying {VERL_PATCH_2} (2/2)" in out
    assert f"verl 0.8.0 at {world.verl}: 2 applied, 0 already applied" in out
    assert "return x * 2" in (world.verl / CORE).read_text()
    assert (world.verl / "tests/trainer/ppo/test_scale_on_cpu.py").is_file()
    assert git(world.verl, "rev-parse", "HEAD") == head
    assert git(world.verl, "diff", "--cached", "--name-only") == ""


def test_later_patch_depending_on_earlier_one_is_checked_in_sequence(capsys, world):
    second = world.patches / "verl" / VERL_PATCH_2
    assert not gitops.apply_patch(world.verl, second, check=True).ok  # alone, 0002 cannot apply

    code, out, _ = run(capsys, world, "--check", str(world.verl))

    assert code == 0
    assert f"* Would apply {VERL_PATCH_2} (2/2)" in out


def test_reapply_reports_already_applied_and_changes_nothing(capsys, world):
    assert run(capsys, world, str(world.verl))[0] == 0
    before = tree_digest(world.verl)

    code, out, err = run(capsys, world, str(world.verl))

    assert (code, err) == (0, "")
    assert f"* {VERL_PATCH_1} already applied" in out
    assert f"* {VERL_PATCH_2} already applied" in out
    assert "0 applied, 2 already applied" in out
    assert tree_digest(world.verl) == before


def test_check_on_fresh_tree_says_would_apply_and_touches_nothing(capsys, world):
    before = tree_digest(world.verl)

    code, out, _ = run(capsys, world, "--check", str(world.verl))

    assert code == 0
    assert f"* Would apply {VERL_PATCH_1} (1/2)" in out
    assert "2 would apply, 0 already applied" in out
    assert tree_digest(world.verl) == before
    assert git(world.verl, "status", "--porcelain") == ""


def test_check_on_patched_tree_says_already_applied(capsys, world):
    run(capsys, world, str(world.verl))
    before = tree_digest(world.verl)

    code, out, _ = run(capsys, world, "--check", str(world.verl))

    assert code == 0
    assert "0 would apply, 2 already applied" in out
    assert tree_digest(world.verl) == before


def test_reverse_restores_tree_byte_for_byte(capsys, world):
    pristine = tree_digest(world.verl)
    run(capsys, world, str(world.verl))
    assert tree_digest(world.verl) != pristine

    code, out, err = run(capsys, world, "--reverse", str(world.verl))

    assert (code, err) == (0, "")
    assert out.index(f"* Reverting {VERL_PATCH_2} (2/2)") < out.index(f"* Reverting {VERL_PATCH_1} (1/2)")
    assert "2 reverted, 0 not applied" in out
    assert tree_digest(world.verl) == pristine
    assert git(world.verl, "status", "--porcelain", "--untracked-files=all") == ""


def test_reverse_on_unpatched_tree_reports_not_applied_and_changes_nothing(capsys, world):
    before = tree_digest(world.verl)

    code, out, _ = run(capsys, world, "--reverse", str(world.verl))

    assert code == 0
    assert f"* {VERL_PATCH_1} not applied; skipping" in out
    assert tree_digest(world.verl) == before


def test_partly_patched_tree_gets_the_rest_without_dirty_refusal(capsys, world):
    assert gitops.apply_patch(world.verl, world.patches / "verl" / VERL_PATCH_1).ok  # core_algos.py now dirty

    code, out, err = run(capsys, world, str(world.verl))

    assert (code, err) == (0, "")
    assert f"* {VERL_PATCH_1} already applied" in out
    assert f"* Applying {VERL_PATCH_2} (2/2)" in out


def test_trinity_tree_gets_its_own_series(capsys, world):
    code, out, _ = run(capsys, world, str(world.trinity))

    assert code == 0
    assert f"trinity-rft 0.6.0 at {world.trinity}: 1 applied, 0 already applied" in out
    assert "weight(x)" in (world.trinity / "trinity/trainer/verl/losses.py").read_text()


def test_patch_applied_upstream_is_skipped_on_that_version(capsys, world):
    init = world.trinity / "trinity/__init__.py"
    init.write_text(init.read_text().replace("0.6.0", "0.7.0"))
    git(world.trinity, "commit", "-qam", "0.7.0")
    before = tree_digest(world.trinity)

    code, out, _ = run(capsys, world, str(world.trinity))

    assert code == 0
    assert "skipped: in upstream since 0.7.0" in out
    assert "0 applied, 0 already applied, 1 skipped" in out
    assert tree_digest(world.trinity) == before


def test_tree_in_subdirectory_of_a_repository_is_patched_and_reversed(capsys, world, tmp_path):
    mono = tmp_path / "mono"
    shutil.copytree(world.verl, mono / "vendor" / "verl", ignore=shutil.ignore_patterns(".git"))
    make_repo(mono / "other", {"x.txt": "x\n"})
    shutil.rmtree(mono / "other" / ".git")
    git(mono, "init", "-q")
    git(mono, "add", "-A")
    git(mono, "commit", "-qm", "mono")
    pristine = tree_digest(mono)
    sub = mono / "vendor" / "verl"

    assert run(capsys, world, str(sub))[0] == 0
    assert "return x * 2" in (sub / CORE).read_text()
    assert run(capsys, world, "--reverse", str(sub))[0] == 0
    assert tree_digest(mono) == pristine


@pytest.mark.parametrize("content", [None, {"setup.py": "print('hi')\n"}])
def test_tree_that_is_not_verl_or_trinity_exits_2(capsys, world, tmp_path, content):
    other = make_repo(tmp_path / "other", content or {"README": "x\n"})

    code, _, err = run(capsys, world, str(other))

    assert code == 2
    assert err == (
        f"error: {other} is not a verl or Trinity-RFT checkout (no verl/version/version or trinity/__init__.py)\n"
    )


def test_unknown_version_exits_2_naming_path_version_and_supported(capsys, world):
    (world.verl / "verl/version/version").write_text("0.7.1\n")
    git(world.verl, "commit", "-qam", "0.7.1")

    code, _, err = run(capsys, world, str(world.verl))

    assert code == 2
    assert err.startswith("error: ")
    assert str(world.verl) in err and "0.7.1" in err and "supported: 0.8.0, 0.9.0" in err
    assert err.count("\n") == 1


def test_companion_version_is_refused_saying_it_is_only_tested_beside(capsys, world):
    toml = world.patches / "upstreams.toml"
    companion = '[[upstream]]\nkey = "verl"\nname = "verl"\nversion = "0.7.1"\nsdist_sha256 = "{}"\n'.format("0" * 64)
    companion += 'repository = "https://example.invalid/repo"\ntag = "v0.7.1"\nseries = "verl"\n'
    toml.write_text(
        toml.read_text() + "\n" + companion + 'default = false\ncompanion_for = "trinity"\ntarget = false\n'
    )
    (world.verl / "verl/version/version").write_text("0.7.1\n")
    git(world.verl, "commit", "-qam", "0.7.1")

    code, _, err = run(capsys, world, str(world.verl))

    assert code == 2
    assert "verl 0.7.1, which this patchset pins only to test trinity trees beside it" in err
    assert "the verl series does not target it (supported: 0.8.0, 0.9.0)" in err and "--force-version" in err


def test_companion_that_is_also_a_target_applies_its_own_series(capsys, world):
    """verl 0.7.1: Trinity is tested beside it as released, and its own series (a folder of its own) applies."""
    toml = world.patches / "upstreams.toml"
    companion = '[[upstream]]\nkey = "verl"\nname = "verl"\nversion = "0.7.1"\nsdist_sha256 = "{}"\n'.format("0" * 64)
    companion += 'repository = "https://example.invalid/repo"\ntag = "v0.7.1"\nseries = "verl-0.7"\n'
    toml.write_text(toml.read_text() + "\n" + companion + 'default = false\ncompanion_for = "trinity"\n')
    shutil.copytree(world.patches / "verl", world.patches / "verl-0.7")
    (world.verl / "verl/version/version").write_text("0.7.1\n")
    git(world.verl, "commit", "-qam", "0.7.1")

    code, out, err = run(capsys, world, str(world.verl))

    assert (code, err) == (0, "")
    assert "verl 0.7.1 at" in out and "2 applied" in out


def test_force_version_tries_the_series_of_the_same_release_line(capsys, world):
    """verl 0.7.2 (unpinned) beside a pinned 0.7.1 with a series of its own: --force-version tries that series, not
    the default pin's."""
    toml = world.patches / "upstreams.toml"
    line = '[[upstream]]\nkey = "verl"\nname = "verl"\nversion = "0.7.1"\nsdist_sha256 = "{}"\n'.format("0" * 64)
    line += 'repository = "https://example.invalid/repo"\ntag = "v0.7.1"\nseries = "verl-0.7"\ndefault = false\n'
    toml.write_text(toml.read_text() + "\n" + line)
    shutil.copytree(world.patches / "verl", world.patches / "verl-0.7")
    (world.verl / "verl/version/version").write_text("0.7.2\n")
    git(world.verl, "commit", "-qam", "0.7.2")

    code, out, err = run(capsys, world, "--force-version", str(world.verl))

    assert code == 0 and "verl-0.7 series: trying the series anyway (--force-version)" in err
    assert "verl 0.7.2 at" in out and "2 applied" in out


def test_force_version_applies_the_series_with_a_warning(capsys, world):
    (world.verl / "verl/version/version").write_text("0.8.1.dev0\n")
    git(world.verl, "commit", "-qam", "dev")

    code, out, err = run(capsys, world, "--force-version", str(world.verl))

    assert code == 0
    assert err.startswith("warning: ") and "0.8.1.dev0" in err
    assert "verl 0.8.1.dev0 at" in out and "2 applied" in out


def test_unpinned_release_is_refused_but_check_reports_on_it(capsys, world):
    (world.verl / "verl/version/version").write_text("0.9.2\n")
    git(world.verl, "commit", "-qam", "a release no pin names")
    before = tree_digest(world.verl)

    refused, _, err = run(capsys, world, str(world.verl))
    checked, out, warned = run(capsys, world, "--check", str(world.verl))

    assert refused == 2 and "run --check to see how the verl series fares on it" in err
    assert checked == 0 and "verl series: reporting how it fares (--check)" in warned
    assert f"* Would apply {VERL_PATCH_1} (1/2)" in out and "verl 0.9.2 at" in out
    assert tree_digest(world.verl) == before


def test_dirty_touched_file_exits_2_naming_it_and_changes_nothing(capsys, world):
    core = world.verl / CORE
    core.write_text(core.read_text().replace("# tail 9\n", "# my own edit\n"))
    before = tree_digest(world.verl)

    code, _, err = run(capsys, world, str(world.verl))

    assert code == 2
    assert CORE in err and "--allow-dirty" in err
    assert tree_digest(world.verl) == before


def test_allow_dirty_patches_on_top_of_local_edits_and_keeps_them(capsys, world):
    core = world.verl / CORE
    core.write_text(core.read_text().replace("# tail 9\n", "# my own edit\n"))

    code, out, err = run(capsys, world, "--allow-dirty", str(world.verl))

    assert code == 0
    assert "warning: " in err and CORE in err
    assert "# my own edit" in core.read_text() and "return x * 2" in core.read_text()


def test_uncommitted_change_elsewhere_is_left_alone_and_mentioned(capsys, world):
    (world.verl / "README.md").write_text("my notes\n")

    code, out, _ = run(capsys, world, str(world.verl))

    assert code == 0
    assert "Leaving 1 other uncommitted change(s)" in out
    assert (world.verl / "README.md").read_text() == "my notes\n"


def test_plain_directory_without_git_exits_2(capsys, world, tmp_path):
    plain = tmp_path / "plain"
    shutil.copytree(world.verl, plain, ignore=shutil.ignore_patterns(".git"))

    code, _, err = run(capsys, world, str(plain))

    assert code == 2
    assert "is not a git checkout" in err and "git init" in err


def _series(world: World, text: str) -> Path:
    series = world.patches / "verl" / "series"
    series.write_text(text)
    return series


def _corrupt_first_patch(world: World) -> str:
    patch = world.patches / "verl" / VERL_PATCH_1
    patch.write_text(patch.read_text().replace("@@ -8,6 +8,8 @@", "@@ -8,6 +8,30 @@", 1))
    return "not a valid patch"


@pytest.mark.parametrize(
    ("breakage", "expected"),
    [
        ("missing", "0003-missing.patch is listed but"),
        ("duplicate", f"{VERL_PATCH_1} is listed twice"),
        ("corrupt", "not a valid patch"),
    ],
)
def test_bad_series_or_patch_exits_2_naming_it(capsys, world, breakage, expected):
    if breakage == "missing":
        _series(world, f"{VERL_PATCH_1}\n{VERL_PATCH_2}\n0003-missing.patch\n")
    elif breakage == "duplicate":
        _series(world, f"{VERL_PATCH_1}\n{VERL_PATCH_2}\n{VERL_PATCH_1}\n")
    else:
        _corrupt_first_patch(world)
    before = tree_digest(world.verl)

    code, _, err = run(capsys, world, str(world.verl))

    assert code == 2
    assert expected in err
    assert breakage == "corrupt" or str(world.patches / "verl" / "series") in err
    assert tree_digest(world.verl) == before


def test_drifted_file_exits_3_naming_patch_file_and_hunk_and_keeps_tree(capsys, world):
    core = world.verl / CORE
    core.write_text(core.read_text().replace("# line 9\n", "# line nine\n"))
    git(world.verl, "commit", "-qam", "drift")
    before = tree_digest(world.verl)

    code, _, err = run(capsys, world, str(world.verl))

    assert code == 3
    assert err.startswith(f"error: {VERL_PATCH_1} does not apply to verl 0.8.0 at {world.verl}: {CORE}, hunk @@ -8,6")
    assert "nothing was changed" in err
    assert tree_digest(world.verl) == before


def test_failure_of_a_later_patch_applies_nothing(capsys, world):
    second = world.patches / "verl" / VERL_PATCH_2
    second.write_text(second.read_text().replace(" def scale(x):", " def scale(y):"))
    before = tree_digest(world.verl)

    code, out, err = run(capsys, world, str(world.verl))

    assert code == 3
    assert err.startswith(f"error: {VERL_PATCH_2} does not apply")
    assert "Applying" not in out
    assert tree_digest(world.verl) == before


def test_check_reports_patch_that_does_not_apply_and_exits_3(capsys, world):
    second = world.patches / "verl" / VERL_PATCH_2
    second.write_text(second.read_text().replace(" def scale(x):", " def scale(y):"))

    code, out, err = run(capsys, world, "--check", str(world.verl))

    assert code == 3
    assert f"* Would apply {VERL_PATCH_1} (1/2)" in out
    assert f"* {VERL_PATCH_2} does not apply: {CORE}, hunk @@" in out
    assert "1 would apply, 0 already applied, 1 do not apply" in out
    assert err.startswith(f"error: {VERL_PATCH_2} does not apply")


def test_unexpected_failure_mid_series_rolls_back_earlier_patches(capsys, world, monkeypatch):
    real = gitops.apply_patch

    def flaky(cwd, patch, *, reverse=False, check=False, directory=""):
        if cwd == world.verl and patch.name == VERL_PATCH_2 and not check and not reverse:
            return gitops.ApplyResult(False, f"error: patch failed: {CORE}:11\nerror: {CORE}: patch does not apply")
        return real(cwd, patch, reverse=reverse, check=check, directory=directory)

    monkeypatch.setattr(gitops, "apply_patch", flaky)
    before = tree_digest(world.verl)

    code, out, err = run(capsys, world, str(world.verl))

    assert code == 3
    assert f"* Rolling back {VERL_PATCH_1}" in out
    assert "rolled back and the tree is as it was" in err
    assert tree_digest(world.verl) == before


def test_two_trees_of_the_same_kind_exit_2(capsys, world, tmp_path):
    other = tmp_path / "verl2"
    shutil.copytree(world.verl, other)

    code, _, err = run(capsys, world, str(world.verl), str(other))

    assert code == 2
    assert "two verl trees" in err


def test_regression_tests_get_the_detected_trees(world, regression_calls):
    assert main(world.args(str(world.verl), str(world.trinity))) == 0
    assert regression_calls == [({"verl": world.verl, "trinity": world.trinity}, "fixed")]


def test_regression_tests_get_only_the_trees_given(world, regression_calls):
    assert main(world.args(str(world.trinity))) == 0
    assert regression_calls == [({"trinity": world.trinity}, "fixed")]


def test_failing_regression_tests_exit_1(capsys, world, monkeypatch):
    from patchset.testenv import regression

    monkeypatch.setattr(regression, "run_regression_tests", lambda trees, run, workspace, console=None: 5)

    code = main(world.args(str(world.verl)))

    captured = capsys.readouterr()
    assert code == 1
    assert "regression tests failed on verl at " in captured.err and "pytest exit status 5; see " in captured.err
    last = captured.out.splitlines()[-3:]
    assert last[0].endswith(" applied, 0 already applied") and last[1].startswith("Regression tests FAILED: ")
    assert last[-1].startswith("Full output: ") and "apply-" in last[-1]


def test_the_run_ends_with_what_was_applied_what_the_tests_found_and_the_next_command(capsys, world, monkeypatch):
    """The result a user wants in the last ten lines: pytest's own output goes to the log file named there."""
    from patchset.testenv import regression

    def passing(trees, run, workspace, console=None):  # type: ignore[no-untyped-def]
        run.output.write("pytest's own output\n")
        (run.junit_dir / "run-0.xml").write_text(
            '<testsuites><testsuite tests="2" skipped="1" failures="0" errors="0"><testcase classname="t" name="a"/>'
            '<testcase classname="t" name="b">'
            '<skipped message="only a dependency"/></testcase></testsuite></testsuites>'
        )
        return 0

    monkeypatch.setattr(regression, "run_regression_tests", passing)

    assert main(world.args(str(world.verl))) == 0

    last = capsys.readouterr().out.splitlines()
    result = last[last.index("--- result") :]
    assert len(result) <= 10 and "pytest's own output" not in "\n".join(last)
    assert result[2:4] == ["Regression tests passed: 1 passed, 0 failed, 1 skipped", "  1 skipped: only a dependency"]
    log = Path(result[4].removeprefix("Full output: "))
    assert log.read_text() == "pytest's own output\n"
    assert result[5].startswith("Next: scripts/test.sh")


@pytest.mark.parametrize("flags", [("--no-test",), ("--check",), ("--reverse",)])
def test_regression_tests_do_not_run_for(world, regression_calls, flags):
    assert main(["apply", "--patches-dir", str(world.patches), *flags, str(world.verl)]) == 0
    assert regression_calls == []


def test_check_refuses_dirty_touched_file_like_apply(capsys, world):
    core = world.verl / CORE
    core.write_text(core.read_text() + "# mine\n")

    code, out, err = run(capsys, world, "--check", str(world.verl))

    assert code == 2
    assert "2 would apply" in out
    assert CORE in err


def test_reverse_refuses_local_edit_on_top_of_patched_file(capsys, world):
    run(capsys, world, str(world.verl))
    core = world.verl / CORE
    core.write_text(core.read_text() + "# mine\n")
    before = tree_digest(world.verl)

    code, _, err = run(capsys, world, "--reverse", str(world.verl))

    assert code == 2
    assert CORE in err
    assert tree_digest(world.verl) == before


def job(world: World, *paths: Path, **flags: bool) -> int:
    """``run_apply`` called as a program would, with plain arguments: no command line, no argparse."""
    workspace = resolve_workspace(world.patches, str(world.cache), {})
    paths_given = [str(path) for path in paths]
    options = ApplyOptions(**flags)
    return run_apply(paths_given, workspace, options, console=Console(quiet=False), guard=Guard(), command_line="test")


def test_the_apply_job_checks_a_tree_from_plain_arguments(capsys, world):
    before = tree_digest(world.verl)

    assert job(world, world.verl, check=True) == 0

    assert f"* Would apply {VERL_PATCH_2} (2/2)" in capsys.readouterr().out
    assert tree_digest(world.verl) == before


def test_the_apply_job_raises_its_refusal_and_changes_nothing(world):
    core = world.verl / CORE
    core.write_text(core.read_text() + "# mine\n")
    before = tree_digest(world.verl)

    with pytest.raises(BadInput, match=f"has uncommitted changes in {CORE}, which the patches change"):
        job(world, world.verl, no_test=True)

    assert tree_digest(world.verl) == before
