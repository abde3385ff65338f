"""Concern groups: the ``groups`` file says which patches make one upstream PR, and in what order PRs stack.

Invariants: the repository's series load into the groups docs/maintaining.md names (Trinity: the DPO logit group holds
0002, the normalization group folds 0001, 0003 and 0005 and stacks on it; verl: one group per patch);
without a ``groups`` file every patch is its own group, each after the one before; ``chain`` lists a group's
bases first; a description splits into its title, the commit message and the PR-only sections; a folded group
without a description, or any problem the lint reports, is refused by ``load_groups`` naming the file and line;
when an export renumbers the series, each group keeps its patches and a new patch gets a group line of its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from patchset.plumbing.errors import BadInput
from patchset.plumbing.paths import REPO_ROOT
from patchset.series.groups import chain, load_groups, read_description, renumber_text
from patchset.series.model import load_series


def _groups(name: str):
    series = load_series(REPO_ROOT / "patches", name)
    return load_groups(series.path.parent, len(series.patches))


def test_trinity_groups_are_one_concern_each_stacked_only_where_code_or_tests_need_it():
    """The DPO logit fix alone; normalization and per-term weighting folded into one PR after it (its test weighs
    DPO's pairs); pair keeping alone; the optimizer-step option on pair keeping; the legacy actors on the
    normalization (its loss_aggregation); #616's runtime keys and the defaults stay carried, with their reasons."""
    groups = {group.name: group for group in _groups("trinity")}
    normalization = groups["policy-loss-normalization"]

    assert groups["dpo-logit"].numbers == (2,) and groups["dpo-logit"].after is None
    assert groups["dpo-logit"].upstream_tests is not None
    assert normalization.numbers == (1, 3, 5) and normalization.fold and normalization.after == "dpo-logit"
    assert groups["dpo-pairs"].numbers == (4, 6) and groups["dpo-pairs"].after is None
    assert groups["dpo-optimizer-step"].numbers == (7,) and groups["dpo-optimizer-step"].after == "dpo-pairs"
    assert groups["legacy-normalization"].numbers == (8,)
    assert [g.name for g in chain(tuple(groups.values()), "legacy-normalization")] == [
        "dpo-logit",
        normalization.name,
        "legacy-normalization",
    ]
    carried = {name: group.carried for name, group in groups.items() if group.carried}
    assert set(carried) == {"policy-loss-runtime-keys", "loss-scale-switch-default"}
    assert "PR 616" in carried["policy-loss-runtime-keys"] and "PR 336" in carried["loss-scale-switch-default"]
    assert all(group.description is not None for group in groups.values() if not group.carried)


def test_verl_has_one_group_per_patch():
    groups = _groups("verl")
    series = load_series(REPO_ROOT / "patches", "verl")

    assert sorted(n for group in groups for n in group.numbers) == list(range(1, len(series.patches) + 1))
    assert all(len(group.numbers) == 1 and not group.fold for group in groups)
    # each PR stands alone but the mini-batch hook's three, each on the hook's branch and none on another
    after = {group.name: group.after for group in groups if group.after is not None}
    assert after == {
        "clip-cov-mini-batch-selection": "mini-batch-hook",
        "kl-cov-mini-batch-selection": "mini-batch-hook",
        "is-batch-norm-mini-batch-mean": "mini-batch-hook",
    }
    # the patchset's own default for the IS option is carried, not sent
    assert {group.name for group in groups if group.carried} == {"is-batch-norm-default"}


def test_without_a_groups_file_each_patch_stacks_on_the_one_before(tmp_path):
    groups = load_groups(tmp_path, 3)

    assert [(g.numbers, g.after) for g in groups] == [((1,), None), ((2,), "patch-0001"), ((3,), "patch-0002")]


def test_description_splits_title_message_and_sections(tmp_path):
    path = tmp_path / "one.md"
    path.write_text("[trainer] fix: x\n\nFirst.\n\nSecond.\n\n## Numbers\n\nx2.\n")

    description = read_description(path)

    assert description.title == "[trainer] fix: x"
    assert description.message == ("First.", "Second.")
    assert description.sections == "## Numbers\n\nx2."


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        ("one 0001 0002 fold\n", "groups:1: one folds its patches but"),
        ("one 0001\n", "groups: patch 0002 of series is in no group"),
        ("one 0001\ntwo 0002 after=three\n", "groups:2: two: after=three names no group defined above it"),
    ],
)
def test_load_groups_refuses_what_the_lint_reports(tmp_path: Path, groups: str, expected: str):
    (tmp_path / "groups").write_text(groups)

    with pytest.raises(BadInput, match=expected.replace("(", r"\(")):
        load_groups(tmp_path, 2)


def test_renumbering_keeps_each_group_on_its_patches_and_groups_a_new_one():
    text = "# name patches options\nnorm   0001 0003 fold  # folded\ndpo    0002 after=norm\n"

    renumbered = renumber_text(text, {1: 1, 2: 3, 3: 4}, [(2, "trainer-new-step")])

    assert renumbered == (
        "# name patches options\nnorm   0001 0004 fold  # folded\ndpo    0003 after=norm\ntrainer-new-step 0002\n"
    )
    assert renumber_text(text, {1: 1, 2: None, 3: 2}, []).splitlines()[1:] == [
        "norm   0001 0002 fold  # folded",
        "dpo     after=norm",
    ]
