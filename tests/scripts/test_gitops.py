"""``gitops`` on its own: work-tree status, ``git apply`` results and their failure parsing, patch-text parsing and
the neutral configuration of the repositories the tool makes, each on a tiny repository in ``tmp_path``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from patchset_fakes import git, make_repo, tree_digest

from patchset.plumbing import gitops, patchtext

NUMBERS = "".join(f"{n}\n" for n in range(1, 21))


def numbers_repo(root: Path) -> Path:
    """A repository with ``a.txt`` and ``sub/b.txt`` (lines 1..20 each) in one commit."""
    return make_repo(root, {"a.txt": NUMBERS, "sub/b.txt": NUMBERS})


def diff_patch(repo: Path, dest: Path, edits: dict[str, tuple[str, str]]) -> Path:
    """Write ``git diff`` of ``edits`` ({path: (old line, new line)}) to ``dest``, then undo the edits."""
    for rel, (old, new) in edits.items():
        path = repo / rel
        path.write_text(path.read_text().replace(f"{old}\n", f"{new}\n", 1))
    dest.write_text(git(repo, "diff"))
    git(repo, "checkout", "-q", "--", ".")
    return dest


def test_status_paths_lists_uncommitted_changes_below_a_subdirectory_only(tmp_path: Path) -> None:
    """status_paths reports modified, staged and untracked files under tree.root, relative to it, and nothing above."""
    repo = numbers_repo(tmp_path / "repo")
    (repo / "a.txt").write_text("changed above\n")
    (repo / "sub/b.txt").write_text("changed\n")
    (repo / "sub/new").mkdir()
    (repo / "sub/new/c.txt").write_text("untracked\n")
    (repo / "sub/staged.txt").write_text("staged\n")
    git(repo, "add", "sub/staged.txt")

    tree = gitops.find_worktree(repo / "sub")

    assert tree is not None and tree.prefix == "sub/" and tree.toplevel == repo.resolve()
    assert gitops.status_paths(tree) == {"b.txt": " M", "new/c.txt": "??", "staged.txt": "A "}


def test_status_paths_lists_both_sides_of_a_staged_rename(tmp_path: Path) -> None:
    """A staged rename shows up under its new and its old name."""
    repo = numbers_repo(tmp_path / "repo")
    git(repo, "mv", "a.txt", "renamed.txt")

    tree = gitops.find_worktree(repo)

    assert tree is not None
    assert gitops.status_paths(tree) == {"renamed.txt": "R ", "a.txt": "R "}


def test_is_clean_counts_modified_and_untracked_files_as_dirty(tmp_path: Path) -> None:
    """is_clean is True only while the work tree matches HEAD with no untracked file."""
    repo = numbers_repo(tmp_path / "repo")
    assert gitops.is_clean(repo)

    (repo / "untracked.txt").write_text("x\n")
    assert not gitops.is_clean(repo)

    (repo / "untracked.txt").unlink()
    (repo / "a.txt").write_text("edited\n")
    assert not gitops.is_clean(repo)


def test_find_worktree_is_none_outside_any_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain directory is no work tree (None), and its files are not tracked once it becomes one."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "f.txt").write_text("x\n")

    assert gitops.find_worktree(plain) is None

    git(plain, "init", "-q")
    tree = gitops.find_worktree(plain)
    assert tree is not None and tree.prefix == ""
    assert not gitops.is_tracked(tree, "f.txt") and not gitops.has_head(tree)


def test_head_blobs_returns_head_content_and_modes_not_the_work_tree(tmp_path: Path) -> None:
    """head_blobs gives HEAD's bytes and mode (exec bit, symlink) and leaves out paths HEAD lacks."""
    repo = numbers_repo(tmp_path / "repo")
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    os.symlink("a.txt", repo / "link")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "more")
    (repo / "a.txt").write_text("work tree only\n")
    tree = gitops.find_worktree(repo)
    assert tree is not None

    blobs = gitops.head_blobs(tree, ["a.txt", "run.sh", "link", "missing.txt"])

    assert blobs == {
        "a.txt": gitops.Blob("100644", NUMBERS.encode()),
        "run.sh": gitops.Blob("100755", b"#!/bin/sh\n"),
        "link": gitops.Blob("120000", b"a.txt"),
    }


def test_apply_patch_check_changes_nothing_and_apply_then_reverse_round_trips(tmp_path: Path) -> None:
    """--check leaves the tree alone; applying then reversing restores it byte for byte."""
    repo = numbers_repo(tmp_path / "repo")
    patch = diff_patch(repo, tmp_path / "p.patch", {"a.txt": ("5", "five"), "sub/b.txt": ("12", "twelve")})
    vanilla = tree_digest(repo)

    assert gitops.apply_patch(repo, patch, check=True).ok
    assert tree_digest(repo) == vanilla

    assert gitops.apply_patch(repo, patch).ok
    assert "five\n" in (repo / "a.txt").read_text() and "twelve\n" in (repo / "sub/b.txt").read_text()
    assert not gitops.apply_patch(repo, patch, check=True).ok
    assert gitops.apply_patch(repo, patch, reverse=True).ok
    assert tree_digest(repo) == vanilla


def test_apply_patch_directory_prefixes_the_patch_paths(tmp_path: Path) -> None:
    """A patch made inside a subdirectory applies from the top level with ``directory`` set to that subdirectory."""
    repo = numbers_repo(tmp_path / "repo")
    inner = make_repo(tmp_path / "inner", {"b.txt": NUMBERS})  # the same file at the top of its own repository
    patch = diff_patch(inner, tmp_path / "p.patch", {"b.txt": ("3", "three")})

    assert not gitops.apply_patch(repo, patch, check=True).ok
    assert gitops.apply_patch(repo, patch, directory="sub/").ok
    assert "three\n" in (repo / "sub/b.txt").read_text()


def test_failed_apply_changes_nothing_and_parse_failure_names_file_and_hunk_line(tmp_path: Path) -> None:
    """A hunk that does not fit fails the whole patch (the other file untouched); the failure names file and line."""
    repo = numbers_repo(tmp_path / "repo")
    patch = diff_patch(repo, tmp_path / "p.patch", {"a.txt": ("5", "five"), "sub/b.txt": ("12", "twelve")})
    (repo / "sub/b.txt").write_text(NUMBERS.replace("11\n", "eleven\n"))  # in the second hunk's context
    before = tree_digest(repo)

    result = gitops.apply_patch(repo, patch)

    assert not result.ok
    assert tree_digest(repo) == before
    assert gitops.parse_failure(result.stderr) == gitops.Failure("sub/b.txt", 9, "patch does not apply")


def test_parse_failure_of_a_missing_file_has_no_line(tmp_path: Path) -> None:
    """A patch to a file that is gone fails with git's reason and line 0."""
    repo = numbers_repo(tmp_path / "repo")
    patch = diff_patch(repo, tmp_path / "p.patch", {"a.txt": ("5", "five")})
    (repo / "a.txt").unlink()

    result = gitops.apply_patch(repo, patch, check=True)

    assert not result.ok
    assert gitops.parse_failure(result.stderr) == gitops.Failure("a.txt", 0, "No such file or directory")


@pytest.mark.parametrize(
    ("stderr", "expected"),
    [
        (
            "error: patch failed: data/run:2/x.py:12\nerror: data/run:2/x.py: patch does not apply\n",
            gitops.Failure("data/run:2/x.py", 12, "patch does not apply"),
        ),
        ("error: patch failed: a.py:7\n", gitops.Failure("a.py", 7, "patch does not apply")),
        (
            "error: while searching for:\nfoo\nerror: patch failed: a.py:3\nerror: a.py: patch does not apply\n",
            gitops.Failure("a.py", 3, "patch does not apply"),
        ),
        ("error: while searching for: x\n", None),
        ("", None),
    ],
)
def test_parse_failure_reads_the_first_failing_hunk(stderr: str, expected: gitops.Failure | None) -> None:
    """The last ``:N`` of ``patch failed`` is the line (paths may hold colons); no failure line gives None."""
    assert gitops.parse_failure(stderr) == expected


def test_patch_parse_error_accepts_a_patch_and_rejects_truncated_ones(tmp_path: Path) -> None:
    """A whole patch parses (None); one cut in a hunk, in a file header or before its last newline, or empty, fails."""
    repo = numbers_repo(tmp_path / "repo")
    patch = diff_patch(repo, tmp_path / "p.patch", {"a.txt": ("5", "five"), "sub/b.txt": ("12", "twelve")})
    text = patch.read_text()
    cut_in_header = tmp_path / "header.patch"
    cut_in_header.write_text(text[: text.index("diff --git a/sub") + len("diff --git a/su")] + "\n")
    no_newline = tmp_path / "nonl.patch"
    no_newline.write_text(text + "-- \n2.39.5")  # a format-patch signature cut before its last newline
    cut_in_hunk = tmp_path / "hunk.patch"
    cut_in_hunk.write_text(text[:-3])
    empty = tmp_path / "empty.patch"
    empty.write_text("")

    assert gitops.patch_parse_error(patch) is None
    assert "2 'diff --git' headers but git reads 1" in (gitops.patch_parse_error(cut_in_header) or "")
    assert "does not end with a newline" in (gitops.patch_parse_error(no_newline) or "")
    assert gitops.patch_parse_error(empty)
    assert "corrupt patch" in (gitops.patch_parse_error(cut_in_hunk) or "")


def test_patch_paths_and_find_hunk_read_renames_and_quoted_names(tmp_path: Path) -> None:
    """patch_paths lists both sides of a rename and unquotes C-quoted names; find_hunk finds a hunk by its line."""
    repo = make_repo(tmp_path / "repo", {"old.txt": NUMBERS, "é.txt": NUMBERS})
    git(repo, "mv", "old.txt", "new.txt")
    (repo / "é.txt").write_text(NUMBERS.replace("7\n", "seven\n"))
    text = git(repo, "diff", "HEAD", "-M")

    assert patchtext.patch_paths(text) == ["old.txt", "new.txt", "é.txt"]
    assert patchtext.find_hunk(text, "é.txt", 4) == "@@ -4,7 +4,7 @@"
    assert patchtext.find_hunk(text, "é.txt", 5) is None


def test_run_git_raises_git_error_with_git_message(tmp_path: Path) -> None:
    """A failing command raises GitError carrying its exit status and git's last stderr line, unless check=False."""
    repo = numbers_repo(tmp_path / "repo")

    with pytest.raises(gitops.GitError) as raised:
        gitops.run_git(["rev-parse", "--verify", "no-such-ref"], cwd=repo)

    assert raised.value.returncode != 0
    assert str(raised.value).startswith("git rev-parse --verify no-such-ref: ")
    assert str(raised.value).endswith(raised.value.stderr.splitlines()[-1])
    assert gitops.run_git(["rev-parse", "--verify", "no-such-ref"], cwd=repo, check=False).returncode != 0


def test_git_value_is_the_stripped_answer_or_none_for_a_failure_or_nothing(tmp_path: Path) -> None:
    """git_value answers a question: git's stripped stdout; None when git fails (no such ref) or prints nothing
    (a clean status), so callers never read the output of a failed command."""
    repo = numbers_repo(tmp_path / "repo")

    assert gitops.git_value(repo, "rev-parse", "--verify", "HEAD^{commit}") == git(repo, "rev-parse", "HEAD").strip()
    assert gitops.git_value(repo, "rev-parse", "-q", "--verify", "refs/heads/no-such-branch") is None
    assert gitops.git_value(repo, "status", "--porcelain") is None
    (repo / "a.txt").write_text("edited\n")
    assert gitops.git_value(repo, "status", "--porcelain") == "M a.txt"
    env = {**os.environ, "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "patchset.probe", "GIT_CONFIG_VALUE_0": "on"}
    assert gitops.git_value(repo, "config", "--get", "patchset.probe", env=env) == "on"


def test_init_commit_tag_ignores_hooks_signing_and_autocrlf_from_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Repositories the tool makes run no hook, sign nothing and keep CRLF bytes, whatever the config says."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    marker = tmp_path / "hook-ran"
    for name in ("pre-commit", "post-commit"):
        (hooks / name).write_text(f"#!/bin/sh\necho {name} >> '{marker}'\n")
        (hooks / name).chmod(0o755)
    config = {"core.hooksPath": str(hooks), "commit.gpgSign": "true", "tag.gpgSign": "true", "core.autocrlf": "true"}
    monkeypatch.setenv("GIT_CONFIG_COUNT", str(len(config)))
    for number, (key, value) in enumerate(config.items()):
        monkeypatch.setenv(f"GIT_CONFIG_KEY_{number}", key)
        monkeypatch.setenv(f"GIT_CONFIG_VALUE_{number}", value)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    identity = gitops.Identity("Tool", "tool@example.invalid", "2000-01-01T00:00:00Z")

    gitops.init_commit_tag(tree, message="vanilla", tag="v1", identity=identity)

    assert not marker.exists()
    assert gitops.tag_commit(tree, "v1") == gitops.head_commit(tree) is not None
    assert gitops.tag_commit(tree, "v2") is None
    blob = gitops.run_git(["cat-file", "blob", "HEAD:crlf.txt"], cwd=tree, binary=True).stdout
    assert blob == b"one\r\ntwo\r\n"


def test_init_commit_tag_is_reproducible_for_the_same_files_and_identity(tmp_path: Path) -> None:
    """Two trees with the same files committed under the same Identity get the same commit id."""
    identity = gitops.Identity("Tool", "tool@example.invalid", "2000-01-01T00:00:00Z")
    commits = []
    for name in ("one", "two"):
        tree = tmp_path / name
        tree.mkdir()
        (tree / "f.txt").write_text("same\n")
        gitops.init_commit_tag(tree, message="vanilla", tag="v1", identity=identity)
        commits.append(gitops.head_commit(tree))

    assert commits[0] is not None and commits[0] == commits[1]
