"""The Trinity PRs rebased onto upstream's newest files read: ``patches/trinity/pr/<group>.upstream.patch``.

Invariants: each such patch names every file it touches exactly once, with a well-formed revision (a commit of
agentscope-ai/Trinity-RFT, the release, or ``new``); its group's PR body names each commit and says that their
branch is not confirmed; the patches apply, each after those of the groups it comes after, to the files they name
when those are in the cache (skipped, naming them, when not: upstream source is never committed); a patch that does
not apply is reported as such, an absent file is named and its hunks left unchecked, and a group none of whose
files are present is skipped; export-pr's summary names the revisions.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from patchset_fakes import REPO_ROOT

from patchset.export import upstream_prs
from patchset.series.groups import UPSTREAM_PATCH_SUFFIX, load_groups
from patchset.series.model import load_series
from patchset.upstreams.fetch import resolve_cache
from patchset.upstreams.pins import load_pins

CACHE = resolve_cache(None, os.environ, REPO_ROOT).root  # read at import: conftest clears PATCHSET_CACHE per test
PINS = load_pins(REPO_ROOT / "patches/upstreams.toml")
SERIES = load_series(REPO_ROOT / "patches", "trinity")
FOLDER = SERIES.path.parent
GROUPS = load_groups(FOLDER, len(SERIES.patches))
REBASED = sorted(path.name.removesuffix(UPSTREAM_PATCH_SUFFIX) for path in (FOLDER / "pr").glob("*.upstream.patch"))


def test_the_split_prs_are_rebased():
    assert {"dpo-logit", "policy-loss-normalization", "dpo-pairs", "dpo-optimizer-step"} <= set(REBASED)


@pytest.mark.parametrize("group", REBASED)
def test_each_rebased_pr_names_every_file_it_touches_and_its_revision(group):
    patch = upstream_prs.upstream_patch(FOLDER, group)

    assert upstream_prs.problems(patch) == []
    for revision in upstream_prs.revisions(patch):
        if revision.commit:
            assert revision.commit[0] == "agentscope-ai/Trinity-RFT"


@pytest.mark.parametrize("group", REBASED)
def test_the_pr_body_names_each_commit_and_that_its_branch_is_unconfirmed(group):
    body = " ".join((FOLDER / "pr" / f"{group}.md").read_text().split())  # wrapped at 72 columns
    commits = {r.commit[1] for r in upstream_prs.revisions(upstream_prs.upstream_patch(FOLDER, group)) if r.commit}

    for commit in commits:
        assert commit[:8] in body, commit
    if commits:
        assert "branch these commits are on is not confirmed" in body
    assert "## Upstream files it was made against" in body


@pytest.mark.parametrize("group", REBASED)
def test_each_rebased_pr_applies_to_the_revisions_it_names(group):
    checked = upstream_prs.check_group(FOLDER, GROUPS, group, CACHE, PINS)

    if checked.applied is None:
        pytest.skip(f"upstream files absent from {CACHE / upstream_prs.REVISIONS_DIR}: {', '.join(checked.missing)}")
    assert checked.applied, checked.error


def _fixture(tmp_path: Path, old: str) -> tuple[Path, Path]:
    """A series folder with one group whose rebased patch changes ``a.py`` at a commit, and a cache holding that
    commit's ``a.py`` with ``old`` as its text."""
    folder = tmp_path / "patches" / "trinity"
    (folder / "pr").mkdir(parents=True)
    (folder / "pr" / f"one{UPSTREAM_PATCH_SUFFIX}").write_text(
        "Subject: [PATCH] x\n\nx\n\nUpstream-File: a.py agentscope-ai/Trinity-RFT@" + "1" * 40 + "\n\n"
        "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
    )
    cache = tmp_path / "cache"
    source = upstream_prs.revision_path(cache, "agentscope-ai/Trinity-RFT", "1" * 40, "a.py")
    source.parent.mkdir(parents=True)
    source.write_text(old)
    return folder, cache


def test_a_patch_that_applies_or_not_and_absent_files_are_told_apart(tmp_path):
    from patchset.series.groups import Group

    groups = (Group("one", (1,)),)
    folder, cache = _fixture(tmp_path, "x = 1\n")
    assert upstream_prs.check_group(folder, groups, "one", cache, PINS).applied is True

    folder, cache = _fixture(tmp_path / "drifted", "y = 1\n")
    checked = upstream_prs.check_group(folder, groups, "one", cache, PINS)
    assert checked.applied is False and "does NOT apply" in checked.line()

    shutil.rmtree(cache)
    checked = upstream_prs.check_group(folder, groups, "one", cache, PINS)
    assert checked.applied is None
    assert checked.missing == ("a.py at agentscope-ai/Trinity-RFT@" + "1" * 40,)
    assert upstream_prs.check_group(folder, groups, "none", cache, PINS) is None


def test_export_pr_summary_names_the_revisions_and_the_unconfirmed_branch_or_that_there_are_none():
    lines = upstream_prs.summary(FOLDER, GROUPS)

    prs = [group for group in GROUPS if not group.carried]
    assert len(lines) == len(prs)
    assert sum("made against the release only" in line for line in lines) == len(prs) - len(REBASED)
    normalization = next(line for line in lines if "group policy-loss-normalization" in line)
    assert "trinity/trainer/verl/losses.py at agentscope-ai/Trinity-RFT@139d1c43" in normalization
    assert "not confirmed" in normalization
