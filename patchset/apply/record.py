"""What apply leaves beside a tree's lock: the series it applied (``applied-<key>.json``), like quilt's ``.pc/``.

It names each patch by its sha256 and the blob ids it writes, so that a newer series can take it out even when
``patches/history.json`` never knew it, and the blob of every file as the run left it: a record that no longer
describes the tree is ignored, and the tree recognised by content instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from patchset.apply.earlier import tree_blobs
from patchset.apply.target import TreeToPatch
from patchset.plumbing import files, patchtext
from patchset.series.history import KnownPatch, KnownSeries

SCHEMA = 1


def record_path(folder: Path, target: TreeToPatch) -> Path:
    """Where ``target``'s record lives in its lock folder ``folder`` (``<git-dir>/patchset``)."""
    return folder / f"applied-{target.key}.json"


def write_record(folder: Path, target: TreeToPatch, series: KnownSeries) -> str | None:
    """Record ``series`` as applied to ``target``, durably; why it could not be, else None."""
    paths = sorted({change.path for patch in series.patches for change in patch.changes})
    data: dict[str, Any] = {
        "schema": SCHEMA,
        "series": series.folder,
        "ident": series.ident,
        "revision": series.revision,
        "release": target.label,
        "patches": [
            {"name": p.name, "sha256": p.sha256, "files": [[c.path, c.before, c.after] for c in p.changes]}
            for p in series.patches
        ],
        "tree": tree_blobs(target.root, paths),
    }
    path = record_path(folder, target)
    staged = path.with_name(f".{path.name}.new")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        files.write_durably(staged, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())
        staged.replace(path)
    except OSError as exc:
        staged.unlink(missing_ok=True)
        return f"could not record the series applied to {target.shown} in {path} ({exc.strerror or exc})"
    return None


def read_record(folder: Path, target: TreeToPatch) -> KnownSeries | None:
    """The series recorded in ``target``, when the record still describes the tree; else None."""
    try:
        data = json.loads(record_path(folder, target).read_text(encoding="utf-8"))
        if data.get("schema") != SCHEMA or data.get("series") != target.series.name:
            return None
        patches = tuple(
            KnownPatch(p["name"], p["sha256"], tuple(patchtext.BlobChange(*change) for change in p["files"]))
            for p in data["patches"]
        )
        recorded = data["tree"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if tree_blobs(target.root, recorded) != recorded:
        return None
    revision = data.get("revision")
    return KnownSeries(data["series"], data["ident"], patches, (revision,) if revision is not None else ())


def remove_record(folder: Path, target: TreeToPatch) -> str | None:
    """Forget the series recorded in ``target``; why it could not be, else None."""
    try:
        record_path(folder, target).unlink(missing_ok=True)
    except OSError as exc:
        return f"could not remove {record_path(folder, target)} ({exc.strerror or exc})"
    return None
