"""Fetching: the sdist is kept only when its sha256 matches the pin; it is unpacked safely into a reproducible
git checkout tagged like the release, built under a temporary name and reused afterwards; with no PATH,
``apply`` patches fresh clones of those checkouts and never the checkouts themselves."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import pytest
from patchset_fakes import VERL_FILES, VERL_PATCH_1, World, git, make_sdist, tree_digest

from patchset.cli import main
from patchset.plumbing.errors import BadInput
from patchset.upstreams import fetch

CHECKOUT = Path("upstreams") / "verl-0.8.0"


def fetch_args(world: World, *argv: str) -> list[str]:
    return ["fetch", "--patches-dir", str(world.patches), "--cache", str(world.cache), *argv]


def test_fetch_builds_tagged_git_checkout_of_the_sdist(capsys, world, fake_pypi):
    assert main(fetch_args(world)) == 0

    checkout = world.cache / CHECKOUT
    out = capsys.readouterr().out
    assert "* Fetching verl 0.8.0 from PyPI" in out
    assert fake_pypi == ["verl==0.8.0", "trinity-rft==0.6.0"]
    assert (checkout / "verl/version/version").read_text() == "0.8.0\n"
    assert git(checkout, "rev-parse", "v0.8.0^{commit}") == git(checkout, "rev-parse", "HEAD")
    identity = "patchset <patchset@localhost> 2000-01-01T00:00:00+00:00"
    assert git(checkout, "log", "-1", "--format=%an <%ae> %ad|%cn <%ce> %cd", "--date=iso-strict") == (
        f"{identity}|{identity}\n"
    )
    assert git(checkout, "status", "--porcelain") == ""
    assert (world.cache / "sdists" / "verl-0.8.0.tar.gz").is_file()
    assert sorted(p.name for p in (world.cache / "upstreams").iterdir()) == ["trinity-rft-0.6.0", "verl-0.8.0"]


def test_fetch_is_reproducible(world, fake_pypi, tmp_path):
    assert main(fetch_args(world)) == 0
    assert main(["fetch", "--patches-dir", str(world.patches), "--cache", str(tmp_path / "other")]) == 0

    first = git(world.cache / CHECKOUT, "rev-parse", "HEAD")
    assert git(tmp_path / "other" / CHECKOUT, "rev-parse", "HEAD") == first


def test_second_fetch_reuses_cached_checkout_without_download(capsys, world, fake_pypi):
    assert main(fetch_args(world)) == 0
    capsys.readouterr()

    assert main(fetch_args(world)) == 0

    assert "* Using cached verl 0.8.0 (" in capsys.readouterr().out
    assert len(fake_pypi) == 2


def test_cached_sdist_is_reused_when_checkout_is_gone(capsys, world, fake_pypi):
    assert main(fetch_args(world)) == 0
    shutil.rmtree(world.cache / CHECKOUT)
    capsys.readouterr()

    assert main(fetch_args(world)) == 0

    assert "* Using cached sdist " in capsys.readouterr().out
    assert len(fake_pypi) == 2
    assert (world.cache / CHECKOUT / "verl/trainer/ppo/core_algos.py").is_file()


def test_cached_checkout_with_local_changes_is_rebuilt(capsys, world, fake_pypi):
    assert main(fetch_args(world)) == 0
    (world.cache / CHECKOUT / "README.md").write_text("edited\n")
    capsys.readouterr()

    assert main(fetch_args(world)) == 0

    assert "has local changes" in capsys.readouterr().out
    assert (world.cache / CHECKOUT / "README.md").read_text() == "fake verl\n"


def test_cache_dir_comes_from_environment(world, fake_pypi, monkeypatch, tmp_path):
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "envcache"))

    assert main(["fetch", "--patches-dir", str(world.patches)]) == 0

    assert (tmp_path / "envcache" / CHECKOUT / ".git").is_dir()


def test_sha256_mismatch_deletes_download_and_exits_2(capsys, world, monkeypatch):
    def tampered(name: str, version: str, dest: Path) -> Path:
        target = dest / f"{name}-{version}.tar.gz"
        target.write_bytes(b"not the sdist")
        return target

    monkeypatch.setattr(fetch, "pip_download", tampered)

    code = main(fetch_args(world))

    err = capsys.readouterr().err
    assert code == 2
    pin_sha = fetch.sha256_of(world.sdists["verl"])
    got = __import__("hashlib").sha256(b"not the sdist").hexdigest()
    assert err == (
        f"error: sha256 mismatch for verl-0.8.0.tar.gz (verl 0.8.0): expected {pin_sha}, got {got}; "
        "the download was deleted. Next: run again; if it recurs, check pip's index settings (a mirror serving "
        "another file) and the pin in upstreams.toml\n"
    )
    assert not (world.cache / "sdists").exists()  # no file kept, and no folder made for nothing
    assert not (world.cache / "upstreams").exists()


def test_failed_pip_download_exits_2(capsys, world, monkeypatch):
    def offline(name: str, version: str, dest: Path) -> Path:
        raise BadInput(f"pip could not download {name}=={version} (no network); check network access")

    monkeypatch.setattr(fetch, "pip_download", offline)

    assert main(fetch_args(world)) == 2
    assert "pip could not download verl==0.8.0" in capsys.readouterr().err


def _tar_with(path: Path, member: tarfile.TarInfo, data: bytes = b"") -> Path:
    with tarfile.open(path, "w:gz") as archive:
        top = tarfile.TarInfo("pkg-1.0")
        top.type = tarfile.DIRTYPE
        archive.addfile(top)
        member.size = len(data)
        archive.addfile(member, io.BytesIO(data))
    return path


def _symlink(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info


@pytest.mark.parametrize(
    "member",
    [
        tarfile.TarInfo("pkg-1.0/../escape.txt"),
        tarfile.TarInfo("/abs/escape.txt"),
        _symlink("pkg-1.0/link", "../../outside"),
        _symlink("pkg-1.0/link", "/etc/passwd"),
    ],
    ids=["dotdot", "absolute", "symlink-up", "symlink-absolute"],
)
def test_unpack_refuses_members_escaping_the_target(tmp_path, member):
    archive = _tar_with(tmp_path / "pkg-1.0.tar.gz", member, b"x")

    with pytest.raises(BadInput, match="outside"):
        fetch.unpack_sdist(archive, tmp_path / "dest")

    assert not (tmp_path / "dest").exists()
    assert not (tmp_path / "escape.txt").exists()


def test_unpack_strips_the_top_level_folder(tmp_path):
    archive = make_sdist(tmp_path / "verl-0.8.0.tar.gz", "verl-0.8.0", VERL_FILES)

    fetch.unpack_sdist(archive, tmp_path / "dest")

    assert sorted(
        p.relative_to(tmp_path / "dest").as_posix() for p in (tmp_path / "dest").rglob("*") if p.is_file()
    ) == (sorted(VERL_FILES))


def test_apply_without_path_patches_fresh_clones_and_tests_them(capsys, world, fake_pypi, regression_calls):
    assert main(world.args()) == 0

    out = capsys.readouterr().out
    patched = world.cache / "patched"
    assert regression_calls == [
        ({"verl": patched / "verl-0.8.0", "trinity": patched / "trinity-rft-0.6.0"}, "fixed"),
    ]
    assert f"* Applying {VERL_PATCH_1} (1/2)" in out
    assert "return x * 2" in (patched / "verl-0.8.0/verl/trainer/ppo/core_algos.py").read_text()
    assert git(world.cache / CHECKOUT, "status", "--porcelain") == ""  # the vanilla checkout is untouched


def test_apply_without_path_recreates_the_patched_tree_each_run(world, fake_pypi, regression_calls):
    assert main(world.args()) == 0
    stray = world.cache / "patched" / "verl-0.8.0" / "stray.txt"
    stray.write_text("left over\n")

    assert main(world.args()) == 0

    assert not stray.exists()
    assert len(regression_calls) == 2


def test_check_without_path_checks_vanilla_checkouts_and_touches_nothing(capsys, world, fake_pypi, regression_calls):
    assert main(fetch_args(world)) == 0
    before = tree_digest(world.cache)

    assert main(world.args("--check")) == 0

    assert "verl 0.8.0 at " in capsys.readouterr().out
    assert tree_digest(world.cache) == before
    assert regression_calls == []
    assert not (world.cache / "patched").exists()


def test_reverse_without_path_exits_2(capsys, world):
    assert main(world.args("--reverse")) == 2
    assert "--reverse needs a PATH" in capsys.readouterr().err
