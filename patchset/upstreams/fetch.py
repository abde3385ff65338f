"""The cache: pinned sdists from PyPI (``sdists/``), verified, unpacked into reproducible git checkouts tagged like the
release (``upstreams/``, never modified), and their patched clones (``patched/``). Each entry is built under a
temporary name and renamed into place by one run at a time (``cachelock.py``): an interrupted fetch leaves no half."""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from patchset.plumbing import cachelock, gitops, tempdirs
from patchset.plumbing.errors import BadInput
from patchset.plumbing.ui import Console, display_path
from patchset.upstreams.pins import Pin

CACHE_ENV = "PATCHSET_CACHE"
IDENTITY = gitops.Identity(name="patchset", email="patchset@localhost", date="2000-01-01T00:00:00+0000")


@dataclass(frozen=True)
class Cache:
    root: Path

    @property
    def sdists(self) -> Path:
        return self.root / "sdists"

    @property
    def upstreams(self) -> Path:
        return self.root / "upstreams"

    @property
    def patched(self) -> Path:
        return self.root / "patched"


def resolve_cache(option: str | None, environ: Mapping[str, str], repo_root: Path) -> Cache:
    """``--cache DIR``, else ``$PATCHSET_CACHE``, else ``<repo>/.cache``."""
    chosen = option or environ.get(CACHE_ENV) or str(repo_root / ".cache")
    return Cache(root=Path(chosen).expanduser().resolve())


# What pip prints when it cannot reach an index at all (as opposed to reaching it and finding no such release).
_UNREACHABLE = re.compile(
    r"NewConnectionError|Connection refused|Failed to establish a new connection|Name or service not known|"
    r"Temporary failure in name resolution|Network is unreachable|No route to host|ConnectTimeout|timed out|"
    r"ProxyError|SSLError|Max retries exceeded|Could not fetch URL",
    re.IGNORECASE,
)


class Unreachable(BadInput):
    """pip could not reach the package index (no network, or the index is down or misconfigured)."""


def pip_download(name: str, version: str, dest: Path) -> Path:
    """Download the sdist of ``name==version`` with pip into the empty ``dest``; ``Unreachable``: no index reached."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    command += ["--disable-pip-version-check", f"{name}=={version}", "-d", str(dest)]
    proc = subprocess.run(command, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        output = f"{proc.stderr}\n{proc.stdout}"
        lines = [line.strip() for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
        last = lines[-1] if lines else f"exit status {proc.returncode}"
        if match := _UNREACHABLE.search(output):
            errno = re.search(r"\[Errno -?\d+\] [^'\")\n]+", output)
            index = re.search(r"Looking in indexes: ([^\s,]+)", output)
            where = f"pip's index {index[1]}" if index else "pip's index"
            raise Unreachable(f"could not reach PyPI ({where}: {errno[0] if errno else match[0]})")
        if "No module named pip" in output:
            raise BadInput(f"{sys.executable} has no pip; install pip for it, or put the sdist into the cache")
        raise BadInput(
            f"pip could not download {name}=={version} ({last}); check network access and pip's index settings"
        )
    files = [f for f in dest.iterdir() if f.is_file()]
    if len(files) != 1:
        raise BadInput(f"pip download {name}=={version} left {len(files)} files in {dest}, expected one sdist")
    return files[0]


def sha256_of(path: Path) -> str:
    with path.open("rb") as stream:
        return hashlib.file_digest(stream, "sha256").hexdigest()


def normalized(name: str) -> str:
    """The name as PEP 503 compares names: ``Trinity_RFT`` and ``trinity-rft`` are the same project."""
    return re.sub(r"[-_.]+", "-", name).lower()


_SDIST_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".zip")


def _cached_sdist(cache: Cache, pin: Pin, console: Console) -> tuple[Path | None, list[Path]]:
    """A verified sdist of ``pin`` in the cache (the sha256 decides), and the files named like it that do not match."""
    if not cache.sdists.is_dir():
        return None, []
    prefix = normalized(f"{pin.name}-{pin.version}") + "-"
    exact = {normalized(f"{pin.name}-{pin.version}{suffix}") for suffix in _SDIST_SUFFIXES}
    damaged: list[Path] = []
    for candidate in sorted(cache.sdists.iterdir()):
        if candidate.is_file() and normalized(candidate.name).startswith(prefix):
            if sha256_of(candidate) == pin.sdist_sha256:
                return candidate, []
            if normalized(candidate.name) in exact:
                console.warn(f"{candidate} does not match the sha256 pinned for {pin.label}; not using it")
                damaged.append(candidate)
    return None, damaged


def _download(pin: Pin, cache: Cache, console: Console, damaged: list[Path]) -> Path:
    """Download and verify ``pin``'s sdist; keep it in ``cache.sdists`` only when the sha256 matches."""
    console.step(f"Fetching {pin.label} from PyPI")
    made = [folder for folder in (cache.sdists, *cache.sdists.parents) if not folder.exists()]
    cache.sdists.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=tempdirs.prefix("download", hidden=True), dir=cache.sdists))
    kept: Path | None = None
    try:
        try:
            downloaded = pip_download(pin.name, pin.version, tmp)
        except Unreachable as exc:
            bad = f" ({', '.join(p.name for p in damaged)} there does not match its sha256)" if damaged else ""
            raise BadInput(
                f"{exc}, and the cache {display_path(cache.sdists)} holds no verified sdist of {pin.label}{bad}; "
                f"nothing was changed. Next: connect to the network (or point pip at a reachable index, e.g. "
                f"PIP_INDEX_URL), or put {pin.name}-{pin.version}.tar.gz with sha256 {pin.sdist_sha256} into "
                f"{display_path(cache.sdists)}"
            ) from None
        got = sha256_of(downloaded)
        if got != pin.sdist_sha256:  # the download is deleted with its temporary folder
            raise BadInput(
                f"sha256 mismatch for {downloaded.name} ({pin.label}): expected {pin.sdist_sha256}, got {got}; "
                f"the download was deleted. Next: run again; if it recurs, check pip's index settings (a mirror "
                f"serving another file) and the pin in upstreams.toml"
            )
        kept = cache.sdists / downloaded.name
        os.replace(downloaded, kept)
        return kept
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if kept is None:  # a failed fetch leaves the cache as it was: no folder made for nothing
            for folder in made:
                if folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()


def _checked_members(archive: tarfile.TarFile, shown: str) -> tuple[str, list[tarfile.TarInfo]]:
    """The single top-level folder and the members, after refusing any that would land or point outside it."""
    members = archive.getmembers()
    for member in members:
        absolute_or_up = member.name.startswith("/") or ".." in member.name.split("/")  # sdists never need ".."
        if absolute_or_up or not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
            raise BadInput(f"{shown} has a member that would land outside its folder or is not a file: {member.name}")
    tops = {posixpath.normpath(m.name).split("/", 1)[0] for m in members}
    if len(tops) != 1 or (top := tops.pop()) in ("", "."):
        raise BadInput(f"{shown} does not hold exactly one top-level folder; refusing to unpack it")
    for member in members:
        if member.issym() or member.islnk():
            # A symlink's target is relative to the link's folder, a hard link's to the archive root.
            base = posixpath.dirname(posixpath.normpath(member.name)) if member.issym() else ""
            link = posixpath.normpath(posixpath.join(base, member.linkname))
            if member.linkname.startswith("/") or not (link == top or link.startswith(top + "/")):
                raise BadInput(f"{shown} has a link that points outside its folder: {member.name} -> {member.linkname}")
    return top, members


def unpack_sdist(sdist: Path, dest: Path) -> None:
    """Unpack ``sdist`` into ``dest`` (which must not exist), without the tarball's top-level folder."""
    shown = sdist.name
    try:
        archive = tarfile.open(sdist, "r:*")
    except (tarfile.TarError, OSError) as exc:
        raise BadInput(f"{shown} is not a readable tar archive ({exc})") from None
    staging = Path(tempfile.mkdtemp(prefix=tempdirs.prefix("unpack", hidden=True), dir=dest.parent))
    try:
        with archive:
            top, members = _checked_members(archive, shown)
            extra = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            archive.extractall(staging, members=members, **extra)
        if not (staging / top).is_dir():
            raise BadInput(f"{shown} does not hold a top-level folder; refusing to unpack it")
        os.replace(staging / top, dest)
    except tarfile.TarError as exc:
        raise BadInput(f"cannot unpack {shown} ({exc})") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def unusable(checkout: Path, pin: Pin) -> str | None:
    """Why the cached checkout cannot be reused, or None when it can."""
    if not (checkout / ".git").exists():
        return "it is not a git checkout"
    tagged = gitops.tag_commit(checkout, pin.tag)
    if tagged is None:
        return f"it has no tag {pin.tag}"
    if gitops.head_commit(checkout) != tagged or not gitops.is_clean(checkout):
        return "it has local changes"
    return None


def ensure_upstream(pin: Pin, cache: Cache, console: Console) -> Path:
    """The vanilla checkout of ``pin`` in the cache, made on first use; a second run waits for it, then reuses it."""
    shown = f"{pin.label} in the cache {display_path(cache.root)}"
    sweep = (cache.sdists, cache.upstreams)
    with cachelock.hold(cache.root, f"upstreams-{pin.dirname}", shown, console, wait=True, sweep=sweep):
        _sweep_legacy(cache.sdists, ".download-", console)
        _sweep_legacy(cache.upstreams, f".tmp-{pin.dirname}-", console)
        checkout = cache.upstreams / pin.dirname
        if checkout.exists():
            problem = unusable(checkout, pin)
            if problem is None:
                console.step(f"Using cached {pin.label} ({display_path(checkout)})")
                return checkout
            console.step(f"Rebuilding cached {pin.label} ({display_path(checkout)}): {problem}")
        sdist, damaged = _cached_sdist(cache, pin, console)
        if sdist is not None:
            console.step(f"Using cached sdist {display_path(sdist)}")
        else:
            sdist = _download(pin, cache, console, damaged)

        def make_checkout(tree: Path) -> None:
            unpack_sdist(sdist, tree)
            message = f"{pin.label} from its PyPI sdist\n\nsdist sha256: {pin.sdist_sha256}\nupstream: {pin.repository}"
            gitops.init_commit_tag(tree, message=message, tag=pin.tag, identity=IDENTITY)

        _replace_with_new_tree(checkout, make_checkout, f"could not make a git checkout of {pin.label}")
        console.step(f"Unpacked {pin.label} into {display_path(checkout)} (tag {pin.tag})")
        return checkout


def _sweep_legacy(folder: Path, prefix: str, console: Console) -> None:
    """Remove the scratch folders ``prefix*`` that killed runs left before such names carried the pid."""
    for path in sorted(folder.glob(f"{prefix}*")) if folder.is_dir() else []:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            console.step(f"Removed {display_path(path)}, left by a run that was killed")


def hold_patched(pin: Pin, cache: Cache, console: Console) -> AbstractContextManager[None]:
    """Hold ``patched/<name>-<version>`` for the caller's whole run: a second run is refused, naming this one."""
    shown = f"the patched tree {display_path(cache.patched / pin.dirname)}"
    entry, hint = f"patched-{pin.dirname}", " (or give this one its own cache: --cache DIR)"
    return cachelock.hold(cache.root, entry, shown, console, wait=False, sweep=(cache.patched,), hint=hint)


def fresh_patched_clone(pin: Pin, vanilla: Path, cache: Cache, console: Console) -> Path:
    """(Re)create ``patched/<name>-<version>`` as a fresh clone of the vanilla checkout (``hold_patched``)."""
    dest = cache.patched / pin.dirname
    _sweep_legacy(cache.patched, f".tmp-{pin.dirname}-", console)
    console.step(f"Creating a fresh patched tree {display_path(dest)}")
    _replace_with_new_tree(
        dest, lambda clone: gitops.clone_local(vanilla, clone), f"could not clone {display_path(vanilla)}"
    )
    return dest


def _replace_with_new_tree(dest: Path, make: Callable[[Path], None], failure: str) -> None:
    """Build a tree with ``make`` beside ``dest`` and rename it into place: no reader sees a half-made tree."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=tempdirs.prefix("tree", hidden=True), dir=dest.parent))
    try:
        tree = tmp / "tree"
        make(tree)
        if dest.is_symlink() or dest.exists():
            os.replace(dest, tmp / "old")
        os.replace(tree, dest)
    except gitops.GitError as exc:
        raise BadInput(f"{failure}: {exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
