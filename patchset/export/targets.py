"""Which upstream branch takes each group's PR, on a checkout that has upstream's history (``onto=`` in ``groups``),
and upstream's commit a backport cherry-picks (its patches' ``Origin: backport, .../commit/<hash>``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from patchset.export.branches import CherryPick
from patchset.plumbing import gitops
from patchset.series.groups import DESCRIPTIONS_DIR, RESOLUTION_SUFFIX, Group, load_groups
from patchset.series.model import Patch, Series, load_series
from patchset.upstreams.pins import Pin, Pins
from patchset.upstreams.registry import UPSTREAMS

_REMOTES = ("origin", "upstream")  # where a clone keeps upstream's branches, tried in this order after local ones


def find_branch(checkout: Path, name: str) -> tuple[str, str] | None:
    """(the ref as shown, its commit) of upstream's branch ``name``: a local branch, else a remote-tracking one."""
    candidates = [f"refs/heads/{name}", *(f"refs/remotes/{remote}/{name}" for remote in _REMOTES)]
    listed = gitops.run_git(["for-each-ref", "--format=%(refname)", "refs/remotes/"], cwd=checkout, check=False)
    candidates += [ref for ref in listed.stdout.split() if ref.endswith(f"/{name}") and ref not in candidates]
    for ref in candidates:
        if commit := gitops.commit_of(checkout, ref):
            return ref.removeprefix("refs/heads/").removeprefix("refs/remotes/"), commit
    return None


def version_at(checkout: Path, commit: str, key: str) -> str:
    """The version the tree of ``commit`` declares ("" when it declares none)."""
    text = gitops.git_value(checkout, "show", f"{commit}:{UPSTREAMS[key].version_file}") or ""
    return text.strip() if not UPSTREAMS[key].version_file.endswith(".py") else ""


def pin_for(pins: Pins, key: str, version: str, ref: str, series: str) -> Pin:
    """The pin of the branch's release, else the series' pin made to name the branch (main's ``0.10.0.dev``)."""
    pin = pins.find(key, version)
    if pin is not None:
        return replace(pin, tag=ref)
    default = next(p for p in pins.for_key(key) if p.series == series and p.target)
    return replace(default, version=version or default.version, tag=ref)


def series_groups(key: str, pins: Pins, patches_dir: Path) -> Iterator[tuple[Series, tuple[Group, ...]]]:
    """Every series of ``key`` that a pin targets, once each in ``upstreams.toml`` order, with its groups."""
    for name in dict.fromkeys(pin.series for pin in pins.for_key(key) if pin.target):
        if not (patches_dir / name).is_dir():
            continue  # a patches folder given for one series alone (--patches-dir)
        series = load_series(patches_dir, name)
        yield series, load_groups(series.path.parent, len(series.patches))


def upstream_commit(patches: Sequence[Patch]) -> str | None:
    """Upstream's commit of a group whose patches all name the same one (``Origin: backport, .../commit/<hash>``)."""
    commits = {patch.upstream_commit for patch in patches}
    return commits.pop() if len(commits) == 1 else None


def cherry_pick(series: Series, group: Group, commit: str, patches: Sequence[Patch]) -> CherryPick:
    """How ``group`` goes upstream as ``commit`` cherry-picked, with the carried patches' tests when it adds none, and
    the regression tests that show the bugs ``patches`` fix."""
    resolution = series.path.parent / DESCRIPTIONS_DIR / f"{group.name}{RESOLUTION_SUFFIX}"
    area, _, rest = patches[0].subject.partition("] ")
    what = rest.split(": ", 1)[-1]
    teeth = " or ".join(f"({series.teeth[p.name]})" for p in patches if p.name in series.teeth)
    return CherryPick(
        commit,
        resolution if resolution.is_file() else None,
        tuple(patch.path for patch in patches),
        f"{area}] test: {what}",
        teeth,
    )


def has_history(checkout: Path, key: str, pins: Pins, patches_dir: Path) -> bool:
    """Whether the checkout holds one of the upstream commits the backports name (a clone does, an sdist not)."""
    for series, groups in series_groups(key, pins, patches_dir):
        for group in groups:
            commit = upstream_commit([series.patches[number - 1] for number in group.numbers])
            if commit and gitops.commit_of(checkout, commit):
                return True
    return False
