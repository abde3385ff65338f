"""The tree to patch (``TreeToPatch``), from a path on the command line or a pin. Only git work trees whose files
are tracked are accepted: git is what makes "the tree as it was" checkable (HEAD, status) and recoverable."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from patchset.plumbing import gitops
from patchset.plumbing.errors import BadInput
from patchset.plumbing.ui import Console, display_path
from patchset.series.model import Series, load_series
from patchset.upstreams.fetch import ensure_upstream, fresh_patched_clone, hold_patched
from patchset.upstreams.pins import Pin
from patchset.upstreams.registry import detect
from patchset.upstreams.workspace import Workspace


@dataclass(frozen=True)
class TreeToPatch:
    """A tree to patch: where it is, how to name it, what it is and which series it takes."""

    root: Path
    shown: str
    key: str
    label: str
    version: str
    series: Series
    worktree: gitops.WorkTree


def _worktree(root: Path, shown: str, marker: str) -> gitops.WorkTree:
    tree = gitops.find_worktree(root)
    if tree is None:
        raise BadInput(
            f"{shown} is not a git checkout, so the patches could not be checked or reverted safely; "
            f"run 'git init && git add -A && git commit -m upstream' in it first"
        )
    if not gitops.is_tracked(tree, marker):
        where = "" if not tree.prefix else f" (inside the git checkout {tree.toplevel})"
        raise BadInput(
            f"{shown} is in git{where}, but its files are not tracked there ({marker} is untracked or ignored), "
            f"so the patches could not be checked or reverted safely; commit the tree first, or make it a "
            f"checkout of its own: cd {shown} && git init && git add -A && git commit -m upstream"
        )
    return tree


def _series(patches_dir: Path, name: str) -> Series:
    """The series to apply; one that lists no patch would make any run a silent success, so it is refused."""
    series = load_series(patches_dir, name)
    if not series.patches:
        raise BadInput(f"{series.path} lists no patches; add the patch file names, one a line, in the order to apply")
    return series


def target_for_path(
    shown: str, workspace: Workspace, *, force_version: bool, console: Console, check: bool = False
) -> TreeToPatch:
    """The target for a tree named on the command line; a release no pin names takes its release line's series,
    else the default pin's, with ``force_version`` or ``check``."""
    root = Path(shown).expanduser()
    if not root.exists():
        raise BadInput(f"{shown} does not exist; pass the root of a verl or Trinity-RFT checkout")
    pins = workspace.pins
    found = detect(root, shown)
    pin = pins.find(found.key, found.version)
    if pin is not None and not pin.target:
        if not force_version:
            raise BadInput(
                f"{shown} is {pin.label}, which this patchset pins only to test {pin.companion_for} trees beside it; "
                f"the {pin.series} series does not target it (supported: {', '.join(pins.versions(found.key))}). "
                f"Next: give the {pin.companion_for} tree alone (it is tested beside {pin.label}), or pass "
                f"--force-version to try the {pin.series} series anyway"
            )
        pin = None
    if pin is None:
        supported = ", ".join(pins.versions(found.key)) or "none"
        candidates = pins.for_key(found.key)
        fallback = pins.series_pin(found.key, found.version) or (candidates[-1] if candidates else None)
        if fallback is None:
            raise BadInput(f"{shown} is {found.label} {found.version}, but {pins.source} has no pin for {found.key}")
        if not force_version and not check:
            raise BadInput(
                f"{shown} is {found.label} {found.version}, which this patchset does not support "
                f"(supported: {supported}); run --check to see how the {fallback.series} series fares on it, patch by "
                f"patch, and pass --force-version to apply it anyway"
            )
        how = "trying the series anyway (--force-version)" if force_version else "reporting how it fares (--check)"
        console.warn(
            f"{shown} is {found.label} {found.version} (supported: {supported}); {fallback.series} series: {how}"
        )
        series = fallback.series
    else:
        series = pin.series
    return TreeToPatch(
        root=root.resolve(),
        shown=shown,
        key=found.key,
        label=f"{found.label} {found.version}" if pin is None else pin.label,
        version=found.version,
        series=_series(workspace.patches_dir, series),
        worktree=_worktree(root, shown, found.marker),
    )


def target_for_pin(pin: Pin, root: Path, patches_dir: Path) -> TreeToPatch:
    """The target for a tree the tool made itself from ``pin`` (a cached checkout or its patched clone)."""
    shown = display_path(root)
    tree = gitops.find_worktree(root)
    if tree is None:
        raise BadInput(f"{shown} is not a git checkout; delete it and run again to rebuild it")
    return TreeToPatch(
        root=root.resolve(),
        shown=shown,
        key=pin.key,
        label=pin.label,
        version=pin.version,
        series=_series(patches_dir, pin.series),
        worktree=tree,
    )


def cached_targets(
    workspace: Workspace, console: Console, *, reverse: bool, check: bool, held: ExitStack
) -> list[TreeToPatch]:
    """The default pins' vanilla checkouts (``check``), else fresh patched clones of them, all held in ``held``
    before any is made, so that a run refused there has done nothing."""
    if reverse:
        raise BadInput("--reverse needs a PATH: the patched trees in the cache are rebuilt fresh on every run")
    pins, cache = workspace.pins, workspace.cache
    defaults = pins.defaults()
    if not defaults:
        raise BadInput(f"{pins.source} marks no [[upstream]] as default = true")
    with ExitStack() as holding:  # handed to ``held`` once every target is made; let go if one fails
        if not check:
            for pin in defaults:
                holding.enter_context(hold_patched(pin, cache, console))
        targets = []
        for pin in defaults:
            vanilla = ensure_upstream(pin, cache, console)
            tree = vanilla if check else fresh_patched_clone(pin, vanilla, cache, console)
            targets.append(target_for_pin(pin, tree, workspace.patches_dir))
        held.enter_context(holding.pop_all())
    return targets
