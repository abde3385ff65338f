"""Helpers for the tooling tests (used by conftest.py and the tests): throwaway git trees that look like
verl 0.8.0 and Trinity-RFT 0.6.0, a fake ``--patches-dir`` (upstreams.toml plus a two-patch verl series and a
one-patch Trinity series, made with ``git format-patch``), and fake sdists of both trees. No network, no real
upstream."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

FORMAT_PATCH = ("format-patch", "--zero-commit", "--full-index", "--no-stat", "--no-signature")

CORE_ALGOS = (
    "".join(f"# line {n}\n" for n in range(1, 11))
    + (
        "def agg_loss(loss_mat, loss_mask, loss_agg_mode):\n"
        '    """Aggregate a loss matrix."""\n'
        "    return loss_mat.sum()\n"
    )
    + "".join(f"# tail {n}\n" for n in range(1, 11))
)

VERL_FILES = {
    "verl/__init__.py": "",
    "verl/version/version": "0.8.0\n",
    "verl/trainer/ppo/core_algos.py": CORE_ALGOS,
    "README.md": "fake verl\n",
}
TRINITY_FILES = {
    "trinity/__init__.py": '# -*- coding: utf-8 -*-\n__version__ = "0.6.0"\n',
    "trinity/trainer/verl/losses.py": "".join(f"# l{n}\n" for n in range(1, 8))
    + "def loss(x):\n    return x\n"
    + "".join(f"# m{n}\n" for n in range(1, 8)),
    "README.md": "fake trinity\n",
}

VERL_PATCH_1 = "0001-trainer-add-scale.patch"
VERL_PATCH_2 = "0002-trainer-fix-scale.patch"
TRINITY_PATCH = "0001-trainer-scale-policy-loss.patch"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def write_files(root: Path, files: Mapping[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def make_repo(root: Path, files: Mapping[str, str]) -> Path:
    root.mkdir(parents=True)
    write_files(root, files)
    git(root, "init", "-q", "--initial-branch=main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "vanilla")
    return root


def tree_digest(root: Path) -> str:
    """sha256 over every file below ``root`` outside .git: path, exec bit and bytes."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if ".git" not in p.relative_to(root).parts):
        if path.is_file() or path.is_symlink():
            rel = path.relative_to(root).as_posix()
            digest.update(f"{rel}\0{os.access(path, os.X_OK)}\0".encode())
            digest.update(os.readlink(path).encode() if path.is_symlink() else path.read_bytes())
    return digest.hexdigest()


def _commit(repo: Path, subject: str, body: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"{subject}\n\n{body}")


def _make_verl_patches(work: Path, dest: Path) -> None:
    repo = make_repo(work, VERL_FILES)
    core = repo / "verl/trainer/ppo/core_algos.py"
    core.write_text(CORE_ALGOS.replace("# line 10\n", "# line 10\ndef scale(x):\n    return x * 1\n"))
    write_files(repo, {"tests/trainer/ppo/test_scale_on_cpu.py": "def test_scale():\n    pass\n"})
    _commit(
        repo,
        "[trainer] feat: add scale",
        "Adds a helper the fix needs.\n\nForwarded: no\nBug: https://example.invalid/1\nLast-Update: 2026-01-01",
    )
    core.write_text(core.read_text().replace("return x * 1", "return x * 2"))
    _commit(repo, "[trainer] fix: scale by two", "Changes lines that the previous patch added.\n\nForwarded: no")
    git(repo, *FORMAT_PATCH, "-2", "-o", str(dest))
    made = sorted(p.name for p in dest.glob("*.patch"))
    (dest / made[0]).rename(dest / VERL_PATCH_1)
    (dest / made[1]).rename(dest / VERL_PATCH_2)


def _make_trinity_patch(work: Path, dest: Path) -> None:
    repo = make_repo(work, TRINITY_FILES)
    losses = repo / "trinity/trainer/verl/losses.py"
    losses.write_text(losses.read_text().replace("    return x\n", "    return x * weight(x)\n"))
    _commit(repo, "[trainer] fix: scale policy loss", "Forwarded: no\nApplied-Upstream: 0.7.0, https://example.invalid")
    git(repo, *FORMAT_PATCH, "-1", "-o", str(dest))
    next(dest.glob("*.patch")).rename(dest / TRINITY_PATCH)


def make_sdist(path: Path, top: str, files: Mapping[str, str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as archive:
        for rel, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size, info.mode, info.mtime = len(data), 0o644, 946684800
            archive.addfile(info, io.BytesIO(data))
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class World:
    """One test's world: the fake trees, the fake patches dir, the fake sdists and an empty cache dir."""

    verl: Path
    trinity: Path
    patches: Path
    sdists: dict[str, Path]
    cache: Path

    def args(self, *argv: str) -> list[str]:
        """``apply`` arguments with this world's patches dir and cache."""
        return ["apply", "--patches-dir", str(self.patches), "--cache", str(self.cache), *argv]


def write_upstreams(patches: Path, pins: list[dict[str, object]]) -> None:
    lines = []
    for pin in pins:
        lines.append("[[upstream]]")
        for key, value in pin.items():
            lines.append(f"{key} = {str(value).lower() if isinstance(value, bool) else repr(str(value))}")
        lines.append("")
    (patches / "upstreams.toml").write_text("\n".join(lines).replace("'", '"'))


def make_world(tmp_path: Path) -> World:
    """Build a fresh world under ``tmp_path``."""
    patches = tmp_path / "patches"
    _make_verl_patches(tmp_path / "work-verl", patches / "verl")
    _make_trinity_patch(tmp_path / "work-trinity", patches / "trinity")
    (patches / "verl" / "series").write_text(f"# verl series\n{VERL_PATCH_1}\n\n{VERL_PATCH_2}\n")
    (patches / "trinity" / "series").write_text(f"{TRINITY_PATCH}\n")
    sdists = {
        "verl": make_sdist(tmp_path / "sdists" / "verl-0.8.0.tar.gz", "verl-0.8.0", VERL_FILES),
        "trinity-rft": make_sdist(tmp_path / "sdists" / "trinity_rft-0.6.0.tar.gz", "trinity_rft-0.6.0", TRINITY_FILES),
    }
    pin = {"repository": "https://example.invalid/repo"}
    write_upstreams(
        patches,
        [
            {"key": "verl", "name": "verl", "version": "0.8.0", "sdist_sha256": sha256(sdists["verl"]), **pin,
             "tag": "v0.8.0", "series": "verl", "default": True},
            {"key": "verl", "name": "verl", "version": "0.9.0", "sdist_sha256": "0" * 64, **pin,
             "tag": "v0.9.0", "series": "verl", "default": False},
            {"key": "trinity", "name": "trinity-rft", "version": "0.6.0", **pin,
             "sdist_sha256": sha256(sdists["trinity-rft"]), "tag": "v0.6.0", "series": "trinity", "default": True},
            {"key": "trinity", "name": "trinity-rft", "version": "0.7.0", "sdist_sha256": "0" * 64, **pin,
             "tag": "v0.7.0", "series": "trinity", "default": False},
        ],
    )  # fmt: skip
    shutil.rmtree(tmp_path / "work-verl")
    shutil.rmtree(tmp_path / "work-trinity")
    make_repo(tmp_path / "verl", VERL_FILES)
    make_repo(tmp_path / "trinity", TRINITY_FILES)
    return world_at(tmp_path)


def world_at(base: Path) -> World:
    """The world that ``make_world`` built under ``base`` (or a copy of it)."""
    return World(
        verl=base / "verl",
        trinity=base / "trinity",
        patches=base / "patches",
        sdists={"verl": base / "sdists/verl-0.8.0.tar.gz", "trinity-rft": base / "sdists/trinity_rft-0.6.0.tar.gz"},
        cache=base / "cache",
    )
