"""A tree patched by an earlier series of this patchset is recognised as such, never as "fixed upstream", and one
command (``apply --upgrade``) replaces it with today's series, all or nothing.

Invariants, on the fake world with an earlier revision of its verl series (``make_earlier_series``: 0002 scaled by
three then, by two now; ``patches/history.json`` generated from a history of the two landings):

- ``--check`` names the earlier series (its ``+patchset.N``), each of its patches' state and what today's changes,
  and exits 5; a plain apply and ``--reverse`` exit 5 with the same words and the next step; the tree is intact;
- ``--upgrade`` leaves every file either series touches byte-identical to today's series applied to the release,
  keeps the user's changes to other files and records the series (``<git-dir>/patchset/applied-verl.json``), after
  which ``--check`` finds it applied; a change of the user's own in a file the earlier series wrote is refused by
  name, and failing regression tests put the earlier series back;
- a series that no manifest knows (applied by this tool from another patches folder) is recognised from its record.

On the pinned checkouts, the real history: the series of b7fc6a5 (landed as c57a833) and of the landing before it
that changed ``patches/`` (8f6fe7f), each applied by hand to verl 0.8.0 and trinity-rft 0.6.0, and b7fc6a5's Trinity
series with 0007 left out. Killed runs: ``test_faults_upgrade.py``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from patchset_fakes import (
    EARLIER_CORE,
    REPO_ROOT,
    TEST_GIT_ENV,
    VERL_PATCH_1,
    VERL_PATCH_2,
    apply_by_hand,
    git,
    make_earlier_series,
    tree_state,
)

from patchset.cli import main
from patchset.series.history import load_history
from patchset.series.model import load_series
from patchset.upstreams.registry import UPSTREAMS

CORE = "verl/trainer/ppo/core_algos.py"
NEW_TEST = "tests/trainer/ppo/test_scale_on_cpu.py"  # what 0001 adds, in either series


@pytest.fixture
def earlier(world, tmp_path: Path) -> Path:
    """The earlier patches folder; ``world.verl`` patched by hand with that series (no record, as before records)."""
    patches = make_earlier_series(world, tmp_path / "earlier")
    apply_by_hand(world.verl, patches, VERL_PATCH_1, VERL_PATCH_2)
    assert (world.verl / CORE).read_text() == EARLIER_CORE
    return patches


def _today(world, tmp_path: Path) -> Path:
    """Today's series applied by the tool to a fresh clone of the release."""
    fresh = tmp_path / "fresh-verl"
    git(tmp_path, "clone", "-q", str(world.verl), str(fresh))
    assert main(world.args("--no-test", str(fresh))) == 0
    return fresh


def test_check_names_the_earlier_series_and_exits_5_and_apply_refuses_alike(world, earlier, capsys):
    before = tree_state(world.verl)

    code = main(world.args("--check", str(world.verl)))

    out = capsys.readouterr().out
    assert code == 5
    assert f"verl 0.8.0 at {world.verl} holds an earlier series of this patchset, the verl series of +patchset.1" in out
    assert "0001 applied, 0002 applied; today's series against it: 0002 changed" in out
    assert "fixed upstream" not in out and f"Next: scripts/apply.sh --upgrade {world.verl}" in out
    for argv in ([str(world.verl)], ["--reverse", str(world.verl)]):
        assert main(world.args("--no-test", *argv)) == 5
        err = capsys.readouterr().err
        assert err.startswith("error: verl 0.8.0 at") and "holds an earlier series" in err and "--upgrade" in err
    assert tree_state(world.verl) == before


def test_upgrade_gives_todays_series_byte_for_byte_and_keeps_other_changes(
    world, earlier, tmp_path, capsys, regression_calls
):
    (world.verl / "MY_NOTES.txt").write_text("mine\n")
    (world.verl / "README.md").write_text("fake verl, my words\n")

    code = main(world.args("--upgrade", str(world.verl)))

    out = capsys.readouterr().out
    assert code == 0
    assert "the verl series of +patchset.1 (newest commit " in out
    assert ") replaced by the verl series of +patchset.2 (newest commit " in out
    assert regression_calls == [({"verl": world.verl.resolve()}, "fixed")]
    fresh = _today(world, tmp_path)
    for rel in (CORE, NEW_TEST):
        assert (world.verl / rel).read_bytes() == (fresh / rel).read_bytes(), rel
    assert (world.verl / "MY_NOTES.txt").read_text() == "mine\n"
    assert (world.verl / "README.md").read_text() == "fake verl, my words\n"
    assert (world.verl / ".git" / "patchset" / "applied-verl.json").is_file()
    assert sorted(path.name for path in (world.verl / ".git" / "patchset").iterdir()) == ["applied-verl.json"]
    assert main(world.args("--check", str(world.verl))) == 0
    assert "0 would apply, 2 already applied" in capsys.readouterr().out


def test_upgrade_refuses_a_change_of_the_users_own_in_a_file_the_earlier_series_wrote(world, earlier, capsys):
    test_file = world.verl / NEW_TEST
    test_file.write_text(test_file.read_text() + "# my own line\n")
    before = tree_state(world.verl)

    code = main(world.args("--upgrade", "--no-test", str(world.verl)))

    err = capsys.readouterr().err
    assert code == 2
    assert f"error: {world.verl} has changes of its own in {NEW_TEST}, which the verl series of +patchset.1" in err
    assert tree_state(world.verl) == before


def test_failing_tests_put_the_earlier_series_back(world, earlier, capsys, monkeypatch):
    from patchset.apply import job

    monkeypatch.setattr(job, "_regression", lambda *args: (1, ["Regression tests FAILED: 0 passed, 1 failed"]))
    before = tree_state(world.verl)

    assert main(world.args("--upgrade", str(world.verl))) == 1

    assert "the upgrade is undone because the regression tests failed" in capsys.readouterr().err
    assert tree_state(world.verl) == before


def test_a_series_no_manifest_knows_is_recognised_from_its_record(world, tmp_path, capsys):
    patches = make_earlier_series(world, tmp_path / "earlier")
    (world.patches / "history.json").unlink()  # today's patches folder knows no earlier series
    assert (
        main(["apply", "--patches-dir", str(patches), "--cache", str(world.cache), "--no-test", str(world.verl)]) == 0
    )

    code = main(world.args("--check", str(world.verl)))

    assert code == 5
    assert "holds an earlier series of this patchset, an unreleased verl series" in capsys.readouterr().out


# --- the real history, on the pinned checkouts ------------------------------------------------------------

B7FC6A5_LANDING, LANDING_BEFORE = "c57a833", "8f6fe7f"  # the series of b7fc6a5, and the landing before it
NO_0007 = "0007-trainer-make-one-dpo-training-step-one-optimizer.patch"


def _release_tree(template: Path, key: str, dest: Path) -> Path:
    """A git checkout of the pinned release ``template`` holding only what a series ever touched and the version file
    (a twentieth of the files: what apply, --check and --upgrade read of it), committed."""
    history = load_history(REPO_ROOT / "patches")
    paths = {c.path for s in history.series.values() if s.folder == key for p in s.patches for c in p.changes}
    for rel in sorted({*paths, UPSTREAMS[key].version_file}):
        if (template / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(template / rel, dest / rel)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in TEST_GIT_ENV.items():
            patch.setenv(name, value)
        git(dest, "init", "-q")
        git(dest, "add", "-A")
        git(dest, "commit", "-qm", "the release")
    return dest


def _historic(commit: str, folder: str, tree: Path, leave_out: str = "") -> None:
    """Apply ``folder``'s series as it was at ``commit`` (read from this repository's history) to ``tree``."""
    show = ["git", "-C", str(REPO_ROOT), "show"]
    series = subprocess.run([*show, f"{commit}:patches/{folder}/series"], capture_output=True, text=True, check=True)
    for name in [line.split("#")[0].strip() for line in series.stdout.splitlines()]:
        if name and name != leave_out:
            text = subprocess.run([*show, f"{commit}:patches/{folder}/{name}"], capture_output=True, check=True)
            subprocess.run(["git", "apply"], input=text.stdout, cwd=tree, check=True)


@pytest.fixture
def release(pinned_templates, tmp_path: Path):
    """``release("trinity")``: a fresh ``_release_tree`` of that pinned release."""
    return lambda key: _release_tree(pinned_templates[key], key, tmp_path / key)


@pytest.fixture(scope="module")
def history_available() -> None:
    probe = ["git", "-C", str(REPO_ROOT), "cat-file", "-e", f"{LANDING_BEFORE}^{{commit}}"]
    if subprocess.run(probe, capture_output=True).returncode != 0:
        pytest.skip(f"this checkout's history lacks {LANDING_BEFORE} (a shallow clone)")


@pytest.fixture(scope="module")
def fresh(pinned_templates, tmp_path_factory) -> dict[str, Path]:
    """Today's series applied by the tool to each pinned release, once for the module."""
    base = tmp_path_factory.mktemp("fresh")
    trees = {key: _release_tree(template, key, base / key) for key, template in pinned_templates.items()}
    assert main(["apply", "--no-test", *map(str, trees.values())]) == 0
    return trees


# b7fc6a5's series of both upstreams, and the landing before's Trinity series: its verl series is b7fc6a5's (checked)
@pytest.mark.parametrize(
    "landing, key", [(B7FC6A5_LANDING, "verl"), (B7FC6A5_LANDING, "trinity"), (LANDING_BEFORE, "trinity")]
)
def test_real_earlier_series_are_named_by_check_and_upgraded_to_todays_bytes(
    landing, key, history_available, release, fresh, capsys
):
    history = load_history(REPO_ROOT / "patches")
    landed = {commit[:7]: s for s in history.series.values() for commit in s.commits if commit and s.folder == key}
    assert landed[LANDING_BEFORE].ident == landed[B7FC6A5_LANDING].ident or key == "trinity"
    tree = release(key)
    _historic(landing, key, tree)
    (tree / "MY_NOTES.txt").write_text("mine\n")
    capsys.readouterr()

    assert main(["apply", "--check", str(tree)]) == 5
    out = capsys.readouterr().out
    assert f"holds an earlier series of this patchset, {landed[landing].shown}" in out
    assert "fixed upstream" not in out

    assert main(["apply", "--upgrade", "--no-test", str(tree)]) == 0
    touched = {c.path for s in history.series.values() if s.folder == key for p in s.patches for c in p.changes}
    for rel in sorted(touched):
        old, new = tree / rel, fresh[key] / rel
        assert old.exists() == new.exists() and (not old.exists() or old.read_bytes() == new.read_bytes()), rel
    assert (tree / "MY_NOTES.txt").read_text() == "mine\n"


def test_real_series_with_0007_left_out_is_recognised_patch_by_patch(history_available, release, capsys):
    tree = release("trinity")
    _historic(B7FC6A5_LANDING, "trinity", tree, leave_out=NO_0007)

    assert main(["apply", "--check", str(tree)]) == 5

    out = capsys.readouterr().out
    assert "0006 applied, 0007 not applied, 0008 applied" in out and "fixed upstream" not in out


def test_real_series_merged_with_3way_onto_committed_changes_is_upgraded_keeping_them(
    history_available, release, capsys
):
    """The earlier series merged (``git apply --3way``) onto a losses.py the user changed and committed: its blobs
    are in no state the series wrote, so the series' texts, recovered from this repository's history by the
    manifest's commits, take it out; the user's line stays, and today's series goes in."""
    tree = release("trinity")
    losses = tree / "trinity/trainer/verl/losses.py"
    lines = losses.read_text().splitlines(keepends=True)
    losses.write_text("".join([*lines[:5], "# our fork's note\n", *lines[5:]]))
    git(tree, "commit", "-qam", "a change of our own")
    show = ["git", "-C", str(REPO_ROOT), "show"]
    series = subprocess.run([*show, f"{B7FC6A5_LANDING}:patches/trinity/series"], capture_output=True, text=True)
    for name in [line for line in series.stdout.splitlines() if line[:1].isdigit()]:
        text = subprocess.run([*show, f"{B7FC6A5_LANDING}:patches/trinity/{name}"], capture_output=True).stdout
        subprocess.run(["git", "apply", "--3way"], input=text, cwd=tree, check=True, capture_output=True)
    git(tree, "reset", "-q")  # --3way staged what it merged; apply never touches the index

    assert main(["apply", "--check", str(tree)]) == 5
    assert "0001 differs (trinity/trainer/verl/losses.py), 0002 applied" in capsys.readouterr().out

    assert main(["apply", "--upgrade", "--no-test", str(tree)]) == 0
    assert "# our fork's note\n" in losses.read_text()
    assert main(["apply", "--check", str(tree)]) == 0
    today = len(load_series(REPO_ROOT / "patches", "trinity").patches)  # every patch of today's series, in
    assert f"0 would apply, {today} already applied" in capsys.readouterr().out
