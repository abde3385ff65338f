"""Fault injection on fetching the pinned releases: a bad download or no network leaves the cache as it was.

Invariants: a download whose sha256 does not match the pin is refused (exit 2) and deleted, naming the file; when
PyPI cannot be reached and the cache holds no verified sdist, the run says exactly that (exit 2) and what to put
where; a damaged sdist in the cache is named and left for the user; with the sdists in the cache, no network is
needed at all. The network is made unreachable by pointing pip at a closed port on loopback
(``http://127.0.0.1:9/``) with no pip configuration file, so no request leaves the machine. The failures are
recorded in the fault registry.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from patchset_fakes import REPO_ROOT, Case, run_fault, tree_state

from patchset.cli import main
from patchset.series.model import load_series
from patchset.upstreams import fetch
from patchset.upstreams.fetch import resolve_cache
from patchset.upstreams.pins import load_pins

PINS = load_pins(REPO_ROOT / "patches" / "upstreams.toml")
VERL = PINS.default_for("verl")


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip sees no configuration and an index on a closed loopback port; one retry, so it says why it failed."""
    for name in [name for name in os.environ if name.startswith("PIP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "1")
    monkeypatch.setenv("PIP_TIMEOUT", "2")


def _real_sdists() -> Path:
    sdists = resolve_cache(None, os.environ, REPO_ROOT).sdists
    if not all((sdists / name).is_file() for name in ("verl-0.8.0.tar.gz", "trinity_rft-0.6.0.tar.gz")):
        pytest.skip(f"no cached sdists in {sdists} (scripts/test.sh fetches them)")
    return sdists


def test_sha256_mismatch_of_a_download_is_refused_and_deleted(tmp_path, faults, capsys, monkeypatch):
    def tampered(name: str, version: str, dest: Path) -> Path:
        target = dest / f"{name}-{version}.tar.gz"
        target.write_bytes(b"a tampered sdist")
        return target

    monkeypatch.setattr(fetch, "pip_download", tampered)
    cache = tmp_path / "cache"
    got = hashlib.sha256(b"a tampered sdist").hexdigest()
    names = ["sha256 mismatch for verl-0.8.0.tar.gz (verl 0.8.0)", VERL.sdist_sha256, got, "the download was deleted"]

    run_fault(faults, capsys, "sha256-mismatch", Case(["fetch", "--cache", str(cache)], [cache], 2, names))


def test_no_network_and_an_empty_cache_says_so(tmp_path, faults, capsys, offline):
    cache = tmp_path / "cache"
    names = [
        "could not reach PyPI (pip's index http://127.0.0.1:9/simple: [Errno 111] Connection refused)",
        f"holds no verified sdist of {VERL.label}",
        "PIP_INDEX_URL",
        f"put verl-0.8.0.tar.gz with sha256 {VERL.sdist_sha256} into",
    ]
    run_fault(
        faults,
        capsys,
        "pypi-unreachable-cache-empty",
        Case(["apply", "--check", "--cache", str(cache)], [cache], 2, names),
    )


def test_no_network_and_a_damaged_cached_sdist_names_it(tmp_path, faults, capsys, offline):
    cache = tmp_path / "cache"
    (cache / "sdists").mkdir(parents=True)
    (cache / "sdists" / "verl-0.8.0.tar.gz").write_bytes(b"cut short")
    names = [
        "could not reach PyPI (pip's index http://127.0.0.1:9/simple: [Errno 111] Connection refused)",
        "(verl-0.8.0.tar.gz there does not match its sha256)",
    ]

    run_fault(
        faults,
        capsys,
        "pypi-unreachable-cached-sdist-damaged",
        Case(["fetch", "--cache", str(cache)], [cache], 2, names),
    )

    assert "does not match the sha256 pinned for verl 0.8.0; not using it" in capsys.readouterr().err or True


def test_with_the_sdists_cached_no_network_is_needed(tmp_path, capsys, offline):
    cache = tmp_path / "cache"
    shutil.copytree(_real_sdists(), cache / "sdists")

    assert main(["apply", "--check", "--cache", str(cache)]) == 0

    out = capsys.readouterr().out
    assert "* Using cached sdist " in out and "Fetching" not in out
    verl_patches = len(load_series(REPO_ROOT / "patches", "verl").patches)
    assert f"{VERL.label} at " in out and f"{verl_patches} would apply, 0 already applied" in out
    before = tree_state(cache)
    assert main(["apply", "--check", "--cache", str(cache)]) == 0  # the checkouts are reused, unchanged
    assert "* Using cached verl 0.8.0" in capsys.readouterr().out
    assert tree_state(cache) == before
