"""The series lint: the real series is clean, and each problem is one line naming the file and what is wrong.

Invariants: ``lint`` exits 0 on the repository's ``patches/`` and on a well-formed fake patches dir; for each
kind of problem (series and folder out of step either way, duplicates, bad names or numbering, a missing Subject
or one not in the upstream's PR-title form, missing or malformed DEP-3 fields: Origin without its URL, Bug that
is not a URL, Forwarded no/not-needed without a reason, Upstream-Check or Forwarded upstream without
Applied-Upstream; trailing whitespace on an added line, a patch that does not parse; a ``groups`` file that does
not parse, leaves a patch out, names a patch twice or a later group, has a group (folded or not) without its
description, or a description without a group or with a bad title; a group's ``pr/<group>.upstream-tests.patch``
of no group, without its ``Upstream-Commit:``, touching a file outside ``tests/`` or creating one; no ``teeth`` file,
a patch without its teeth, an entry for no patch or naming no tests) it exits 1 and prints exactly the expected
``path[:line]: problem`` line; removed and context lines may keep their trailing whitespace; ``scripts/export.sh
lint`` runs the same check from any directory.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from patchset import cli
from patchset.plumbing.paths import REPO_ROOT
from patchset.series.parts import slug_of


def main(argv: list[str]) -> int:
    """``python -m patchset export ARGV``."""
    return cli.main(["export", *argv])


NAME = "0001-trainer-scale-loss.patch"
HEADER = {
    "Author": "Author: Test",
    "Bug": "Bug: https://example.invalid/issues/1",
    "Forwarded": "Forwarded: no, not sent yet",
    "Last-Update": "Last-Update: 2026-12-02",
}


def _patch(
    *,
    subject: str = "[PATCH] [trainer] fix: scale the loss",
    fields: dict[str, str] | None = None,
    added: str = "b = 3",
    removed: str = "b = 2",
    context: str = "a = 1",
) -> str:
    """A patch as git format-patch writes it (line 20 is the added line)."""
    body = "\n".join((HEADER if fields is None else fields).values())
    subject_line = f"Subject: {subject}\n" if subject else ""
    return (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: Test <test@example.invalid>\n"
        "Date: Wed, 2 Dec 2026 00:00:00 +0000\n"
        f"{subject_line}"
        "\n"
        "Why: the loss grows with the micro-batch count.\n"
        "\n"
        f"{body}\n"
        "\n"
        "diff --git a/x.py b/x.py\n"
        "index 1111111111111111111111111111111111111111..2222222222222222222222222222222222222222 100644\n"
        "--- a/x.py\n"
        "+++ b/x.py\n"
        "@@ -1,2 +1,2 @@\n"
        f" {context}\n"
        f"-{removed}\n"
        f"+{added}\n"
    )


def _patches_dir(tmp_path: Path, patches: dict[str, str], series: list[str] | None = None) -> Path:
    """``tmp_path/patches/verl/`` holding ``patches`` and a series listing ``series`` (default: the patches)."""
    folder = tmp_path / "patches" / "verl"
    folder.mkdir(parents=True)
    for name, text in patches.items():
        (folder / name).write_text(text)
    entries = list(patches) if series is None else series
    (folder / "series").write_text("# the order\n" + "".join(f"{entry}\n" for entry in entries))
    teeth = dict.fromkeys(slug_of(entry) for entry in entries if entry in patches)
    (folder / "parts.toml").write_text("".join(f'[{slug}]\nteeth = "test_{slug[-4:]}"\n' for slug in teeth))
    return tmp_path / "patches"


def _lint(patches_dir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(["lint", "--patches-dir", str(patches_dir)])
    return code, capsys.readouterr().out.splitlines()[:-1]  # the last line is the summary


def test_real_series_is_clean(capsys):
    capsys.readouterr()

    assert main(["lint"]) == 0

    assert capsys.readouterr().out.strip().endswith("no problems")


def test_well_formed_fake_series_is_clean(tmp_path, capsys):
    patches = _patches_dir(tmp_path, {NAME: _patch(), "0002-trainer-more.patch": _patch()})

    assert _lint(patches, capsys) == (0, [])


def _drop(field: str) -> dict[str, str]:
    return {name: line for name, line in HEADER.items() if name != field}


def _stray_patch(tmp: Path) -> Path:
    patches = _patches_dir(tmp, {NAME: _patch()})
    (patches / "0001-x-y.patch").write_text(_patch())
    return patches


def _no_series_file(tmp: Path) -> Path:
    patches = _patches_dir(tmp, {NAME: _patch()})
    (patches / "verl" / "series").unlink()
    return patches


def _pinned_folder_missing(tmp: Path) -> Path:
    patches = _patches_dir(tmp, {NAME: _patch()})  # the real upstreams.toml also names a trinity series
    real = (REPO_ROOT / "patches" / "upstreams.toml").read_text()
    # and the verl-0.7 lines' series: here the verl folder stands for them, so that one folder is missing
    (patches / "upstreams.toml").write_text(re.sub(r'series = "verl-[0-9.]+"', 'series = "verl"', real))
    return patches


def _grouped(tmp: Path, groups: str, descriptions: dict[str, str] | None = None, without: tuple[str, ...] = ()) -> Path:
    """Two well-formed patches, the ``groups`` file given (after a comment line) and ``pr/<name>.md`` files: a
    well-formed one for every group named in ``groups`` but those ``without``, then ``descriptions`` on top."""
    patches = _patches_dir(tmp, {NAME: _patch(), "0002-trainer-more.patch": _patch()})
    (patches / "verl" / "groups").write_text("# name patches options\n" + groups)
    named = [line.split()[0] for line in groups.splitlines() if line.strip()]
    well_formed = "[trainer] fix: scale the loss\n\nWhy.\n\n## Why this is not a duplicate\n\nNo PR does it.\n"
    every = {name: well_formed for name in named if name not in without}
    for name, text in (every | (descriptions or {})).items():
        (patches / "verl" / "pr").mkdir(exist_ok=True)
        (patches / "verl" / "pr" / f"{name}.md").write_text(text)
    return patches


def _teeth(tmp: Path, text: str | None) -> Path:
    """Two well-formed patches, with the ``parts.toml`` ``text`` (None: no such file)."""
    patches = _patches_dir(tmp, {NAME: _patch(), "0002-trainer-more.patch": _patch()})
    teeth = patches / "verl" / "parts.toml"
    teeth.unlink()
    if text is not None:
        teeth.write_text(text)
    return patches


def _upstream_tests_patch(
    path: str = "tests/algorithm/policy_loss_test.py",
    field: str = "Upstream-Commit: 5b77c089 (a fork)",
    new: bool = False,
) -> str:
    """A group's change to an upstream test file, as git format-patch writes it."""
    change = (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\nindex 0000000..1111111\n--- /dev/null\n+++ b/{path}\n"
        "@@ -0,0 +1 @@\n+a = 1\n"
        if new
        else f"diff --git a/{path} b/{path}\nindex 1111111..2222222 100644\n--- a/{path}\n+++ b/{path}\n"
        "@@ -1 +1 @@\n-a = 1\n+a = 2\n"
    )
    return (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: Test <test@example.invalid>\nDate: Wed, 2 Dec 2026 00:00:00 +0000\n"
        "Subject: [PATCH] [Tests] Pin per-pair DPO values\n\nThe fix changes what this test pins.\n\n"
        f"{field}\n---\n{change}"
    )


def _with_tests_patch(tmp: Path, text: str, group: str = "one") -> Path:
    patches = _grouped(tmp, "one 0001 0002\n")
    (patches / "verl" / "pr" / f"{group}.upstream-tests.patch").write_text(text)
    return patches


Setup = Callable[[Path], Path]

CASES: dict[str, tuple[Setup, str]] = {
    "listed but missing": (
        lambda tmp: _patches_dir(tmp, {NAME: _patch()}, [NAME, "0002-trainer-gone.patch"]),
        "patches/verl/series:3: 0002-trainer-gone.patch is listed but "
        "patches/verl/0002-trainer-gone.patch does not exist",
    ),
    "in the folder but not listed": (
        lambda tmp: _patches_dir(tmp, {NAME: _patch(), "0002-trainer-extra.patch": _patch()}, [NAME]),
        "patches/verl/0002-trainer-extra.patch: not listed in patches/verl/series; list it or delete it",
    ),
    "listed twice": (
        lambda tmp: _patches_dir(tmp, {NAME: _patch()}, [NAME, NAME]),
        f"patches/verl/series:3: {NAME} is listed twice (first on line 2)",
    ),
    "message line over 72 columns": (
        lambda tmp: _patches_dir(tmp, {NAME: _patch(fields=HEADER | {"Text": "seventy-three " + "x" * 59})}),
        f"patches/verl/{NAME}:12: message line of 73 columns; wrap it at 72",
    ),
    "subject over 72 columns": (
        lambda tmp: _patches_dir(tmp, {NAME: _patch(subject="[PATCH] [trainer] fix: " + "scale " * 10)}),
        f"patches/verl/{NAME}: Subject of 74 columns; upstream's history keeps it within 72: move detail to the body",
    ),
    "PR description that does not say why it is no duplicate": (
        lambda tmp: _grouped(tmp, "one 0001 0002\n", {"one": "[trainer] fix: scale the loss\n\nWhy.\n"}),
        "patches/verl/pr/one.md: no '## Why this is not a duplicate' section: upstream asks it of every PR",
    ),
    "a comment group with a branch": (
        lambda tmp: _grouped(tmp, "one 0001 0002 comment=7916,7913 onto=main\n"),
        "patches/verl/groups:2: one: a comment= group makes no branch unless held=: no onto= alone",
    ),
    "a held design without its comment": (
        lambda tmp: _grouped(tmp, "one 0001 0002 onto=main comment=7829 held=design first\n"),
        "patches/verl/groups: one is held for #7829 but has no patches/verl/pr/one.comment.md",
    ),
    "name not NNNN-area-slug": (
        lambda tmp: _patches_dir(tmp, {"0001-Trainer_Scale.patch": _patch()}),
        "patches/verl/0001-Trainer_Scale.patch: name does not match NNNN-<area>-<slug>.patch "
        "(lowercase a-z, 0-9 and -)",
    ),
    "number out of step with series": (
        lambda tmp: _patches_dir(tmp, {"0002-trainer-scale-loss.patch": _patch()}),
        "patches/verl/0002-trainer-scale-loss.patch: numbered 0002 but is patch 1 of patches/verl/series; "
        f"rename it {NAME}",
    ),
    "no subject": (
        lambda tmp: _patches_dir(tmp, {NAME: _patch(subject="")}),
        f"patches/verl/{NAME}: no Subject (the commit's first line); export it with git format-patch",
    ),
    "no Author or Origin": (
        lambda tmp: _patches_dir(tmp, {NAME: _patch(fields=_drop("Author"))}),
        f"patches/verl/{NAME}: header lacks Origin: (backport/vendor + URL) or Author:",
    ),
    "Bug not a URL": (
        lambda tmp: _patches_dir(tmp, {NAME: _patch(fields=HEADER | {"Bug": "Bug: related to PR #336"})}),
        f"patches/verl/{NAME}: Bug: must be the URL of the upstream bug this patch fixes",
    ),
    "no Forwarded": (
        lambda tmp: _patches_dir(tmp, {NAME: _patch(fields=_drop("Forwarded"))}),
        f"patches/verl/{NAME}: header lacks Forwarded: (no or not-needed with the reason, or the PR URL)",
    ),
    "Forwarded no without a reason": (
        lambda tmp: _patches_dir(tmp, {NAME: _patch(fields=HEADER | {"Forwarded": "Forwarded: no"})}),
        f"patches/verl/{NAME}: Forwarded: no needs the reason after it (e.g. 'no, sent as PR once ...')",
    ),
    "Forwarded neither a word nor a URL": (
        lambda tmp: _patches_dir(tmp, {NAME: _patch(fields=HEADER | {"Forwarded": "Forwarded: maybe later"})}),
        f"patches/verl/{NAME}: Forwarded: maybe later must be no or not-needed with a reason, or the URL it was "
        "sent to",
    ),
    "Origin backport without a URL": (
        lambda tmp: _patches_dir(tmp, {NAME: _patch(fields=HEADER | {"O": "Origin: backport"})}),
        f"patches/verl/{NAME}: Origin: backport needs the upstream commit or PR URL after it",
    ),
    "Origin of an unknown kind": (
        lambda tmp: _patches_dir(tmp, {NAME: _patch(fields=HEADER | {"O": "Origin: https://x.invalid/1"})}),
        f"patches/verl/{NAME}: Origin: https://x.invalid/1 must start with upstream, backport, vendor or other",
    ),
    "Upstream-Check without Applied-Upstream": (
        lambda tmp: _patches_dir(tmp, {NAME: _patch(fields=HEADER | {"U": "Upstream-Check: x.py: ^b = 3$"})}),
        f"patches/verl/{NAME}: Upstream-Check: needs Applied-Upstream: <version>, <URL> (since when upstream has it)",
    ),
    "Subject not in verl's PR-title form": (
        lambda tmp: _patches_dir(tmp, {NAME: _patch(subject="[PATCH] Scale the loss")}),
        f"patches/verl/{NAME}: Subject 'Scale the loss' is not in the upstream's PR-title form [module] type: "
        "description, [BREAKING] first when it breaks a caller (verl: e.g. [trainer] fix: ...)",
    ),
    "no Last-Update": (
        lambda tmp: _patches_dir(tmp, {NAME: _patch(fields=_drop("Last-Update"))}),
        f"patches/verl/{NAME}: header lacks Last-Update: (YYYY-MM-DD)",
    ),
    "Last-Update not a date": (
        lambda tmp: _patches_dir(tmp, {NAME: _patch(fields=HEADER | {"Last-Update": "Last-Update: 2 Dec 2026"})}),
        f"patches/verl/{NAME}: Last-Update: 2 Dec 2026 is not a YYYY-MM-DD date",
    ),
    "upstream but no Applied-Upstream": (
        lambda tmp: _patches_dir(
            tmp, {NAME: _patch(fields=HEADER | {"Forwarded": "Forwarded: not-needed (fixed upstream in 0.9.0)"})}
        ),
        f"patches/verl/{NAME}: Forwarded: says it is upstream, but the header lacks Applied-Upstream:",
    ),
    "Applied-Upstream without a version": (
        lambda tmp: _patches_dir(tmp, {NAME: _patch(fields=HEADER | {"A": "Applied-Upstream: https://x.invalid"})}),
        f"patches/verl/{NAME}: Applied-Upstream: must start with the upstream version, e.g. 0.9.0, <URL>",
    ),
    "groups: a patch in no group": (
        lambda tmp: _grouped(tmp, "one 0001\n"),
        "patches/verl/groups: patch 0002 of series is in no group; add it to one (a new group is one line)",
    ),
    "groups: a patch number not in series": (
        lambda tmp: _grouped(tmp, "one 0001 0002 0003\n"),
        "patches/verl/groups:2: one: 0003 is not a patch of series (1-2)",
    ),
    "groups: a patch in two groups": (
        lambda tmp: _grouped(tmp, "one 0001 0002\ntwo 0002\n"),
        "patches/verl/groups:3: two: 0002 is already in group one",
    ),
    "groups: after= a group not above": (
        lambda tmp: _grouped(tmp, "one 0001 after=two\ntwo 0002\n"),
        "patches/verl/groups:2: one: after=two names no group defined above it; define that first",
    ),
    "groups: an unknown option": (
        lambda tmp: _grouped(tmp, "one 0001 0002 squash\n"),
        "patches/verl/groups:2: one: 'squash' is not a patch number (NNNN), 'fold', 'after=', 'onto=', "
        "'comment=<PR>[,<issue>]', 'held=' or 'carried='",
    ),
    "groups: fold without a description": (
        lambda tmp: _grouped(tmp, "one 0001 0002 fold\n", without=("one",)),
        "patches/verl/groups:2: one has no patches/verl/pr/one.md, its PR body (its patches are folded into one "
        "commit)",
    ),
    "groups: a group without a description": (
        lambda tmp: _grouped(tmp, "one 0001\ntwo 0002 after=one\n", without=("two",)),
        "patches/verl/groups:3: two has no patches/verl/pr/two.md, its PR body (every group is a pull request)",
    ),
    "groups: a description of no group": (
        lambda tmp: _grouped(tmp, "one 0001 0002\n", {"other": "[trainer] fix: x\n"}),
        "patches/verl/pr/other.md: no group other in patches/verl/groups; add it or delete this",
    ),
    "groups: a description whose title is not a PR title": (
        lambda tmp: _grouped(
            tmp, "one 0001 0002 fold\n", {"one": "Scale the loss\n\n## Why this is not a duplicate\n\nNone.\n"}
        ),
        "patches/verl/pr/one.md:1: PR title 'Scale the loss' is not in the upstream's PR-title form [module] type: "
        "description, [BREAKING] first when it breaks a caller (verl: e.g. [trainer] fix: ...)",
    ),
    "teeth: no parts.toml": (
        lambda tmp: _teeth(tmp, None),
        "patches/verl/parts.toml: missing; give each patch a table with its teeth (the tests that show its bug)",
    ),
    "teeth: a patch without its entry": (
        lambda tmp: _teeth(tmp, '[trainer-scale-loss]\nteeth = "test_scale"\n'),
        "patches/verl/parts.toml: 0002-trainer-more.patch has no teeth; name the regression tests that show its bug "
        "(a pytest -k expression)",
    ),
    "teeth: an entry for no patch": (
        lambda tmp: _teeth(
            tmp, '[trainer-scale-loss]\nteeth = "a"\n[trainer-more]\nteeth = "b"\n[trainer-gone]\nteeth = "x"\n'
        ),
        "patches/verl/parts.toml: [trainer-gone] is no patch of the series (renamed? its slug is its file name "
        "without NNNN-)",
    ),
    "teeth: an entry without tests": (
        lambda tmp: _teeth(tmp, '[trainer-scale-loss]\nteeth = "test_scale"\n[trainer-more]\nteeth = ""\n'),
        "patches/verl/parts.toml: [trainer-more] teeth names no tests; give a pytest -k expression of tests/regression",
    ),
    "upstream-tests patch of no group": (
        lambda tmp: _with_tests_patch(tmp, _upstream_tests_patch(), group="other"),
        "patches/verl/pr/other.upstream-tests.patch: no group other in patches/verl/groups; name it "
        "<group>.upstream-tests.patch",
    ),
    "upstream-tests patch without Upstream-Commit": (
        lambda tmp: _with_tests_patch(tmp, _upstream_tests_patch(field="Made against main.")),
        "patches/verl/pr/one.upstream-tests.patch: header lacks Upstream-Commit: <hash> (<where read>), the "
        "revision of the tests it changes",
    ),
    "upstream-tests patch outside tests/": (
        lambda tmp: _with_tests_patch(tmp, _upstream_tests_patch(path="trinity/x.py")),
        "patches/verl/pr/one.upstream-tests.patch: touches trinity/x.py: an upstream-tests patch changes only tests/ "
        "and docs/",
    ),
    "upstream-tests patch creating a file": (
        lambda tmp: _with_tests_patch(tmp, _upstream_tests_patch(path="tests/new_test.py", new=True)),
        "patches/verl/pr/one.upstream-tests.patch: creates tests/new_test.py: a new test goes into the series, "
        "which always carries it",
    ),
    "trailing whitespace on an added line": (
        lambda tmp: _patches_dir(tmp, {NAME: _patch(added="b = 3 ")}),
        f"patches/verl/{NAME}:20: trailing whitespace on an added line of x.py",
    ),
    "trailing tab on an added line": (
        lambda tmp: _patches_dir(tmp, {NAME: _patch(added="b = 3\t")}),
        f"patches/verl/{NAME}:20: trailing whitespace on an added line of x.py",
    ),
    "does not parse": (
        lambda tmp: _patches_dir(tmp, {NAME: _patch().replace("@@ -1,2 +1,2 @@", "@@ -1,9 +1,9 @@")}),
        f"patches/verl/{NAME}: does not parse as a patch (",
    ),
    "patch outside a series folder": (
        _stray_patch,
        "patches/0001-x-y.patch: not in a series folder; move it into patches/<upstream>/ and list it",
    ),
    "folder without a series file": (
        _no_series_file,
        "patches/verl/series: missing; list the folder's patches in it, in order, one a line",
    ),
    "series folder of upstreams.toml missing": (
        _pinned_folder_missing,
        "patches/trinity: series folder named in upstreams.toml does not exist; create it with a series file",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_problem_is_one_line_naming_the_file(tmp_path, capsys, case):
    setup, expected = CASES[case]
    patches = setup(tmp_path)

    code, lines = _lint(patches, capsys)

    assert code == 1
    assert len(lines) == 1, lines
    assert lines[0].startswith(expected) if expected.endswith("(") else lines[0] == expected


def test_well_formed_groups_are_clean(tmp_path, capsys):
    description = (
        "[trainer] fix: scale the loss\n\nWhy.\n\n## Numbers\n\nx2.\n\n## Why this is not a duplicate\n\nNone.\n"
    )
    patches = _grouped(tmp_path, "one 0001 fold\ntwo 0002 after=one\n", {"one": description})
    (patches / "verl" / "pr" / "two.upstream-tests.patch").write_text(_upstream_tests_patch())

    assert _lint(patches, capsys) == (0, [])


def test_bug_is_optional(tmp_path, capsys):
    patches = _patches_dir(tmp_path, {NAME: _patch(fields=_drop("Bug"))})

    assert _lint(patches, capsys) == (0, [])


def test_every_problem_is_reported_not_only_the_first(tmp_path, capsys):
    fields = HEADER | {"Forwarded": "Forwarded: no"}
    patches = _patches_dir(tmp_path, {NAME: _patch(added="x ", fields=fields), "0003-a-b.patch": _patch()})

    code, lines = _lint(patches, capsys)

    assert code == 1
    assert lines == [
        f"patches/verl/{NAME}: Forwarded: no needs the reason after it (e.g. 'no, sent as PR once ...')",
        f"patches/verl/{NAME}:20: trailing whitespace on an added line of x.py",
        "patches/verl/0003-a-b.patch: numbered 0003 but is patch 2 of patches/verl/series; rename it 0002-a-b.patch",
    ]


def test_removed_and_context_lines_may_keep_trailing_whitespace(tmp_path, capsys):
    patches = _patches_dir(tmp_path, {NAME: _patch(removed="b = 2 ", context="a = 1\t")})

    assert _lint(patches, capsys) == (0, [])


def test_missing_patches_dir_is_bad_input(tmp_path, capsys):
    assert main(["lint", "--patches-dir", str(tmp_path / "none")]) == 2

    assert capsys.readouterr().err.startswith("error: none is not a folder")


def test_export_script_lints_from_any_directory(tmp_path):
    proc = subprocess.run(
        [str(REPO_ROOT / "scripts" / "export.sh"), "lint"], cwd=tmp_path, capture_output=True, text=True, check=False
    )

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("no problems")


GEO_MEAN = "0003-algo-normalize-geo-mean-policy-loss-global-mini.patch"
COPY_LINE = 4  # of patches/verl-0.7/series: the geo_mean copy's entry


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda text: text.replace("+    pg_loss = agg_loss(", "+    pg_loss = other_loss(", 1), "changes"),
        (lambda text: text.replace("Why this patch: GMPO", "Why this patch, reworded: GMPO", 1), "message differs"),
    ],
    ids=["another change", "another message"],
)
def test_a_copy_in_another_release_lines_series_cannot_drift_from_its_source(tmp_path, capsys, edit, says):
    """patches/verl-0.7's geo_mean patch is marked a copy of verl 0003: changing the source alone (its code or its
    message) is a lint problem on the copy's series line, naming the one command that refreshes it."""
    patches = Path(shutil.copytree(REPO_ROOT / "patches", tmp_path / "patches"))
    source = patches / "verl" / GEO_MEAN
    edited = edit(source.read_text())
    assert edited != source.read_text(), "the edit no longer matches verl 0003: update this test"
    source.write_text(edited)

    code, lines = _lint(patches, capsys)

    assert code == 1
    for series in ("verl-0.7", "verl-0.7.0"):
        problem = next(line for line in lines if f"/{series}/series:{COPY_LINE}: " in line)
        assert f"is a copy of verl/{GEO_MEAN}, but" in problem and says in problem
        assert problem.endswith(f"scripts/export.sh checkout {series} --force && scripts/export.sh export {series}")
