"""``patches/history.json``, every released series by content, and its generator. Taking an earlier series out of a
tree exactly needs what it wrote, even from a shallow clone: so each landing's patches by sha256 and their blob ids."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from patchset.plumbing import gitops, patchtext
from patchset.plumbing.errors import BadInput
from patchset.plumbing.gitops import git_text
from patchset.series.model import Series, split_comment

HISTORY_FILE = "history.json"
DEFAULT_PATCHES = Path(__file__).resolve().parents[2] / "patches"
# which series the overlays mirror (``python -m patchset_overlay status`` reports it); written with the manifest
OVERLAY_SERIES = DEFAULT_PATCHES.parent / "patchset_overlay" / "series.json"
SCHEMA = 1
GENERATOR = "python -m patchset export history"


@dataclass(frozen=True)
class KnownPatch:
    """One patch of a released series: its file name, the sha256 of its text, and what it does to each file."""

    name: str
    sha256: str
    changes: tuple[patchtext.BlobChange, ...]


@dataclass(frozen=True)
class KnownSeries:
    """A series folder's patches at one or more landings (``revisions``, newest first; None: not committed yet)."""

    folder: str
    ident: str
    patches: tuple[KnownPatch, ...]
    revisions: tuple[int | None, ...] = ()
    commits: tuple[str | None, ...] = ()

    @property
    def revision(self) -> int | None:
        """The newest revision that carried this series (None: not released yet)."""
        return max((revision for revision in self.revisions if revision is not None), default=None)

    @property
    def shown(self) -> str:
        """How a report names it: ``the series of revision 31 (commit c57a833)``."""
        released = [revision for revision in self.revisions if revision is not None]
        if not released:
            return f"an unreleased {self.folder} series ({self.ident})"
        newest, oldest = max(released), min(released)
        commit = next((commit[:7] for commit in self.commits if commit), None)
        at = f" (newest commit {commit})" if commit else ""
        if newest == oldest:
            return f"the {self.folder} series of +patchset.{newest}{at}"
        return f"the {self.folder} series of +patchset.{oldest} to +patchset.{newest}{at}"


def known_patch(name: str, data: bytes) -> KnownPatch:
    text = data.decode("utf-8", "surrogateescape")
    return KnownPatch(name, hashlib.sha256(data).hexdigest(), tuple(patchtext.patch_blob_changes(text)))


def series_ident(patches: Sequence[KnownPatch]) -> str:
    """A series' id: the sha256 of its patches' hashes in order (16 hex digits)."""
    return hashlib.sha256("\n".join(patch.sha256 for patch in patches).encode()).hexdigest()[:16]


def of_series(series: Series) -> KnownSeries:
    """``series`` (as loaded from a patches folder) as the manifest describes one."""
    patches = tuple(known_patch(patch.name, patch.path.read_bytes()) for patch in series.patches)
    return KnownSeries(series.name, series_ident(patches), patches)


@dataclass(frozen=True)
class History:
    """The manifest: every known series, by id."""

    series: Mapping[str, KnownSeries]

    def of_folder(self, folder: str) -> list[KnownSeries]:
        """The series of ``folder``, newest revision first (unreleased ones first of all)."""
        found = [s for s in self.series.values() if s.folder == folder]
        return sorted(found, key=lambda s: -(s.revision or 10**9))

    def find(self, folder: str, ident: str) -> KnownSeries | None:
        found = self.series.get(ident)
        return found if found is not None and found.folder == folder else None


def _from_json(data: Mapping[str, Any]) -> History:
    patches = {
        sha: KnownPatch(entry["name"], sha, tuple(patchtext.BlobChange(*change) for change in entry["files"]))
        for sha, entry in data["patches"].items()
    }
    revisions: dict[str, list[tuple[int | None, str | None]]] = {}
    for landing in data["revisions"]:
        for ident in landing["series"].values():
            revisions.setdefault(ident, []).append((landing["revision"], landing["commit"]))
    series = {}
    for ident, entry in data["series"].items():
        landed = revisions.get(ident, [])
        series[ident] = KnownSeries(
            entry["folder"],
            ident,
            tuple(patches[sha] for sha in entry["patches"]),
            tuple(revision for revision, _ in landed),
            tuple(commit for _, commit in landed),
        )
    return History(series)


def load_history(patches_dir: Path) -> History:
    """The manifest of ``patches_dir`` (an empty one when the folder has none: a series of one's own)."""
    path = patches_dir / HISTORY_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return History({})
    except (OSError, ValueError) as exc:
        raise BadInput(f"cannot read {path} ({exc}); restore it (git checkout -- {path}) or regenerate it") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise BadInput(f"{path} is not a schema-{SCHEMA} series history; regenerate it ({GENERATOR})")
    return _from_json(data)


def recover_texts(series: KnownSeries, patches_dir: Path) -> dict[str, bytes]:
    """{patch name: its text} of ``series``, read from the checkout's history at a commit that landed it, each
    checked against its sha256; what cannot be read (a shallow clone, an export) is left out."""
    repo = gitops.git_value(patches_dir, "rev-parse", "--show-toplevel")
    if repo is None:
        return {}
    prefix = patches_dir.resolve().relative_to(Path(repo).resolve()).as_posix()
    found: dict[str, bytes] = {}
    for commit in (commit for commit in series.commits if commit):
        listing = _ls_tree(Path(repo), commit, f"{prefix}/{series.folder}")
        wanted = {f"{prefix}/{series.folder}/{p.name}": p for p in series.patches if p.name not in found}
        blobs = gitops.read_blobs(Path(repo), [blob for path, blob in listing.items() if path in wanted])
        for path, blob in listing.items():
            patch = wanted.get(path)
            if patch is not None and blob in blobs and hashlib.sha256(blobs[blob]).hexdigest() == patch.sha256:
                found[patch.name] = blobs[blob]
        if len(found) == len(series.patches):
            break
    return found


def _series_at(repo: Path, tree: Mapping[str, str], prefix: str) -> dict[str, list[tuple[str, bytes]]]:
    """{folder: [(patch name, text)]} of the ``ls-tree`` listing ``tree`` ({path: blob}) below ``prefix``."""
    found: dict[str, list[tuple[str, bytes]]] = {}
    blobs = gitops.read_blobs(repo, tree.values())
    for path, blob in sorted(tree.items()):
        parts = PurePosixPath(path).relative_to(prefix).parts
        if len(parts) != 2 or parts[1] != "series":
            continue
        names = [split_comment(line)[0] for line in blobs[blob].decode("utf-8", "replace").splitlines()]
        listed = [(name, tree.get(f"{prefix}/{parts[0]}/{name}")) for name in names if name]
        found[parts[0]] = [(name, blobs[blob]) for name, blob in listed if blob is not None]
    return found


def _ls_tree(repo: Path, commit: str, prefix: str) -> dict[str, str]:
    listing = git_text(repo, "ls-tree", "-r", "--full-tree", commit, "--", prefix)
    return {line.split("\t", 1)[1]: line.split()[2] for line in listing.splitlines() if "\t" in line}


def generate(patches_dir: Path) -> dict[str, Any]:
    """The manifest of the landings of ``patches_dir``'s history, plus its work tree's series when they differ."""
    repo = gitops.git_value(patches_dir, "rev-parse", "--show-toplevel")
    if repo is None:
        raise BadInput(f"{patches_dir} is not in a git checkout; the history is generated from one")
    if gitops.git_value(patches_dir, "rev-parse", "--is-shallow-repository") == "true":
        raise BadInput(f"{patches_dir} is in a shallow clone; fetch the whole history first (git fetch --unshallow)")
    top = Path(repo)
    prefix = patches_dir.resolve().relative_to(top.resolve()).as_posix()
    patches: dict[str, dict[str, Any]] = {}
    series: dict[str, dict[str, Any]] = {}
    revisions: list[dict[str, Any]] = []

    def add(folders: Mapping[str, list[tuple[str, bytes]]]) -> dict[str, str]:
        idents = {}
        for folder, texts in sorted(folders.items()):
            known = [known_patch(name, data) for name, data in texts]
            for patch in known:
                files = [[c.path, c.before, c.after] for c in patch.changes]
                patches.setdefault(patch.sha256, {"name": patch.name, "files": files})
            ident = series_ident(known)
            series.setdefault(ident, {"folder": folder, "patches": [patch.sha256 for patch in known]})
            idents[folder] = ident
        return idents

    for line in git_text(top, "log", "--first-parent", "--format=%H %cs", "HEAD", "--", prefix).splitlines():
        commit, date = line.split()
        count = int(git_text(top, "rev-list", "--count", commit, "--", prefix).strip())
        idents = add(_series_at(top, _ls_tree(top, commit, prefix), prefix))
        revisions.append({"revision": count, "commit": commit, "date": date, "series": idents})
    work = {}
    for folder_path in sorted(patches_dir.iterdir()):
        if (folder_path / "series").is_file():
            names = [split_comment(line)[0] for line in (folder_path / "series").read_text().splitlines()]
            work[folder_path.name] = [(name, (folder_path / name).read_bytes()) for name in names if name]
    current = add(work)
    if not revisions or current != revisions[0]["series"]:
        revisions.insert(0, {"revision": None, "commit": None, "date": None, "series": current})
    return {"schema": SCHEMA, "generator": GENERATOR, "patches": patches, "series": series,
            "revisions": revisions}  # fmt: skip


def overlay_series(data: Mapping[str, Any]) -> dict[str, Any]:
    """What the overlays carry: today's series of each folder and the newest revision that landed exactly those."""
    today = data["revisions"][0]["series"]
    landed = [r["revision"] for r in data["revisions"] if r["series"] == today and r["revision"] is not None]
    return {"generator": GENERATOR, "revision": max(landed, default=None), "series": today}


def dumps(data: Mapping[str, Any]) -> str:
    """The manifest as written: one line per patch, series and revision, so that a diff shows what changed."""
    entries = []
    for key, value in sorted(data.items()):
        if isinstance(value, dict):
            items = [f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(value.items())]
            entries.append(f" {json.dumps(key)}: {{\n" + ",\n".join(items) + "\n }")
        elif isinstance(value, list):
            items = [f"  {json.dumps(v, sort_keys=True)}" for v in value]
            entries.append(f" {json.dumps(key)}: [\n" + ",\n".join(items) + "\n ]")
        else:
            entries.append(f" {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(entries) + "\n}\n"


def missing(written: History, generated: History) -> list[str]:
    """The series ``generated`` has and ``written`` lacks, each named by folder and revision."""
    return [f"{s.folder} ({s.shown})" for ident, s in generated.series.items() if ident not in written.series]


def stale(patches_dir: Path) -> list[str]:
    """What the manifest (and for the repository's own ``patches/`` the overlays' ``series.json``) lacks."""
    data = generate(patches_dir)
    lacking = missing(load_history(patches_dir), _from_json(data))
    if patches_dir.resolve() == DEFAULT_PATCHES.resolve():
        carried = json.loads(OVERLAY_SERIES.read_text())["series"] if OVERLAY_SERIES.is_file() else {}
        lacking += [f"the overlays' {OVERLAY_SERIES}"] if carried != data["revisions"][0]["series"] else []
    return lacking


def write(patches_dir: Path) -> tuple[dict[str, Any], list[Path]]:
    """Write the manifest (and the overlays' ``series.json``, as ``stale``); return it and the files written."""
    data = generate(patches_dir)
    written = [patches_dir / HISTORY_FILE]
    written[0].write_text(dumps(data), encoding="utf-8")
    if patches_dir.resolve() == DEFAULT_PATCHES.resolve():
        OVERLAY_SERIES.write_text(json.dumps(overlay_series(data), indent=1, sort_keys=True) + "\n")
        written.append(OVERLAY_SERIES)
    return data, written
