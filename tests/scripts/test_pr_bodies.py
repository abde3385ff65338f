"""Every PR body export-pr prints reads as its upstream's own, and a body that does not is caught.

Invariants: for every group of every series (``patches/<series>/groups``), the body export-pr prints, laid out by the
upstream's template with gate results of the longest kind (a reused pass, upstream test files that cannot run here),
has the template's sections in the template's order, is at most ``MAX_BODY_LINES`` lines, and holds no word of
``FORBIDDEN`` and no sha256; a group of verl's whose fix is upstream's commit says it is that commit cherry-picked,
and every body says the measurements ran on CPU (a verl body: with what model, and the pytest command that
reproduces them). ``body_problems`` names a forbidden word (each phrase issue 41 quoted from the bodies sent back
among them), a sha256 or a body one line over the limit, and the lint (``scripts/export.sh lint``) names a
``pr/<group>.md`` that holds one. Pure text: no checkout, no venv, well under a second.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from patchset_fakes import REPO_ROOT

from patchset.export import pr_gates
from patchset.export.pr_gates import Gates, HookResult, LintResult
from patchset.export.pr_text import pr_body
from patchset.export.targets import upstream_commit
from patchset.export.test_selection import Selected
from patchset.series.groups import Group, load_groups
from patchset.series.lint import lint_groups
from patchset.series.model import load_series
from patchset.upstreams.pins import load_pins
from patchset.upstreams.pr_template import FORBIDDEN, MAX_BODY_LINES, body_problems

PINS = load_pins(REPO_ROOT / "patches/upstreams.toml")
HEADINGS = {
    "verl": [
        "### What does this PR do?",
        "### Checklist Before Starting",
        "### Test",
        "### API and Usage Example",
        "### Design & Code Changes",
        "### Checklist Before Submitting",
    ],
    "trinity": ["## Description", "## Checklist"],
}
# gate results as long as a real run gives: every hook, a reused pass, many upstream files that could not run here
GATES = Gates(
    LintResult(
        True,
        tuple(HookResult(f"hook{n} v1.0 (upstream's pyproject)", "Passed") for n in range(7)),
        "",
    ),
    pr_gates.TestRun(
        upstream=(Selected("tests/trainer/ppo/test_core_algos_on_cpu.py", "named for core_algos.py"),),
        own_files=("tests/trainer/ppo/test_new_on_cpu.py",),
        passed=True,
        summary="1 failed, 63 passed in 9.1s; every failure also fails on vanilla origin/release/v0.7.1, run the same "
        "way: tests/a_on_cpu.py::test_a; the same gate passed on exactly this content at 2026-12-05: not run again",
        not_run=tuple(Selected(f"tests/trainer/test_{n}.py", "imports it", "runs on a GPU") for n in range(9)),
    ),
)


def _groups() -> list[tuple[str, str, Group]]:
    found = []
    for series_name in dict.fromkeys(pin.series for pin in PINS.pins if pin.target):
        series = load_series(REPO_ROOT / "patches", series_name)
        for group in load_groups(series.path.parent, len(series.patches)):
            found.append((series_name, PINS.for_key("trinity")[0].key if series_name == "trinity" else "verl", group))
    return found


@pytest.mark.parametrize(("series_name", "key", "group"), _groups(), ids=lambda value: getattr(value, "name", value))
def test_every_pr_body_follows_its_template_and_stays_short(series_name: str, key: str, group: Group) -> None:
    series = load_series(REPO_ROOT / "patches", series_name)
    patches = [series.patches[number - 1] for number in group.numbers]
    commit = upstream_commit(patches)
    base = f"origin/{group.onto}" if group.onto else "v0.6.0"
    groups = load_groups(series.path.parent, len(series.patches))

    body = pr_body(key, base, patches, ["verl/a.py", "tests/test_a.py"], GATES, group, commit, groups)

    assert body_problems(body) == [], body
    headings = [line for line in body.splitlines() if line in HEADINGS[key] or line.startswith("## ")]
    assert headings == HEADINGS[key]
    if commit:  # upstream's own PR closed the issue: a backport closes none
        assert "Fixes" not in body
    if group.carried or group.comment:
        return  # no PR is opened: the body is not sent
    assert "CPU" in body  # the measurements say where they ran
    if key == "verl":  # and on what model, and the command that reproduces them in upstream's tree
        assert "tiny random Qwen2" in body or "no model" in body
        assert re.search(r"`pytest tests/\S+_on_cpu\.py`", body)
    if commit:
        assert f"`git cherry-pick -x {commit}`" in body
    if key == "trinity":
        assert "Made against the Trinity-RFT v0.6.0 release." in body


def test_a_body_with_our_words_a_sha256_or_one_line_too_many_is_named() -> None:
    good = "\n".join(["### What does this PR do?", "", "Fixes the loss."] + ["x"] * (MAX_BODY_LINES - 3))
    assert body_problems(good) == []

    assert body_problems(good + "\ny") == [f"{MAX_BODY_LINES + 1} lines, over the limit of {MAX_BODY_LINES}"]
    for word in FORBIDDEN:
        (problem,) = body_problems(f"Read at a {word.upper()} place.")
        assert problem == f"line 1: {word!r} means nothing upstream"
    assert body_problems("sdist " + "ab" * 32) == [
        "line 1: 'sdist' means nothing upstream",
        "line 1: a sha256 means nothing upstream",
    ]


# the words issue 41 found in the bodies a maintainer sent back, as it quotes them
ISSUE_41_WORDS = (
    "branch unknown",
    "stored revision",
    "the index keeps pull-request refs",
    "sdist sha256s",
    "this project's regression suite",
    "894 Python calls",
    "the author verl-trinity patchset",
    "our patch trailers",
)


@pytest.mark.parametrize("phrase", ISSUE_41_WORDS)
def test_a_body_that_grows_a_phrase_of_the_issue_is_named(phrase: str) -> None:
    good = "\n".join(["### What does this PR do?", "", "Fixes the loss.", "", "Run on CPU."])
    assert body_problems(good) == []

    assert body_problems(f"{good}\nMeasured with {phrase}.\n") != []


def test_the_lint_names_a_pr_description_that_holds_our_words(tmp_path: Path) -> None:
    folder = tmp_path / "verl"
    shutil.copytree(REPO_ROOT / "patches/verl/pr", folder / "pr")
    shutil.copy(REPO_ROOT / "patches/verl/groups", folder)
    description = folder / "pr/distillation-loss-global-batch-info.md"
    text = description.read_text() + "Read from a stored revision (branch unknown).\n"
    description.write_text(text)
    line = len(text.splitlines())

    problems = [p.message for p in lint_groups(folder, 6) if p.path == description]

    assert problems == [
        f"PR body: line {line}: 'branch unknown' means nothing upstream",
        f"PR body: line {line}: 'stored revision' means nothing upstream",
    ]
