"""PR export on clones of the pinned checkouts: a branch upstream's own gates pass, in the user's repository.

Invariants: ``export-pr`` makes branch ``patchset/<series>-<slug>`` holding one commit per patch of the series on
the release tag, each with the patch's author and subject and a message without DEP-3 fields or the "Why this
patch" paragraph; the user's checked-out branch, work tree and worktree list are as they were; the upstream lint
gates (pre-commit) and the upstream CPU tests are reported passed, and the PR title and body printed. A patch with
a lint error gives exit 1 naming the gate, and keeps the branch; bad input (dirty tree, existing branch, a
version the series does not target) gives exit 2 and makes no branch. Needs the cached vanilla checkouts and the
test venv (``PATCHSET_VENV``); skipped when the checkouts are absent.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from patchset_fakes import FORMAT_PATCH, REPO_ROOT, git

from patchset.pr_export import main
from patchset.series import load_series

DEP3 = re.compile(r"^(Origin|Bug|Forwarded|Author|Applied-Upstream|Last-Update|Upstream-Check):", re.MULTILINE)
LICENSE = """\
# Copyright 2025 Bytedance Ltd. and/or its affiliates
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""


def _state(tree: Path) -> tuple[str, str, str, str]:
    return (
        git(tree, "symbolic-ref", "HEAD"),
        git(tree, "rev-parse", "HEAD"),
        git(tree, "status", "--porcelain", "--untracked-files=all"),
        git(tree, "worktree", "list", "--porcelain"),
    )


@pytest.mark.parametrize(
    ("key", "branch", "gates"),
    [
        ("verl", "patchset/verl-trainer-critic-value-loss-global-normalization", 6),
        ("trinity", "patchset/trinity-trainer-policy-loss-global-normalization", 6),
    ],
)
def test_export_makes_a_branch_that_passes_upstream_lint_and_tests(pinned, capsys, key, branch, gates):
    checkout = pinned(key)
    before = _state(checkout)
    patches = load_series(REPO_ROOT / "patches", key).patches

    assert main([key, str(checkout)]) == 0

    out = capsys.readouterr().out
    assert _state(checkout) == before  # the user's branch, tree and worktrees are as they were
    commits = git(checkout, "rev-list", "--reverse", f"{'v0.8.0' if key == 'verl' else 'v0.6.0'}..{branch}").split()
    assert len(commits) == len(patches)
    for commit, patch in zip(commits, patches, strict=True):
        author = git(checkout, "log", "-1", "--format=%an <%ae>", commit).strip()
        assert author in patch.text.split("\n", 3)[1]  # the From: line
        assert git(checkout, "log", "-1", "--format=%s", commit).strip() == patch.subject
        message = git(checkout, "log", "-1", "--format=%b", commit)
        assert message.strip() and not DEP3.search(message)
        assert "Why this patch" not in message
    assert f"upstream lint: passed ({gates} passed, 0 failed" in out
    assert "upstream CPU tests: passed (" in out
    if key == "verl":
        assert "tests/trainer/ppo/test_core_algos_on_cpu.py" in out
        assert "### What does this PR do?" in out and "### Checklist Before Submitting" in out
    else:
        assert "ships no tests/ folder" in out
        assert "## Description" in out and "## Checklist" in out
    more = f" (+{len(patches) - 1} more)" if len(patches) > 1 else ""
    assert f"----- PR title -----\n{patches[0].subject}{more}\n" in out
    assert f"push <your-fork> {branch}" in out


def _long_line_series(pinned, tmp_path: Path) -> Path:
    """A patches dir whose verl series is one patch adding a module with a 150-column line."""
    work = pinned("verl", tmp_path / "work")
    module = work / "verl/utils/patchset_long_line.py"
    module.write_text(LICENSE + '"""A module."""\n\nMESSAGE = "' + "x" * 150 + '"\n')
    git(work, "add", "-A")
    git(
        work, "commit", "-qm", "[misc] chore: add a long line\n\nA long line.\n\nForwarded: no\nLast-Update: 2026-12-02"
    )
    patches = tmp_path / "patches"
    (patches / "verl").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "patches/upstreams.toml", patches)
    (patches / "verl/0001-misc-long-line.patch").write_text(git(work, *FORMAT_PATCH, "-1", "--stdout"))
    (patches / "verl/series").write_text("0001-misc-long-line.patch\n")
    return patches


def test_lint_error_exits_1_naming_the_gate_and_keeps_the_branch(pinned, capsys, tmp_path):
    patches = _long_line_series(pinned, tmp_path)
    checkout = pinned("verl")

    assert main(["verl", str(checkout), "--patches-dir", str(patches), "--branch", "pr/long"]) == 1

    captured = capsys.readouterr()
    assert "error: upstream lint (ruff v0.12.2 (verl's pyproject)) failed on branch pr/long" in captured.err
    assert "E501" in captured.out
    assert git(checkout, "rev-parse", "--verify", "-q", "refs/heads/pr/long").strip()
    assert git(checkout, "status", "--porcelain") == ""


def test_bad_input_exits_2_and_makes_no_branch(pinned, capsys):
    checkout = pinned("verl")
    git(checkout, "branch", "taken")
    assert main(["verl", str(checkout), "--branch", "taken"]) == 2
    assert "already exists" in capsys.readouterr().err

    (checkout / "README.md").write_text("dirty\n")
    assert main(["verl", str(checkout)]) == 2
    assert "uncommitted changes" in capsys.readouterr().err
    git(checkout, "checkout", "-q", "--", "README.md")

    (checkout / "verl/version/version").write_text("0.7.1\n")
    git(checkout, "commit", "-qam", "pretend 0.7.1")
    assert main(["verl", str(checkout)]) == 2
    assert "does not target" in capsys.readouterr().err

    assert main(["trinity", str(checkout)]) == 2
    assert "not trinity" in capsys.readouterr().err
    assert git(checkout, "branch", "--list", "patchset/*") == ""


def test_script_help_lists_exit_codes():
    proc = subprocess.run([str(REPO_ROOT / "scripts/export-pr.sh"), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert "exit status:" in proc.stdout and "a gate failed" in proc.stdout
