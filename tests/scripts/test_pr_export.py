"""PR export on clones of the pinned checkouts: one branch per concern that upstream's own gates pass.

Invariants: ``export-pr`` makes one branch ``patchset/<series>-<group>`` per group of ``patches/<series>/groups``,
on the release tag or, for a group ``after`` another, on that group's branch; each holds one commit per patch
(the patch's author and subject, a message without DEP-3 fields or the "Why this patch" paragraph), or for a
``fold`` group one commit titled by ``pr/<group>.md`` whose tree is the final state of the group's patches (so
a test that a later patch revises appears only in its final form). The user's checked-out branch, work tree and
worktree list are as they were; the upstream lint gates (pre-commit, verl's mypy among them) and the upstream CPU
tests are reported passed for every branch, and each PR title and body printed: every group of the groups file has
its ``pr/<group>.md``, whose title and text the export prints. A patch with a lint error gives
exit 1 naming the gate, and keeps the branch; bad input (dirty tree, existing branch, a version the series does
not target, an unknown group) gives exit 2 and makes no branch. Needs the cached vanilla checkouts and the test
venv (``PATCHSET_VENV``); skipped when the checkouts are absent.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from patchset_fakes import FORMAT_PATCH, REPO_ROOT, git

from patchset import cli
from patchset.plumbing.ui import display_path
from patchset.series.groups import load_groups
from patchset.series.model import load_series
from patchset.upstreams import verl_pr
from patchset.upstreams.fetch import resolve_cache
from patchset.upstreams.pins import load_pins


def main(argv: list[str]) -> int:
    """``python -m patchset export-pr ARGV``."""
    return cli.main(["export-pr", *argv])


DEP3 = re.compile(r"^(Origin|Bug|Forwarded|Author|Applied-Upstream|Last-Update|Upstream-Check):", re.MULTILINE)
TRAILER = re.compile(r"^[A-Z][A-Za-z-]+: ", re.MULTILINE)
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

# read at import: the autouse fixture in conftest.py clears PATCHSET_CACHE for each test
CACHE = resolve_cache(None, os.environ, REPO_ROOT)


def _state(tree: Path) -> tuple[str, str, str, str]:
    return (
        git(tree, "symbolic-ref", "HEAD"),
        git(tree, "rev-parse", "HEAD"),
        git(tree, "status", "--porcelain", "--untracked-files=all"),
        git(tree, "worktree", "list", "--porcelain"),
    )


TRINITY_PRS = (
    "dpo-logit",
    "policy-loss-normalization",
    "dpo-pairs",
    "dpo-optimizer-step",
    "legacy-normalization",
)


def _check_every_group_has_its_body(series: str, out: str, exported: tuple[str, ...] = ()) -> None:
    """Every group of ``patches/<series>/groups`` has its ``pr/<group>.md``, and the export printed it (each group,
    or those ``exported``): its title as the PR title, its first paragraph in the body."""
    loaded = load_series(REPO_ROOT / "patches", series)
    for group in load_groups(loaded.path.parent, len(loaded.patches)):
        assert group.description is not None, f"group {group.name} has no patches/{series}/pr/{group.name}.md"
        if exported and group.name not in exported:
            continue
        assert f"----- PR title -----\n{group.description.title}\n" in out, group.name
        assert group.description.message[0].split("\n", 1)[0] in out, group.name


def _check_commit(checkout: Path, commit: str, subject: str) -> None:
    """The commit is the user's (the test's git identity), under ``subject``, with no trailer of ours."""
    people = git(checkout, "log", "-1", "--format=%an <%ae>|%cn <%ce>", commit).strip()
    assert people == "Test <test@example.invalid>|Test <test@example.invalid>"
    assert git(checkout, "log", "-1", "--format=%s", commit).strip() == subject
    message = git(checkout, "log", "-1", "--format=%b", commit)
    assert message.strip() and not DEP3.search(message)
    assert not TRAILER.search(message) and "Why this patch" not in message


def test_verl_backports_need_a_clone_with_verls_history(pinned, capsys):
    """The critic and distillation PRs are upstream's commits cherry-picked onto release/v0.8.0: a checkout made from
    the sdist has no such history, so export-pr says so, names what to give it, and makes no branch."""
    checkout = pinned("verl")
    before = _state(checkout)
    patch, distillation_patch, *_ = load_series(REPO_ROOT / "patches", "verl").patches
    backports = ("critic-value-loss-global-normalization", "distillation-loss-global-batch-info")

    assert main(["verl", str(checkout), *(arg for name in backports for arg in ("--group", name))]) == 2

    captured = capsys.readouterr()
    assert _state(checkout) == before
    for name, commit in zip(backports, (patch.upstream_commit, distillation_patch.upstream_commit), strict=True):
        assert (
            f"group {name}: its PR is upstream's commit {commit} cherry-picked onto release/v0.8.0, which needs "
            "verl's history;"
        ) in captured.err
    assert "Give export-pr a git clone of https://github.com/" in captured.err
    assert "no group of the verl series can be sent" in captured.err
    assert git(checkout, "branch", "--list", "patchset/*") == ""


def test_verl_test_group_exports_onto_verl_0_9_1_with_every_gate(tmp_path, capsys):
    """A group goes onto the newest release, where the groups upstream has are skipped, and upstream's gates (ruff,
    mypy, the license header, the CPU tests) pass there: the distillation test, which 0.9.1's fix passes."""
    pin = load_pins(REPO_ROOT / "patches/upstreams.toml").find("verl", "0.9.1")
    vanilla = CACHE.upstreams / pin.dirname
    if not (vanilla / ".git").exists():
        pytest.skip(f"no cached checkout of {pin.label} at {vanilla} (scripts/test.sh fetches it)")
    checkout = tmp_path / pin.dirname
    git(tmp_path, "clone", "-q", "--no-hardlinks", str(vanilla), str(checkout))
    before = _state(checkout)
    test_patch = load_series(REPO_ROOT / "patches", "verl").patches[8]

    assert main(["verl", str(checkout), "--group", "distillation-loss-test"]) == 0

    out = capsys.readouterr().out
    assert _state(checkout) == before
    (commit,) = git(checkout, "rev-list", "v0.9.1..patchset/verl-distillation-loss-test").split()
    _check_commit(checkout, commit, test_patch.subject)
    assert "lint mypy v1.17.0 (verl's pyproject): Passed" in out
    assert "upstream lint: passed (" in out and "upstream CPU tests: passed (" in out
    assert "tests/workers/test_distillation_loss_global_normalization_on_cpu.py" in out
    assert "Made against the verl v0.9.1 release; it is meant for `main`." in out
    assert "### Why this is not a duplicate\n\nNo open PR adds a test of #7225" in out
    assert "- [ ] AI assistance: say whether and how it was used" in out
    _check_every_group_has_its_body("verl", out, ("distillation-loss-test",))


def _final_state(pinned, numbers: list[int], path: str, tmp_path: Path) -> str:
    """``path`` after applying the trinity patches ``numbers`` (series positions) in order to the release."""
    tree = pinned("trinity", tmp_path / "final")
    patches = load_series(REPO_ROOT / "patches", "trinity").patches
    for number in numbers:
        git(tree, "apply", str(patches[number - 1].path))
    return (tree / path).read_text()


def test_trinity_export_stacks_each_group_on_what_it_needs(pinned, capsys, tmp_path):
    """One commit per patch, or one for a folded group, each group on the group it is ``after``; the carried groups
    (#616's runtime keys, the defaults) make no branch and are named with their reasons."""
    checkout = pinned("trinity")
    before = _state(checkout)
    patches = load_series(REPO_ROOT / "patches", "trinity").patches
    branch = {name: f"patchset/trinity-{name}" for name in TRINITY_PRS}
    logit, normalization, pairs = branch["dpo-logit"], branch["policy-loss-normalization"], branch["dpo-pairs"]

    assert main(["trinity", str(checkout)]) == 0

    out = capsys.readouterr().out
    assert _state(checkout) == before
    (logit_commit,) = git(checkout, "rev-list", f"v0.6.0..{logit}").split()  # 0002
    _check_commit(checkout, logit_commit, patches[1].subject)
    (folded,) = git(checkout, "rev-list", f"{logit}..{normalization}").split()  # 0001, 0003 and 0005 as one
    title = (REPO_ROOT / "patches/trinity/pr/policy-loss-normalization.md").read_text().split("\n", 1)[0]
    _check_commit(checkout, folded, title)
    pair_commits = git(checkout, "rev-list", "--reverse", f"v0.6.0..{pairs}").split()
    for commit, patch in zip(pair_commits, (patches[3], patches[5]), strict=True):  # 0004 and 0006, on the release
        _check_commit(checkout, commit, patch.subject)
    (steps_commit,) = git(checkout, "rev-list", f"{pairs}..{branch['dpo-optimizer-step']}").split()  # 0007
    _check_commit(checkout, steps_commit, patches[6].subject)
    (legacy_commit,) = git(checkout, "rev-list", f"{normalization}..{branch['legacy-normalization']}").split()  # 0008
    _check_commit(checkout, legacy_commit, patches[7].subject)
    for carried in ("policy-loss-runtime-keys", "loss-scale-switch-default"):
        assert f"trinity: {carried}: carried: no PR: " in out
        assert not git(checkout, "branch", "--list", f"patchset/trinity-{carried}").strip()
    assert out.count("upstream lint: passed (6 passed, 0 failed") == len(TRINITY_PRS)  # check-yaml: no YAML changed
    assert out.count("upstream CPU tests: passed (") == len(TRINITY_PRS)
    assert f"----- PR title -----\n{title}\n" in out
    logit_title = (REPO_ROOT / "patches/trinity/pr/dpo-logit.md").read_text().split("\n", 1)[0]
    assert f'Depends on the PR "{logit_title}"' in out
    assert "## Description" in out and "## Checklist" in out and "Made against the Trinity-RFT v0.6.0 release." in out
    _check_every_group_has_its_body("trinity", out, TRINITY_PRS)


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
    assert f"the branch is kept in {display_path(checkout)}: fix the patch" in captured.err
    assert "E501" in captured.out
    assert git(checkout, "rev-parse", "--verify", "-q", "refs/heads/pr/long").strip()
    assert git(checkout, "status", "--porcelain") == ""


def test_bad_input_exits_2_and_makes_no_branch(pinned, capsys):
    checkout = pinned("verl")
    git(checkout, "branch", "taken")
    assert main(["verl", str(checkout), "--group", "distillation-loss-test", "--branch", "taken"]) == 2
    assert "already exists" in capsys.readouterr().err

    (checkout / "README.md").write_text("dirty\n")
    assert main(["verl", str(checkout)]) == 2
    assert "uncommitted changes" in capsys.readouterr().err
    git(checkout, "checkout", "-q", "--", "README.md")

    (checkout / "verl/version/version").write_text("0.6.1\n")
    git(checkout, "commit", "-qam", "pretend 0.6.1")
    assert main(["verl", str(checkout)]) == 2
    assert "does not target" in capsys.readouterr().err

    assert main(["trinity", str(checkout)]) == 2
    assert "not trinity" in capsys.readouterr().err

    git(checkout, "reset", "-q", "--hard", "HEAD~1")
    assert main(["verl", str(checkout), "--group", "nosuch"]) == 2
    assert "no group 'nosuch'" in capsys.readouterr().err
    assert git(checkout, "branch", "--list", "patchset/*") == ""


def test_script_help_lists_exit_codes():
    proc = subprocess.run([str(REPO_ROOT / "scripts/export-pr.sh"), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert "exit status:" in proc.stdout and "a gate failed" in proc.stdout


@pytest.mark.parametrize(
    ("header", "generation"),
    [
        (
            "'python3 scripts/print_cfg.py --cfg job model_engine=megatron' to flatten",
            ("ppo_trainer", ["model_engine=megatron"]),
        ),
        (
            "'python3 scripts/print_cfg.py --cfg job --config-name=ppo_megatron_trainer.yaml' to",
            ("ppo_megatron_trainer", []),
        ),
        ("'python3 scripts/print_cfg.py --cfg job ' to flatten", ("ppo_trainer", [])),
        ("# Do not modify this file directly.", None),
    ],
)
def test_generated_config_gate_composes_what_each_file_header_names(header, generation):
    """verl 0.8.0 flattens ppo_trainer with model_engine overrides, 0.7.x names a config per engine: the gate reads the
    command from each generated file's header, so it checks any release's files (a fixed table failed on 0.7.1)."""
    assert verl_pr._generation(f"# in which it invokes {header}") == generation
