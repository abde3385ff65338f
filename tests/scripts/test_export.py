"""Exporting the series from a maintainer checkout is byte-stable, and every edit of the checkout shows up.

Invariants. On the real series and clones of the real pinned checkouts (skipped when the cache lacks them;
``scripts/test.sh`` fetches them first): ``checkout`` then ``export --dry-run`` exits 0; an export into a copy of
``patches/`` leaves every file byte for byte as committed; the same series always gives the same commits; an
amended commit makes ``--dry-run`` exit 1, name the patch and write nothing; a new commit is exported as the next
numbered patch, listed in ``series`` and clean under the lint. Without the cache: export then checkout round-trips
on a fake upstream, new names follow ``NNNN-<area>-<slug>``, existing patches keep their names when reordered or
reworded (the ``Patch-Filename`` trailer of their commits, which no exported file carries), ``series`` keeps its
comments, and anything but a maintainer checkout is refused with exit 2.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from patchset import cli
from patchset.export.commit_message import upstream_paragraphs
from patchset.export.series_export import TRAILER, assign_names, new_slug, series_text, with_trailer, without_trailer
from patchset.series.lint import lint_patches_dir
from patchset.series.model import load_series, read_patch
from patchset.upstreams.fetch import resolve_cache
from patchset.upstreams.pins import load_pins, release_key


def main(argv: list[str]) -> int:
    """``python -m patchset export ARGV``."""
    return cli.main(["export", *argv])


REPO_ROOT = Path(__file__).resolve().parents[2]
PINS = load_pins(REPO_ROOT / "patches" / "upstreams.toml")
# Resolved at import, before the autouse fixture drops $PATCHSET_CACHE, so that scripts/test.sh's --cache counts.
CACHE = resolve_cache(None, os.environ, REPO_ROOT)

DEP3 = "Why: a test.\n\nAuthor: Test\nBug: https://example.invalid/1\nForwarded: no, a test\nLast-Update: 2026-12-02\n"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _copy_patches(tmp_path: Path) -> Path:
    return Path(shutil.copytree(REPO_ROOT / "patches", tmp_path / "patches-copy"))


# --- the real series on the real pinned checkouts -----------------------------------------------------------


# every series folder, by the name `checkout` takes: an upstream key (its default pin) or a series of another release
# line (verl-0.7: the newest release it targets)
SERIES = {pin.key: pin for pin in PINS.defaults()}
for _pin in sorted(PINS.pins, key=lambda p: release_key(p.version)):
    if _pin.target and _pin.series not in {p.series for p in PINS.defaults()}:
        SERIES[_pin.series] = _pin


@pytest.fixture(params=list(SERIES))
def real_checkout(request, tmp_path: Path) -> tuple[str, Path]:
    """A maintainer checkout of each series on the release it is made against, made by ``checkout`` from the cached
    vanilla checkout."""
    pin = SERIES[request.param]
    if not (CACHE.upstreams / pin.dirname / ".git").exists():
        pytest.skip(f"no cached checkout of {pin.label} under {CACHE.upstreams} (scripts/test.sh fetches it)")
    dest = tmp_path / "maintain" / pin.dirname
    assert main(["checkout", request.param, "--cache", str(CACHE.root), str(dest)]) == 0
    return request.param, dest


def test_dry_run_on_a_fresh_checkout_is_byte_identical(real_checkout, capsys):
    key, checkout = real_checkout
    capsys.readouterr()

    assert main(["export", key, str(checkout), "--dry-run"]) == 0

    assert "up to date" in capsys.readouterr().out


def test_export_of_a_fresh_checkout_rewrites_every_file_byte_for_byte(real_checkout, tmp_path):
    key, checkout = real_checkout
    copy = _copy_patches(tmp_path)

    assert main(["export", key, str(checkout), "--patches-dir", str(copy)]) == 0

    assert _files(copy) == _files(REPO_ROOT / "patches")


# Settings a maintainer might have that change what a plain git format-patch writes.
HOSTILE_CONFIG = {
    "diff.noprefix": "true",
    "diff.mnemonicPrefix": "true",
    "diff.algorithm": "histogram",
    "diff.context": "5",
    "diff.renames": "copies",
    "diff.orderFile": "/etc/hostname",
    "core.quotePath": "false",
    "format.numbered": "true",
    "format.signature": "sig",
    "format.headers": "X-Extra: 1",
    "format.from": "true",
    "format.to": "list@example.invalid",
    "format.thread": "shallow",
    "format.signOff": "true",
    "format.subjectPrefix": "RFC",
    "format.useAutoBase": "true",
    "format.noprefix": "true",
}


def test_repository_git_config_does_not_change_the_export(real_checkout, capsys):
    key, checkout = real_checkout
    for name, value in HOSTILE_CONFIG.items():
        _git(checkout, "config", name, value)
    capsys.readouterr()

    assert main(["export", key, str(checkout), "--dry-run"]) == 0, capsys.readouterr().out


def test_the_same_series_always_gives_the_same_commits(real_checkout, tmp_path):
    key, checkout = real_checkout
    again = tmp_path / "again"

    assert main(["checkout", key, "--cache", str(CACHE.root), str(again)]) == 0

    assert _git(again, "rev-parse", "patches") == _git(checkout, "rev-parse", "patches")


def test_amended_checkout_fails_the_dry_run_naming_the_patch(real_checkout, tmp_path, capsys):
    key, checkout = real_checkout
    pin = SERIES[key]
    last = load_series(REPO_ROOT / "patches", pin.series).patches[-1]  # the commit --amend changes
    edited = checkout / next(path for path in last.files if (checkout / path).is_file())
    edited.write_text(edited.read_text() + "# edited in the maintainer checkout\n")
    _git(checkout, "commit", "-q", "-a", "--amend", "--no-edit")
    copy = _copy_patches(tmp_path)
    capsys.readouterr()

    assert main(["export", key, str(checkout), "--dry-run", "--patches-dir", str(copy)]) == 1

    out = capsys.readouterr().out
    assert f"{last.name}: would change" in out
    assert "+# edited in the maintainer checkout" in out
    assert _files(copy) == _files(REPO_ROOT / "patches")


def test_new_commit_is_exported_as_the_next_numbered_patch(real_checkout, tmp_path, capsys):
    key, checkout = real_checkout
    (checkout / "NOTES.md").write_text("a note\n")
    _git(checkout, "add", "NOTES.md")
    subject = (
        "[docs] feat: add a note for maintainers" if SERIES[key].key == "verl" else "[Docs] Add a note for maintainers"
    )
    _git(checkout, "commit", "-q", "-m", f"{subject}\n\n{DEP3}")
    copy = _copy_patches(tmp_path)
    folder = copy / SERIES[key].series
    old_series = (folder / "series").read_text().splitlines()
    new_name = f"{len(load_series(copy, SERIES[key].series).patches) + 1:04d}-docs-add-note-maintainers.patch"

    assert main(["export", key, str(checkout), "--dry-run", "--patches-dir", str(copy)]) == 1
    assert f"{new_name}: would be added" in capsys.readouterr().out
    assert main(["export", key, str(checkout), "--patches-dir", str(copy)]) == 0

    assert (folder / "series").read_text().splitlines() == [*old_series, new_name]
    groups = (folder / "groups").read_text().splitlines()
    assert groups[-1] == f"docs-add-note-maintainers {new_name[:4]}"  # a new patch is a new concern until moved
    assert read_patch(folder / new_name).files == ("NOTES.md",)
    # the new concern still needs its PR body and its teeth: the lint names what to write (or the patch joins a group)
    pr_body, teeth = lint_patches_dir(copy)[1]
    assert pr_body.path == folder / "groups" and "docs-add-note-maintainers has no" in pr_body.message
    assert teeth.path == folder / "parts.toml" and f"{new_name} has no teeth" in teeth.message
    body = "A note for maintainers.\n\n## Why this is not a duplicate\n\nNo PR adds one.\n"
    (folder / "pr" / "docs-add-note-maintainers.md").write_text(f"{subject}\n\n{body}")
    with (folder / "parts.toml").open("a") as parts_file:
        parts_file.write('\n[docs-add-note-maintainers]\nteeth = "test_note"\n')
    assert lint_patches_dir(copy)[1] == []
    assert main(["export", key, str(checkout), "--dry-run", "--patches-dir", str(copy)]) == 0


def test_uncommitted_changes_are_not_exported_and_are_warned_about(real_checkout, capsys):
    key, checkout = real_checkout
    (checkout / "NOTES.md").write_text("not committed\n")

    assert main(["export", key, str(checkout), "--dry-run"]) == 0

    assert "uncommitted changes" in capsys.readouterr().err


# --- a fake upstream (no cache needed) ----------------------------------------------------------------------


def _fake_world(tmp_path: Path) -> tuple[Path, Path]:
    """A cache holding a vanilla checkout of "verl 0.8.0" (what fetch would have made), and an empty patches dir
    whose upstreams.toml pins it."""
    cache = tmp_path / "cache"
    vanilla = cache / "upstreams" / "verl-0.8.0"
    vanilla.mkdir(parents=True)
    (vanilla / "core.py").write_text("".join(f"line {n}\n" for n in range(1, 21)))
    _git(vanilla, "init", "-q", "--initial-branch=main")
    _git(vanilla, "add", "-A")
    _git(vanilla, "commit", "-q", "-m", "vanilla")
    _git(vanilla, "tag", "v0.8.0")
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "upstreams.toml").write_text(
        '[[upstream]]\nkey = "verl"\nname = "verl"\nversion = "0.8.0"\n'
        f'sdist_sha256 = "{"0" * 64}"\nrepository = "https://example.invalid/verl"\ntag = "v0.8.0"\n'
        'series = "verl"\ndefault = true\n'
    )
    return cache, patches


def _commit_edit(checkout: Path, line: int, text: str, message: str) -> None:
    path = checkout / "core.py"
    lines = path.read_text().splitlines(keepends=True)
    lines[line - 1] = text + "\n"
    path.write_text("".join(lines))
    _git(checkout, "commit", "-q", "-a", "-m", message)


def test_export_then_checkout_round_trips_on_a_fake_upstream(tmp_path, capsys):
    cache, patches = _fake_world(tmp_path)
    first = tmp_path / "first"
    assert main(["checkout", "verl", "--cache", str(cache), "--patches-dir", str(patches), str(first)]) == 2
    assert "series" in capsys.readouterr().err  # no series yet: checkout refuses, naming the missing file
    (patches / "verl").mkdir()
    (patches / "verl" / "series").write_text("# the order\n")
    assert main(["checkout", "verl", "--cache", str(cache), "--patches-dir", str(patches), str(first)]) == 0
    _commit_edit(first, 3, "line three", f"[trainer] fix: spell out line three\n\n{DEP3}")
    _commit_edit(first, 15, "line fifteen", f"[trainer, ci] Fix: Spell out line 15 too\n\n{DEP3}")

    assert main(["export", "verl", str(first), "--patches-dir", str(patches)]) == 0
    second = tmp_path / "second"
    assert main(["checkout", "verl", "--cache", str(cache), "--patches-dir", str(patches), str(second)]) == 0
    assert main(["export", "verl", str(second), "--patches-dir", str(patches), "--dry-run"]) == 0

    names = ["0001-trainer-spell-out-line-three.patch", "0002-trainer-spell-out-line-15-too.patch"]
    assert (patches / "verl" / "series").read_text() == "# the order\n" + "".join(f"{n}\n" for n in names)
    (patches / "verl" / "parts.toml").write_text(
        '[trainer-spell-out-line-three]\nteeth = "three"\n[trainer-spell-out-line-15-too]\nteeth = "15"\n'
    )
    assert lint_patches_dir(patches)[1] == []
    assert _git(second, "log", "--format=%an <%ae> %ad|%cn <%ce> %cd", "v0.8.0..patches").splitlines() == [
        "Test <test@example.invalid> " + date + "|Test <test@example.invalid> " + date
        for date in _git(first, "log", "--format=%ad", "v0.8.0..patches").splitlines()
    ]


def test_reordered_commits_keep_their_names_renumbered(tmp_path, capsys):
    cache, patches = _fake_world(tmp_path)
    (patches / "verl").mkdir()
    (patches / "verl" / "series").write_text("")
    checkout = tmp_path / "m"
    assert main(["checkout", "verl", "--cache", str(cache), "--patches-dir", str(patches), str(checkout)]) == 0
    _commit_edit(checkout, 3, "three", f"[a] fix: first change\n\n{DEP3}")
    _commit_edit(checkout, 15, "fifteen", f"[b] fix: second change\n\n{DEP3}")
    assert main(["export", "verl", str(checkout), "--patches-dir", str(patches)]) == 0
    _git(checkout, "rebase", "-q", "--onto", "v0.8.0", "HEAD~1")  # drop the first change, keep the second
    capsys.readouterr()

    assert main(["export", "verl", str(checkout), "--patches-dir", str(patches), "--dry-run"]) == 1
    out = capsys.readouterr().out
    assert "0001-b-second-change.patch: would replace 0002-b-second-change.patch (+" in out
    assert "0001-a-first-change.patch: would be removed" in out
    assert main(["export", "verl", str(checkout), "--patches-dir", str(patches)]) == 0
    assert sorted(p.name for p in (patches / "verl").iterdir()) == ["0001-b-second-change.patch", "series"]


def test_a_patch_keeps_the_name_its_trailer_gives_and_a_checkout_without_trailers_is_warned_about(tmp_path, capsys):
    """A patch renamed in the series keeps its new name through a fresh checkout (its commit's trailer), not the one
    its subject would give; a checkout whose commits carry no trailer names them by subject, and says so."""
    cache, patches = _fake_world(tmp_path)
    (patches / "verl").mkdir()
    (patches / "verl" / "series").write_text("")
    old = tmp_path / "old"
    assert main(["checkout", "verl", "--cache", str(cache), "--patches-dir", str(patches), str(old)]) == 0
    _commit_edit(old, 3, "three", f"[a] fix: first change\n\n{DEP3}")  # a commit of one's own: no trailer
    assert main(["export", "verl", str(old), "--patches-dir", str(patches)]) == 0
    (patches / "verl" / "0001-a-first-change.patch").rename(patches / "verl" / "0001-a-renamed.patch")
    (patches / "verl" / "series").write_text("0001-a-renamed.patch\n")
    fresh = tmp_path / "fresh"
    assert main(["checkout", "verl", "--cache", str(cache), "--patches-dir", str(patches), str(fresh)]) == 0
    assert _git(fresh, "log", "-1", "--format=%(trailers:key=Patch-Filename,valueonly)").strip() == (
        "0001-a-renamed.patch"
    )
    capsys.readouterr()

    assert main(["export", "verl", str(fresh), "--patches-dir", str(patches), "--dry-run"]) == 0
    assert main(["export", "verl", str(old), "--patches-dir", str(patches), "--dry-run"]) == 1

    captured = capsys.readouterr()
    assert "0001-a-first-change.patch: would be added" in captured.out
    assert "carries a Patch-Filename trailer" in captured.err and "0001-a-renamed.patch would go" in captured.err


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("missing", "does not exist; make one with: scripts/export.sh checkout verl"),
        ("plain", "is not the top of a git checkout"),
        ("no-tag", "has no tag v0.8.0"),
        ("no-branch", "has no branch patches"),
        ("other-series", "is a maintainer checkout of the trinity series, not verl"),
    ],
)
def test_export_refuses_anything_but_a_maintainer_checkout(tmp_path, capsys, setup, expected):
    tree = tmp_path / "tree"
    if setup != "missing":
        tree.mkdir()
    if setup not in ("missing", "plain"):
        (tree / "f").write_text("f\n")
        _git(tree, "init", "-q", "--initial-branch=main")
        _git(tree, "add", "-A")
        _git(tree, "commit", "-q", "-m", "x")
    if setup in ("no-branch", "other-series"):
        _git(tree, "tag", "v0.8.0")
    if setup == "other-series":
        _git(tree, "branch", "patches")
        _git(tree, "config", "patchset.series", "trinity")

    assert main(["export", "verl", str(tree), "--dry-run"]) == 2

    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.splitlines()) == 1
    assert err.startswith("error: tree ") and expected in err


def test_checkout_refuses_an_existing_destination(tmp_path, capsys):
    (tmp_path / "dest").mkdir()

    assert main(["checkout", "verl", "--cache", str(tmp_path / "no-cache"), str(tmp_path / "dest")]) == 2

    assert "already exists" in capsys.readouterr().err
    assert not (tmp_path / "no-cache").exists()


def test_help_documents_exit_codes(capsys):
    assert main(["export", "--help"]) == 0
    out = capsys.readouterr().out
    for line in ("0  done", "1  export --dry-run: the export would change", "2  bad input", "--dry-run"):
        assert line in out


# --- naming and the series file -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("subject", "slug"),
    [
        ("[trainer] fix: normalize critic value loss by the global mini-batch", "trainer-normalize-critic-value-loss"),
        ("[PATCH] [Trainer] Fix TrinityPolicyLoss scaling across micro-batches", "trainer-fix-trinitypolicyloss"),
        ("[ci, docs] feat(config): add a flag", "ci-add-flag"),
        ("plain subject without an area", "plain-subject-without-area"),
        ("[x] fix: ???", "x-patch"),
    ],
)
def test_new_patch_names_are_area_then_slug_of_the_subject(subject, slug):
    name = new_slug(subject)

    assert name.startswith(slug)
    assert len(name) <= 50 and name == name.lower() and set(name) <= set("abcdefghijklmnopqrstuvwxyz0123456789-")


def test_patches_keep_the_names_their_trailers_give_and_new_ones_are_named_from_their_subjects():
    old = ["0001-a-one.patch", "0002-b-two.patch", "0003-c-three.patch"]

    names = assign_names(
        [
            (None, "[n] new first"),
            ("0001-a-one.patch", "[a] one"),
            ("0002-b-two.patch", "[b] two, reworded"),
            (None, "[c] three"),  # a commit without a trailer: the entry of its subject's name
            ("0002-b-two.patch", "[b] two, cherry-picked again"),  # a second claim: the name, not the entry
        ],
        old,
    )

    assert names == [
        ("0001-n-new-first.patch", None),
        ("0002-a-one.patch", "0001-a-one.patch"),
        ("0003-b-two.patch", "0002-b-two.patch"),  # reworded: its trailer keeps its name
        ("0004-c-three.patch", "0003-c-three.patch"),
        ("0005-b-two.patch", None),
    ]


@pytest.mark.parametrize("patch", sorted((REPO_ROOT / "patches").glob("*/*.patch")), ids=lambda p: p.name)
def test_the_trailer_a_checkout_commits_is_taken_out_byte_for_byte(patch: Path):
    """Every patch of the series, with the trailer a maintainer checkout puts into its commit and without it again,
    is byte for byte the file: the series files never carry it. Upstream's commits do not either."""
    text = patch.read_bytes().decode("utf-8")

    named = with_trailer(text, patch.name)

    assert f"\n{TRAILER}: {patch.name}\n" in named.split("\ndiff --git ", 1)[0]
    assert without_trailer(named) == (text, patch.name)
    assert without_trailer(text) == (text, None)
    assert TRAILER not in "\n".join(upstream_paragraphs(named.split("\n\n", 1)[1].split("\ndiff --git ", 1)[0]))


def test_a_trailer_alone_after_prose_is_a_paragraph_of_its_own():
    text = "From: A <a@b>\nSubject: [PATCH] x\n\nProse only.\n---\ndiff --git a/f b/f\n"

    named = with_trailer(text, "0001-x.patch")

    assert (
        named
        == "From: A <a@b>\nSubject: [PATCH] x\n\nProse only.\n\nPatch-Filename: 0001-x.patch\n---\ndiff --git a/f b/f\n"
    )
    assert without_trailer(named) == (text, "0001-x.patch")


def test_series_rewrite_keeps_comments_where_they_were():
    old = ["# header", "0001-a-one.patch  # keep me", "", "0002-b-two.patch", "# footer"]

    text = series_text(old, [("0001-b-two.patch", "0002-b-two.patch"), ("0002-a-one.patch", "0001-a-one.patch")])

    assert text == "# header\n0001-b-two.patch\n\n0002-a-one.patch  # keep me\n# footer\n"
    assert (
        series_text(old, [("0001-a-one.patch", "0001-a-one.patch")])
        == "# header\n0001-a-one.patch  # keep me\n\n# footer\n"
    )
