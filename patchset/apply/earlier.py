"""Recognise by content a tree holding an earlier series (today's teeth may pass on it, as if fixed upstream), and
what taking it out leaves (docs/maintaining.md, "Recognition"). The record beside the lock (``applied-<key>.json``,
like quilt's ``.pc/``) names a series ``history.json`` never knew; one no longer describing the tree is ignored."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchset.apply.target import TreeToPatch
from patchset.plumbing import files, gitops, patchtext
from patchset.series.history import History, KnownPatch, KnownSeries, of_series


def file_blob(path: Path) -> str | None:
    """The git blob id of the file at ``path`` as it is now (None: absent)."""
    if path.is_symlink():
        return gitops.blob_id(bytes(Path(path.readlink()).as_posix(), "utf-8"))
    return gitops.blob_id(path.read_bytes()) if path.is_file() else None


def tree_blobs(root: Path, paths: Iterable[str]) -> dict[str, str | None]:
    return {rel: file_blob(root / rel) for rel in dict.fromkeys(paths)}


def chains(series: KnownSeries) -> dict[str, list[tuple[int, str | None]]]:
    """{file: [(0, release blob), (k, blob after patch k), ...]}: the states each file passes through."""
    found: dict[str, list[tuple[int, str | None]]] = {}
    for index, patch in enumerate(series.patches, start=1):
        for change in patch.changes:
            found.setdefault(change.path, [(0, change.before)]).append((index, change.after))
    return found


@dataclass(frozen=True)
class PatchState:
    """One patch of a held series in the tree: ``applied``, ``not applied`` or ``differs`` (``files`` say where)."""

    patch: KnownPatch
    index: int
    state: str
    files: tuple[str, ...] = ()


@dataclass(frozen=True)
class Held:
    """An earlier series that a tree holds: each patch's state, the files it explains, and today's series."""

    series: KnownSeries
    patches: tuple[PatchState, ...]
    explained: tuple[str, ...]
    today: KnownSeries
    unknown: tuple[str, ...] = ()  # the series' files in no state it passes through: changes not the series'

    def compared(self) -> str:
        """Today's series against the held one, patch by patch: ``0002 changed, 0008 new; 0006 ... dropped``."""
        held = {patch.name: patch.sha256 for patch in self.series.patches}
        today = {patch.name: patch.sha256 for patch in self.today.patches}
        words = []
        for name, sha in today.items():
            if name not in held:
                words.append(f"{name} new")
            elif held[name] != sha:
                words.append(f"{name[:4]} changed")
        words += [f"{name} dropped" for name in held if name not in today]
        return ", ".join(words) or "no patch differs (the same texts)"


def _patch_state(index: int, patch: KnownPatch, tree: Mapping[str, str | None], states: Mapping[str, list]) -> str:
    verdicts = set()
    for change in patch.changes:
        positions = [at for at, (_, blob) in enumerate(states[change.path]) if blob == tree.get(change.path)]
        mine = next(at for at, (number, _) in enumerate(states[change.path]) if number == index)
        after = any(at >= mine for at in positions)
        before = any(at < mine for at in positions)
        verdicts.add("applied" if after and not before else "not applied" if before and not after else "differs")
    return verdicts.pop() if len(verdicts) == 1 else "differs"


def judge(series: KnownSeries, tree: Mapping[str, str | None], today: KnownSeries) -> Held:
    """``series`` on the tree whose file blobs are ``tree``, patch by patch."""
    states = chains(series)
    patches = []
    for index, patch in enumerate(series.patches, start=1):
        state = _patch_state(index, patch, tree, states)
        odd = tuple(c.path for c in patch.changes if tree.get(c.path) not in {blob for _, blob in states[c.path]})
        shown = odd or (tuple(c.path for c in patch.changes) if state == "differs" else ())
        patches.append(PatchState(patch, index, state, shown))
    today_blobs = {blob for chain in chains(today).values() for _, blob in chain}
    written = {rel: {blob for _, blob in chain[1:]} - today_blobs for rel, chain in states.items()}
    explained = tuple(sorted(rel for rel, blobs in written.items() if tree.get(rel) in blobs))
    unknown = tuple(sorted(rel for rel, chain in states.items() if tree.get(rel) not in {b for _, b in chain}))
    return Held(series, tuple(patches), explained, today, unknown)


def today_series(target: TreeToPatch, history: History) -> KnownSeries:
    """Today's series of ``target`` as the manifest knows it (with its revisions), or as read (none yet)."""
    today = of_series(target.series)
    return history.find(today.folder, today.ident) or today


def held_series(target: TreeToPatch, history: History, recorded: KnownSeries | None = None) -> Held | None:
    """The earlier series ``target`` holds (``recorded``: what apply recorded there, judged first), or None."""
    today = today_series(target, history)
    candidates = [s for s in history.of_folder(target.series.name) if s.ident != today.ident]
    if recorded is not None and recorded.ident != today.ident:
        candidates.insert(0, recorded)
    if not candidates:
        return None
    paths = {c.path for s in [today, *candidates] for p in s.patches for c in p.changes}
    tree = tree_blobs(target.root, sorted(paths))
    judged = (judge(series, tree, today) for series in candidates)  # the one that explains most files, first on a tie
    return max((held for held in judged if held.explained), key=lambda held: len(held.explained), default=None)


def describe(target: TreeToPatch, held: Held) -> str:
    """One line: which series the tree holds, each patch's state in it, and what today's changes."""
    states = ", ".join(
        f"{state.patch.name[:4]} {state.state}" + (f" ({', '.join(state.files)})" if state.state == "differs" else "")
        for state in held.patches
    )
    return (
        f"{target.label} at {target.shown} holds an earlier series of this patchset, {held.series.shown}, not "
        f"today's ({held.today.shown}): {states}; today's series against it: {held.compared()}"
    )


def restore_originals(
    target: TreeToPatch, held: Held, scratch: Path, vanilla: Callable[[], Path | None], peeled: Mapping[str, bytes]
) -> list[str]:
    """Write each held file into ``scratch`` as before the series (``peeled``, git, ``vanilla()``); return the lost."""
    wanted = {rel: chain[0][1] for rel, chain in chains(held.series).items() if rel not in peeled}
    for rel, content in peeled.items():
        (scratch / rel).write_bytes(content)
    found = gitops.read_blobs(target.worktree.toplevel, [blob for blob in wanted.values() if blob is not None])
    if any(blob is not None and blob not in found for blob in wanted.values()):
        release = vanilla()
        for rel, blob in wanted.items():
            if blob is not None and blob not in found and release is not None and file_blob(release / rel) == blob:
                found[blob] = (release / rel).read_bytes()
    lost: list[str] = []
    for rel, blob in wanted.items():
        path = scratch / rel
        if path.is_symlink() or path.is_file():
            path.unlink()
        if blob is None:
            continue
        if (data := found.get(blob)) is None:
            lost.append(rel)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        mode = target.root / rel
        if mode.is_file():
            path.chmod(mode.stat().st_mode & 0o777)
    return lost


def peel_unknown(target: TreeToPatch, held: Held, texts: Mapping[str, bytes], scratch: Path) -> dict[str, bytes]:
    """{file: its content without the held series} for each of ``held.unknown``, by reverting the series' texts
    (``texts``, by name) on a copy: only a file that then equals the tree's HEAD, byte for byte, is taken."""
    unknown = held.unknown
    if not unknown or any(state.patch.name not in texts for state in held.patches):
        return {}
    files_of = sorted({c.path for state in held.patches for c in state.patch.changes})
    gitops.scratch_copy(target.root, files_of, scratch)
    for state in reversed(held.patches):
        if state.state == "not applied":
            continue
        patch = scratch.parent / f"{scratch.name}-{state.index:04d}.patch"
        patch.write_bytes(texts[state.patch.name])
        if not gitops.apply_patch(scratch, patch, reverse=True).ok:
            return {}
    head = gitops.head_blobs(target.worktree, unknown)
    return {
        rel: (scratch / rel).read_bytes()
        for rel in unknown
        if rel in head and (scratch / rel).is_file() and (scratch / rel).read_bytes() == head[rel].data
    }


RECORD_SCHEMA = 1


def record_path(homes: Mapping[Path, Path], target: TreeToPatch) -> Path | None:
    """Where ``target``'s record lives: in its lock folder, beside its snapshot (None: the tree is not locked)."""
    home = homes.get(target.root)
    return home.with_name(f"applied-{target.key}.json") if home is not None else None


def write_record(homes: Mapping[Path, Path], target: TreeToPatch, series: KnownSeries) -> str | None:
    """Record ``series`` as applied to ``target``, durably; why it could not be, else None."""
    path = record_path(homes, target)
    if path is None:
        return None
    paths = sorted({change.path for patch in series.patches for change in patch.changes})
    data: dict[str, Any] = {
        "schema": RECORD_SCHEMA,
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
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        files.write_durably(path, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())
    except OSError as exc:
        return f"could not record the series applied to {target.shown} in {path} ({exc.strerror or exc})"
    return None


def read_record(homes: Mapping[Path, Path], target: TreeToPatch) -> KnownSeries | None:
    """The series recorded in ``target``, when the record still describes the tree; else None."""
    path = record_path(homes, target)
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path is not None else {}
        if data.get("schema") != RECORD_SCHEMA or data.get("series") != target.series.name:
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


def remove_record(homes: Mapping[Path, Path], target: TreeToPatch) -> str | None:
    """Forget the series recorded in ``target``; why it could not be, else None."""
    path = record_path(homes, target)
    try:
        if path is not None:
            path.unlink(missing_ok=True)
    except OSError as exc:
        return f"could not remove {path} ({exc.strerror or exc})"
    return None
