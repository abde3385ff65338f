"""export-pr on a clone with upstream's history: each group's PR on the branch that takes it.

Invariants: on a checkout that holds the upstream commit a backport names (``Origin: backport, .../commit/<hash>``),
export-pr makes, for every series of the upstream, each ``onto=`` group's branch on that upstream branch: a backport
as ``git cherry-pick -x`` of upstream's commit (upstream's author, the user as committer, git's own "(cherry picked
from commit ...)" and no other trailer), its conflicts resolved by ``pr/<group>.resolution.patch``, followed by the
carried patch's test as the user's commit when upstream's commit adds no test; a new fix as the
patch, authored by the user; a ``carried=`` group is named with its reason and gets no branch. The fix's regression
tests gate a cherry-pick. A checkout without that history (one commit, as made from an sdist) says it cannot and what
to give it (exit 2). A conflict the resolution does not cover stops with exit 3 and makes no branch. The gates are
stubbed here (tests/scripts/test_pr_export.py runs them on the real checkouts): a fake upstream of a few files, well
under ten seconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from patchset_fakes import FORMAT_PATCH, VERL_FILES, git, make_repo, write_files, write_upstreams

from patchset import cli
from patchset.export import branches, pr_export, pr_gates
from patchset.export.pr_gates import Gates, LintResult, Teeth


def main(argv: list[str]) -> int:
    """``python -m patchset export-pr ARGV``."""
    return cli.main(["export-pr", *argv])


FIX = "# line 10\ndef scale(x):\n    return x * 2\n"
TEST_FILE = "tests/trainer/ppo/test_scale_on_cpu.py"
UPSTREAM_AUTHOR = "Upstream Author <upstream@example.invalid>"


def _commit(repo: Path, message: str, author: str | None = None) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message, *(("--author", author) if author else ()))
    return git(repo, "rev-parse", "HEAD").strip()


def _upstream(tmp_path: Path) -> tuple[Path, str]:
    """verl with main and two release branches; main's fix (returned) is in neither, and release/v0.7.1 changed the
    lines around it, so it picks cleanly onto release/v0.8.0 only."""
    repo = make_repo(tmp_path / "upstream", VERL_FILES)
    core = repo / "verl/trainer/ppo/core_algos.py"
    git(repo, "branch", "release/v0.8.0")
    git(repo, "checkout", "-q", "-b", "release/v0.7.1")
    write_files(repo, {"verl/version/version": "0.7.1\n"})
    core.write_text(core.read_text().replace("# line 10\n", "# line 10 (0.7 style)\n"))
    _commit(repo, "[misc] chore: 0.7.1")
    git(repo, "checkout", "-q", "main")
    core.write_text(core.read_text().replace("# line 10\n", FIX))
    fix = _commit(repo, "[algo] fix: scale by two (#1)", UPSTREAM_AUTHOR)
    write_files(repo, {"verl/version/version": "0.10.0.dev\n"})
    _commit(repo, "[misc] chore: 0.10.0.dev")
    return repo, fix


def _patch(work: Path, base: str, edit: tuple[str, str], header: str, dest: Path, tests: bool = False) -> None:
    git(work, "checkout", "-q", "--detach", base)
    core = work / "verl/trainer/ppo/core_algos.py"
    core.write_text(core.read_text().replace(*edit))
    if tests:
        write_files(work, {TEST_FILE: "def test_scale():\n    pass\n"})
    subject = header.split("\n", 1)[0]
    _commit(work, header, "Our Patches <ours@example.invalid>")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(git(work, *FORMAT_PATCH, "-1", "--stdout"))
    git(work, "checkout", "-q", "--detach", base)
    assert subject


def _patches(tmp_path: Path, upstream: Path, fix: str) -> Path:
    """verl (0.8.0): 0001 our backport of ``fix``, 0002 a new fix for main; verl-0.7 (0.7.1): 0001 the backport,
    whose pick conflicts there (its resolution patch resolves it), and 0002 carried."""
    patches, work = tmp_path / "patches", tmp_path / "work"
    git(tmp_path, "clone", "-q", str(upstream), str(work))
    backport = f"[algo] fix: scale by two\n\nOur text of it.\n\nOrigin: backport, https://x.invalid/commit/{fix}"
    new_fix = "[algo] fix: log the scale\n\nA new fix.\n\nForwarded: no"
    _patch(work, "origin/release/v0.8.0", ("# line 10\n", FIX), backport, patches / "verl/0001-algo-scale.patch", True)
    _patch(work, "origin/main", ("# tail 1\n", "# tail 1 logged\n"), new_fix, patches / "verl/0002-algo-log.patch")
    seven = "origin/release/v0.7.1"
    _patch(work, seven, ("# line 10 (0.7 style)\n", FIX), backport, patches / "verl-0.7/0001-algo-scale.patch")
    _patch(work, seven, ("# tail 1\n", "# tail 1 logged\n"), new_fix, patches / "verl-0.7/0002-algo-log.patch")
    for series, onto in (("verl", "release/v0.8.0"), ("verl-0.7", "release/v0.7.1")):
        folder = patches / series
        (folder / "series").write_text("0001-algo-scale.patch\n0002-algo-log.patch\n")
        last = "onto=main" if series == "verl" else "carried=main has not taken it yet"
        (folder / "groups").write_text(f"scale 0001 onto={onto}\nlog 0002 {last}\n")
        write_files(folder, {"pr/scale.md": "[algo] fix: scale by two\n\nBackport.\n", "pr/log.md": f"{new_fix}\n"})
    # the pick onto release/v0.7.1 conflicts on line 10: its resolution is our patch's result there
    git(work, "checkout", "-q", "--detach", seven)
    git(work, "apply", str(patches / "verl-0.7/0001-algo-scale.patch"))
    (patches / "verl-0.7/pr/scale.resolution.patch").write_text(git(work, "diff"))
    pin = {"repository": "https://example.invalid/verl", "sdist_sha256": "0" * 64}
    write_upstreams(
        patches,
        [
            {"key": "verl", "name": "verl", "version": "0.8.0", **pin, "tag": "v0.8.0", "series": "verl",
             "default": True},
            {"key": "verl", "name": "verl", "version": "0.7.1", **pin, "tag": "v0.7.1", "series": "verl-0.7",
             "default": False},
        ],
    )  # fmt: skip
    return patches


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, str, list[str]]:
    """(a clone of the fake upstream, the patches dir, upstream's fix, the branches the gates saw); gates stubbed."""
    upstream, fix = _upstream(tmp_path)
    patches = _patches(tmp_path, upstream, fix)
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(upstream), str(clone))
    gated: list[str] = []

    def gates(gating, pin, tree, changed, console, notes=()):  # type: ignore[no-untyped-def]
        gated.append(git(tree.path, "log", "-1", "--format=%s").strip())
        return Gates(LintResult(True, (), ""), pr_gates.TestRun((), (), True, "1 passed"))

    monkeypatch.setattr(branches, "run_gates", gates)
    monkeypatch.setattr(branches, "run_teeth", lambda *args: Teeth("scale", True, "1 passed"))
    monkeypatch.setattr(pr_export, "ensure_venv", lambda: Path("/venv/bin/python"))
    return clone, patches, fix, gated


def _export(clone: Path, patches: Path, *args: str) -> int:
    return main(["verl", str(clone), "--patches-dir", str(patches), "--cache", str(patches.parent / "cache"), *args])


def test_each_pr_goes_on_the_branch_that_takes_it(world, capsys):
    clone, patches, fix, gated = world

    assert _export(clone, patches) == 0

    out = capsys.readouterr().out
    assert "verl-0.7: log: carried: no PR: main has not taken it yet" in out
    # upstream's commit adds no test: the carried patch's test follows it on the branch, as the user's commit
    test_commit = git(clone, "log", "-1", "--format=%an <%ae>|%s%n%b", "patchset/verl-scale").strip()
    added = f"Adds {TEST_FILE}: a CPU test of the fix cherry-picked above."
    assert test_commit == f"Test <test@example.invalid>|[algo] test: scale by two\n{added}"
    for name, onto, tip in (("verl-scale", "release/v0.8.0", "~1"), ("verl-0.7-scale", "release/v0.7.1", "")):
        branch = f"patchset/{name}{tip}"
        assert git(clone, "rev-parse", f"{branch}~1") == git(clone, "rev-parse", f"origin/{onto}")
        people = git(clone, "log", "-1", "--format=%an <%ae>|%cn <%ce>", branch).strip()
        assert people == f"{UPSTREAM_AUTHOR}|Test <test@example.invalid>"
        message = git(clone, "log", "-1", "--format=%B", branch).strip()
        assert message == f"[algo] fix: scale by two (#1)\n\n(cherry picked from commit {fix})"
        assert FIX in git(clone, "show", f"{branch}:verl/trainer/ppo/core_algos.py")
        assert f"`git cherry-pick -x {fix}`" in out
    assert "Resolved the conflicts in verl/trainer/ppo/core_algos.py" in out
    assert git(clone, "rev-parse", "patchset/verl-log~1") == git(clone, "rev-parse", "main")
    assert git(clone, "log", "-1", "--format=%an <%ae>%n%b", "patchset/verl-log").strip() == (
        "Test <test@example.invalid>\nA new fix."
    )
    assert "Made against `main`." in out
    assert "patchset/verl-0.7-log" not in git(clone, "branch", "--list")
    assert gated == ["[algo] test: scale by two", "[algo] fix: log the scale", "[algo] fix: scale by two (#1)"]
    assert git(clone, "status", "--porcelain") == "" and git(clone, "symbolic-ref", "HEAD").strip() == "refs/heads/main"


def test_a_held_design_is_made_but_not_pushed_and_an_open_pr_s_fix_is_a_comment(world, capsys):
    clone, patches, _, _ = world
    (patches / "verl/groups").write_text(
        "scale 0001 onto=release/v0.8.0\nlog 0002 onto=main comment=9 held=waits for #9\n"
    )
    (patches / "verl/pr/log.comment.md").write_text("Two designs, measured.\n")
    (patches / "verl-0.7/groups").write_text("scale 0001 onto=release/v0.7.1\nlog 0002 comment=9,8\n")

    assert _export(clone, patches) == 0

    out = capsys.readouterr().out
    assert "verl: log: held: branch made and gated, PR not opened yet: waits for #9; its design goes to #9" in out
    assert "----- comment on https://example.invalid/verl/issues/9 -----\nTwo designs, measured.\n----- end" in out
    assert "HELD, do not open its PR yet: patchset/verl-log: waits for #9" in out
    push = next(line for line in out.splitlines() if "Push with" in line)
    assert "patchset/verl-log" not in push and "patchset/verl-scale" in push
    assert "verl-0.7: log: comment: a comment on open PR #9, copied to #8, not a PR" in out
    assert "----- comment on https://example.invalid/verl/pull/9 -----\n**[algo] fix: log the scale**" in out
    assert "patchset/verl-0.7-log" not in git(clone, "branch", "--list")


def test_a_conflict_the_resolution_does_not_cover_makes_no_branch(world, capsys):
    clone, patches, fix, _ = world
    (patches / "verl-0.7/pr/scale.resolution.patch").unlink()

    assert _export(clone, patches, "--group", "scale") == 3

    err = capsys.readouterr().err
    assert f"upstream's commit {fix} does not cherry-pick cleanly here (conflicts in verl/trainer/" in err
    assert git(clone, "branch", "--list", "patchset/verl-0.7-*") == ""
    assert git(clone, "status", "--porcelain") == ""


def test_a_checkout_without_the_history_says_what_to_give(world, capsys, tmp_path):
    _, patches, fix, _ = world
    sdist_like = make_repo(tmp_path / "sdist", VERL_FILES)

    assert _export(sdist_like, patches, "--group", "scale") == 2

    err = capsys.readouterr().err
    assert f"group scale: its PR is upstream's commit {fix} cherry-picked onto release/v0.8.0, which needs" in err
    assert "Give export-pr a git clone of https://example.invalid/verl instead" in err
