"""``patches/history.json`` knows every series this repository ever landed, and today's.

Invariants: each series folder's series as it is in the work tree is in the manifest, by the sha256 of its patch
texts; every series that ``git log --first-parent -- patches/`` lands (the generator, run on this checkout's history)
is in it too, so an earlier series is recognised from a shallow clone or an export; the landing of b7fc6a5's series
and the one before it are there at their revisions; and each patch's blob ids are the ones git gives the files.
"""

from __future__ import annotations

import subprocess

import pytest
from patchset_fakes import REPO_ROOT, VERL_PATCH_1, git

from patchset.plumbing.gitops import blob_id
from patchset.plumbing.patchtext import patch_blob_changes
from patchset.series.history import _from_json, generate, load_history, missing, of_series
from patchset.series.model import load_series

PATCHES = REPO_ROOT / "patches"


def test_todays_series_are_in_the_manifest():
    history = load_history(PATCHES)
    folders = sorted(path.name for path in PATCHES.iterdir() if (path / "series").is_file())

    lacking = [name for name in folders if history.find(name, of_series(load_series(PATCHES, name)).ident) is None]

    assert lacking == [], f"patches/history.json lacks today's {lacking}: run python -m patchset export history"


def test_every_landed_series_is_in_the_manifest_at_its_revision():
    shallow = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "--is-shallow-repository"], capture_output=True, text=True
    )
    if shallow.returncode != 0 or shallow.stdout.strip() != "false":
        pytest.skip("not a full git clone: the manifest cannot be compared with the history")
    written, generated = load_history(PATCHES), _from_json(generate(PATCHES))

    assert missing(written, generated) == [], "run python -m patchset export history"
    landed = {
        commit[:7]: s.revisions[s.commits.index(commit)]
        for s in written.series.values()
        for commit in s.commits
        if commit
    }
    assert (landed["c57a833"], landed["8f6fe7f"]) == (31, 25)  # b7fc6a5's series, and the landing before it


def test_blob_ids_are_read_from_the_index_lines_as_git_gives_them(world):
    text = (world.patches / "verl" / VERL_PATCH_1).read_text()

    changes = patch_blob_changes(text)

    git(world.verl, "apply", str(world.patches / "verl" / VERL_PATCH_1))
    for change in changes:
        assert change.after == blob_id((world.verl / change.path).read_bytes())
        assert change.after == git(world.verl, "hash-object", change.path).strip()
    assert [change.before is None for change in changes] == [True, False]  # the test added, core_algos.py changed


def test_the_overlays_carry_todays_series_and_status_says_which():
    from patchset_overlay.status import carried_series, render

    carried = carried_series()
    history = load_history(PATCHES)

    for folder, ident in carried["series"].items():
        assert ident == of_series(load_series(PATCHES, folder)).ident, "run python -m patchset export history"
        assert carried["revision"] in history.series[ident].revisions
    entry = {"overlay": "verl", "enabled": True, "how": "automatic", "upstream": "verl", "version": "0.8.0"}
    shown = render([{**entry, "problem": None, "pieces": [], "cannot_change": "", "series": carried}])
    # a series generated before its landing commit is recorded as not landed yet (None) until the next generation
    revision = carried["revision"]
    label = f"+patchset.{revision}" if revision is not None else "an unreleased revision"
    assert f"series carried: {label} of the patchset (trinity " in shown
