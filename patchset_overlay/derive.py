"""Each piece's changes, derived from the series' own patch files on the installed release: the one source of each fix.

Each patch the release lacks (by its DEP-3 ``Applied-Upstream``) is applied in series order to the installed file,
for the active pieces only. Derived files are written where readers need a file (Hydra, tracebacks, ``show``), but
nothing found on disk is trusted: the cache folder must be this user's alone (0700), and a file is used only once
compared with the text derived in memory; where none can be had, the text stays in memory (or a private folder).
"""

from __future__ import annotations

import atexit
import gc
import hashlib
import linecache
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchset_overlay.changes import Change, Parsed, UnsupportedChange, bound_names, module_changes
from patchset_overlay.hunks import HunkError, Patch, apply_hunks, read_patch
from patchset_overlay.spec import Overlay, Piece, UpstreamSource

PINS_FILE = "upstreams.toml"
ENV_CACHE = "PATCHSET_OVERLAY_CACHE"


def cache_root() -> Path | None:
    """The cache folder, made 0700 if missing; None where it is not this user's alone or cannot be made."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    root = Path(os.environ.get(ENV_CACHE) or os.path.join(base, "patchset_overlay"))
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = root.stat()
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    return root if os.access(root, os.W_OK) else None


def folder_for(text_key: str, root: Path | None) -> Path | None:
    """The folder of one derived set (named by ``text_key``, a digest of its contents) in ``root``, or None."""
    if root is None:
        return None
    folder = root / hashlib.sha256(text_key.encode("utf-8")).hexdigest()[:24]
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None
    return folder


def verified(path: Path, text: str) -> bool:
    """Make ``path`` hold exactly ``text`` (written again, atomically, where it does not); False where it cannot."""
    try:
        if path.is_file() and not path.is_symlink() and path.read_text(encoding="utf-8") == text:
            return True
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
        return True
    except OSError:
        return False


def private_folder() -> Path:
    """A folder of this process alone (0700), removed at exit: where a derived file goes when no cache can be had."""
    folder = Path(tempfile.mkdtemp(prefix="patchset_overlay-"))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def patches_root() -> Path:
    """The series folders: those shipped inside this package (a wheel), else the checkout's ``patches/``."""
    shipped = Path(__file__).resolve().parent / "patches"
    return shipped if shipped.is_dir() else Path(__file__).resolve().parents[1] / "patches"


def release_series(distribution: str, root: Path | None = None) -> dict[str, str]:
    """{release: series folder} of ``distribution``'s pins that the overlays support (``overlay = true``)."""
    import tomllib

    pins = tomllib.loads(((root or patches_root()) / PINS_FILE).read_text(encoding="utf-8"))["upstream"]
    return {pin["version"]: pin["series"] for pin in pins if pin["name"] == distribution and pin.get("overlay")}


def read_series(folder: Path) -> list[Patch]:
    """The patches a ``series`` file lists, in order (one name a line; ``#`` starts a comment), read."""
    names = [line.split("#", 1)[0].strip() for line in (folder / "series").read_text(encoding="utf-8").splitlines()]
    return [read_patch(folder / name) for name in names if name]


def overlay_spec(
    name: str, upstream: str, distribution: str, modules: tuple[str, ...], grouped: tuple[Piece, ...], **parts: Any
) -> Overlay:
    """An overlay package's spec: the pieces it declares, then one piece per patch of its series that none of those
    names (by its slug, so a new fix needs no declaration) and that changes more than upstream's ``tests/``."""
    named = {slug for piece in grouped for slug in piece.patches}
    root = patches_root()
    series = dict.fromkeys(release_series(distribution, root).values())
    slugs = dict.fromkeys(
        patch.slug
        for folder in series
        for patch in read_series(root / folder)
        if not all(path.startswith("tests/") for path in patch.files)
    )
    pieces = grouped + tuple(Piece(slug, (slug,)) for slug in slugs if slug not in named)
    return Overlay(name, upstream, distribution, modules, pieces, **parts)


def version_tuple(version: str) -> tuple[int, ...]:
    """Leading numeric release parts of a version ("0.9.1rc1" -> (0, 9, 1)); enough to compare releases."""
    match = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(part) for part in match.group().split(".")) if match else ()


def upstream_has(patch: Patch, version: str) -> bool:
    """Whether release ``version`` has ``patch``'s change upstream (at or past its ``Applied-Upstream`` release)."""
    return patch.applied_upstream is not None and version_tuple(version) >= version_tuple(patch.applied_upstream)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class Derived:
    """One upstream file as the active patches leave it."""

    path: str  # in the tree, e.g. verl/workers/utils/losses.py
    text: str
    filename: str = ""  # what its code objects name as their file (the cache's copy, or a name linecache knows)
    parsed: Parsed | None = None  # a module's, once derived
    changes: dict[str, list[Change]] = field(default_factory=dict)  # patch slug -> what it changes here


@dataclass
class Plan:
    """What the overlay can do on one installed release: its series, and the files the active pieces derive."""

    overlay: Overlay
    source: UpstreamSource
    version: str
    series: str | None
    patches: list[Patch] = field(default_factory=list)  # the series' patches the release lacks, in order
    upstream: list[Patch] = field(default_factory=list)  # the series' patches the release has upstream
    derived: dict[str, Derived] = field(default_factory=dict)  # path -> derived file (active pieces only)

    @classmethod
    def make(cls, overlay: Overlay, source: UpstreamSource) -> Plan:
        """The plan for the release in ``source``; for a release the overlays do not support (``series`` None), the
        series of the newest supported release before it, to say which fixes it has upstream."""
        version = source.version()
        supported = release_series(overlay.distribution)
        plan = cls(overlay, source, version, supported.get(version))
        earlier = [release for release in supported if version_tuple(release) <= version_tuple(version)]
        folder = plan.series or (supported[max(earlier, key=version_tuple)] if earlier else None)
        if folder is not None:
            for patch in read_series(patches_root() / folder):
                (plan.upstream if upstream_has(patch, version) else plan.patches).append(patch)
        return plan

    def in_scope(self, path: str) -> bool:
        """Whether the overlay derives this file: a watched module, or a config file Hydra reads by search path."""
        if path.endswith(".py"):
            return _module_of(path) in self.overlay.modules
        config = self.overlay.config_dir
        return bool(config) and path.startswith(f"{config}/") and not Path(path).name.startswith("_generated")

    def pieces_patches(self, piece: Piece, patches: list[Patch] | None = None) -> list[Patch]:
        return [patch for patch in (self.patches if patches is None else patches) if patch.slug in piece.patches]

    def files(self, patches: list[Patch]) -> list[str]:
        """The files in scope that ``patches`` touch, in the order they first do."""
        paths = [path for patch in patches for path in patch.files if path not in patch.new_files]
        return [path for path in dict.fromkeys(paths) if self.in_scope(path)]

    def installed_text(self, path: str) -> str:
        return (self.source.root.parent / path).read_text(encoding="utf-8")

    def module_path(self, module: str) -> str:
        return next((path for path in self.derived if self.in_scope(path) and _module_of(path) == module), "")

    def derive(self, active: list[Piece]) -> dict[str, str]:
        """Derive every file the ``active`` pieces' patches touch; {piece name: why it cannot be derived} for those
        whose hunks do not apply or whose changes the overlay cannot make (left out, and the rest derived again)."""
        failed: dict[str, str] = {}
        collecting = gc.isenabled()
        gc.disable()  # the syntax trees are many small objects: each collection would walk all of torch's
        try:
            while True:
                owner = {slug: piece for piece in active if piece.name not in failed for slug in piece.patches}
                found = self._derive_files([patch for patch in self.patches if patch.slug in owner], owner)
                if not found:
                    return failed
                failed.update(found)
        finally:
            if collecting:
                gc.enable()

    def _derive_files(self, patches: list[Patch], owner: dict[str, Piece]) -> dict[str, str]:
        self.derived = {}
        failures: dict[str, str] = {}
        for path in self.files(patches):
            derived = Derived(path, self.installed_text(path))
            parsed = Parsed(derived.text) if path.endswith(".py") else None
            for patch in patches:
                if path not in patch.files:
                    continue
                try:
                    derived.text = apply_hunks(derived.text, patch.files[path], where=path)
                    if parsed is not None:
                        after = Parsed(derived.text)
                        derived.changes[patch.slug] = module_changes(parsed, after)
                        parsed = after
                except (HunkError, SyntaxError, UnsupportedChange) as error:
                    earlier = self.patches[: self.patches.index(patch)]
                    left_out = [p.path.name[:4] for p in earlier if p not in patches and path in p.files]
                    why = f"{patch.path.name} cannot be derived: {error}"
                    if left_out:
                        why += f" (it may build on {', '.join(left_out)}, of a piece that stays off)"
                    failures.setdefault(owner[patch.slug].name, why)
                    break
            derived.parsed = parsed
            if parsed is not None:
                derived.changes = {slug: _as_in_final(changes, parsed) for slug, changes in derived.changes.items()}
                parsed.keep_only({change.name for changes in derived.changes.values() for change in changes})
            self.derived[path] = derived
        if not failures:
            self._name_files()
        return failures

    def _name_files(self) -> None:
        """Give each derived file the name its code reports: the cache's verified copy, or a name in linecache."""
        key = "\n".join(f"{path}\0{sha256(item.text)}" for path, item in sorted(self.derived.items()))
        folder = folder_for(f"{self.overlay.distribution} {self.version}\n{key}", cache_root())
        for path, item in self.derived.items():
            if folder is not None and verified(folder / path, item.text):
                item.filename = str(folder / path)
            else:
                item.filename = f"<patchset_overlay {path}>"
                lines = item.text.splitlines(keepends=True)
                linecache.cache[item.filename] = (len(item.text), None, lines, item.filename)

    def piece_changes(self, piece: Piece, module: str) -> list[Change]:
        """What ``piece``'s patches change in ``module``: additions first, then in the derived file's order."""
        item = self.derived.get(self.module_path(module))
        if item is None:
            return []
        found = {change for slug in piece.patches for change in item.changes.get(slug, ())}
        order = {change: index for index, change in enumerate(c for changes in item.changes.values() for c in changes)}
        return sorted(found, key=lambda change: (change.kind != "statement", order[change]))

    def piece_modules(self, piece: Piece) -> list[str]:
        return [_module_of(path) for path in self.files(self.pieces_patches(piece)) if path.endswith(".py")]


def _as_in_final(changes: list[Change], final: Parsed) -> list[Change]:
    """A patch's changes as the final text holds them: a statement a later patch rewrote (an import that grew) is
    the final statement that binds the same names."""
    keys = {final.key(node): node for node in final.tree.body}
    found: list[Change] = []
    for change in changes:
        if change.kind != "statement" or change.name in keys:
            found.append(change)
            continue
        names = set(change.names)
        found.extend(
            Change("statement", key, names=bound_names(node))
            for key, node in keys.items()
            if names & set(bound_names(node))
        )
    return list(dict.fromkeys(found))


def _module_of(path: str) -> str:
    return path[: -len(".py")].replace("/", ".").removesuffix(".__init__")
