"""The real series on real checkouts of the pinned releases: check, apply twice, reverse.

Invariants, on each default pin, on verl 0.9.1 (where the series skips what upstream has and applies the rest) and
on verl 0.7.0 and 0.7.1 (each takes the series of its release line): ``--check`` on a fresh checkout says every
patch would apply or is skipped, none fails; applying twice succeeds both times and the second run changes nothing;
``--reverse`` restores the tree byte for byte (files and git state). Needs the vanilla checkouts in the cache
(``scripts/test.sh`` fetches them first); skipped when they are absent.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from patchset_fakes import tree_digest

from patchset.cli import main
from patchset.upstreams.fetch import resolve_cache
from patchset.upstreams.pins import load_pins

REPO_ROOT = Path(__file__).resolve().parents[2]
PINS = load_pins(REPO_ROOT / "patches" / "upstreams.toml")
# read at import: the autouse fixture in conftest.py clears PATCHSET_CACHE for each test
CACHE = resolve_cache(None, os.environ, REPO_ROOT)


def _git_state(tree: Path) -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=tree, capture_output=True, text=True, check=True).stdout

    return git("rev-parse", "HEAD") + git("status", "--porcelain", "--untracked-files=all") + git("stash", "list")


# the default pins; verl 0.9.1, a target that takes part of the verl series (0001 and 0002 are skipped there); verl
# 0.7.0 and 0.7.1, each taking the series of its release line
ROUNDTRIP_PINS = [*PINS.defaults(), *(PINS.find("verl", version) for version in ("0.9.1", "0.7.0", "0.7.1"))]


@pytest.fixture(params=ROUNDTRIP_PINS, ids=lambda pin: pin.label)
def fresh_checkout(request, tmp_path: Path) -> Path:
    pin = request.param
    vanilla = CACHE.upstreams / pin.dirname
    if not (vanilla / ".git").exists():
        pytest.skip(f"no cached checkout of {pin.label} at {vanilla} (scripts/test.sh fetches it)")
    clone = tmp_path / pin.dirname
    subprocess.run(["git", "clone", "-q", str(vanilla), str(clone)], check=True)
    return clone


def test_check_reports_every_patch_applicable_on_a_fresh_checkout(fresh_checkout, capsys):
    assert main(["apply", "--check", str(fresh_checkout)]) == 0

    out = capsys.readouterr().out
    assert "Would apply 000" in out
    assert "does not apply" not in out


def test_apply_twice_then_reverse_restores_the_tree(fresh_checkout, capsys):
    before = (tree_digest(fresh_checkout), _git_state(fresh_checkout))

    assert main(["apply", "--no-test", str(fresh_checkout)]) == 0
    patched = (tree_digest(fresh_checkout), _git_state(fresh_checkout))
    assert patched != before
    assert main(["apply", "--no-test", str(fresh_checkout)]) == 0
    assert "already applied" in capsys.readouterr().out
    assert (tree_digest(fresh_checkout), _git_state(fresh_checkout)) == patched

    assert main(["apply", "--reverse", str(fresh_checkout)]) == 0
    assert (tree_digest(fresh_checkout), _git_state(fresh_checkout)) == before
