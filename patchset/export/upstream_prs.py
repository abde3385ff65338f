"""A group's PR rebased onto upstream's newest files (``pr/<group>.upstream.patch``), for an upstream that cannot be
cloned here: one ``Upstream-File: <path> <owner>/<repo>@<commit>|v<version>|new`` line a file names what it was made
against; ``check_group`` applies it to those files in the cache (``--fetch``): upstream source is never committed."""

from __future__ import annotations

import re
import shutil
import tempfile
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from patchset.plumbing import gitops, patchtext
from patchset.series.groups import UPSTREAM_PATCH_SUFFIX, Group, chain, load_groups
from patchset.series.model import load_series
from patchset.upstreams.pins import Pins

REVISIONS_DIR = "upstream-revisions"
RAW_URL = "https://raw.githubusercontent.com/{repo}/{commit}/{path}"
_UPSTREAM_FILE = re.compile(r"^Upstream-File:[ \t]+(?P<path>\S+)[ \t]+(?P<where>\S+)[ \t]*$", re.MULTILINE)
_AT_COMMIT = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)@(?P<commit>[0-9a-f]{40})$")
_RELEASE = re.compile(r"^v\d+(?:\.\d+)+$")


@dataclass(frozen=True)
class Revision:
    """The upstream text a file of the PR was made against."""

    path: str
    where: str

    @property
    def commit(self) -> tuple[str, str] | None:
        """(repository, commit) when read at a commit."""
        match = _AT_COMMIT.match(self.where)
        return (match["repo"], match["commit"]) if match else None

    def problem(self) -> str | None:
        if self.where == "new" or _RELEASE.match(self.where) or self.commit:
            return None
        return f"{self.path}: {self.where!r} is not 'new', 'vX.Y.Z' or '<owner>/<repo>@<40-hex commit>'"


def revisions(patch: Path) -> tuple[Revision, ...]:
    """The ``Upstream-File`` lines of ``patch``'s message, in order."""
    message = patch.read_text(encoding="utf-8").split("\ndiff --git ", 1)[0]
    return tuple(Revision(m["path"], m["where"]) for m in _UPSTREAM_FILE.finditer(message))


def problems(patch: Path) -> list[str]:
    """Why ``patch`` does not name each file it touches exactly once, each with a well-formed revision."""
    named = [revision.path for revision in revisions(patch)]
    touched = patchtext.patch_paths(patch.read_text(encoding="utf-8"))
    found = [why for revision in revisions(patch) if (why := revision.problem())]
    found += [f"{path}: touched, but no Upstream-File line names it" for path in touched if path not in named]
    found += [f"{path}: named by Upstream-File but not touched" for path in named if path not in touched]
    found += [f"{path}: named more than once" for path in sorted({p for p in named if named.count(p) > 1})]
    return found


def revision_path(cache_root: Path, repo: str, commit: str, path: str) -> Path:
    return cache_root / REVISIONS_DIR / repo.replace("/", "+") / commit / path


def fetch(cache_root: Path, revision: Revision) -> None:
    """Download a commit's file into the revisions folder unless it is there; one that fails stays absent."""
    repo, commit = revision.commit or ("", "")
    dest = revision_path(cache_root, repo, commit, revision.path)
    if dest.is_file():
        return
    url = RAW_URL.format(repo=repo, commit=commit, path=revision.path)
    try:
        with urllib.request.urlopen(url, timeout=20.0) as response:  # noqa: S310 (a fixed https host)
            data = response.read()
    except OSError:
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)


@dataclass(frozen=True)
class Checked:
    """What ``check`` found for one group: ``applied`` None when skipped; ``missing``: the files not checked."""

    group: str
    patches: tuple[Path, ...]
    applied: bool | None
    missing: tuple[str, ...] = ()
    error: str = ""
    checked: int = 0  # upstream files the hunks were applied to

    def line(self) -> str:
        names = " + ".join(patch.name for patch in self.patches)
        absent = f"; absent, so not checked: {', '.join(self.missing)}" if self.missing else ""
        if self.applied is None:
            return f"{self.group}: skipped, the upstream files are absent: {', '.join(self.missing)} ({names})"
        if self.applied:
            return f"{self.group}: applies to the {self.checked} upstream file(s) present ({names}){absent}"
        return f"{self.group}: does NOT apply ({names}): {self.error}"


def upstream_patch(folder: Path, group: str) -> Path | None:
    path = folder / "pr" / f"{group}{UPSTREAM_PATCH_SUFFIX}"
    return path if path.is_file() else None


def _source(revision: Revision, cache_root: Path, pins: Pins, series: str) -> Path | None:
    """Where the upstream text of ``revision`` is on this machine (None: absent)."""
    if revision.commit:
        found = revision_path(cache_root, *revision.commit, revision.path)
    else:
        pin = next((p for p in pins.pins if p.series == series and p.tag == revision.where), None)
        if pin is None:
            return None
        found = cache_root / "upstreams" / pin.dirname / revision.path
    return found if found.is_file() else None


def check_group(
    folder: Path, groups: Sequence[Group], name: str, cache_root: Path, pins: Pins, *, download: bool = False
) -> Checked | None:
    """Apply ``name``'s upstream patch, after those of the groups it comes after, to the files they name."""
    if upstream_patch(folder, name) is None:
        return None
    patches = tuple(p for g in chain(tuple(groups), name) if (p := upstream_patch(folder, g.name)) is not None)
    needed: dict[str, Revision] = {}
    for patch in patches:
        for revision in revisions(patch):
            needed.setdefault(revision.path, revision)  # a later patch applies on the earlier ones' result
    sources: dict[str, Path] = {}
    missing = []
    for path, revision in needed.items():
        if revision.where == "new":
            continue
        if download and revision.commit:
            fetch(cache_root, revision)
        source = _source(revision, cache_root, pins, folder.name)
        if source is None:
            missing.append(f"{path} at {revision.where}")
        else:
            sources[path] = source
    if missing and not sources:
        return Checked(name, patches, None, tuple(missing))
    present = [path for path, revision in needed.items() if path in sources or revision.where == "new"]
    with tempfile.TemporaryDirectory(prefix="upstream-pr-") as scratch:
        tree = Path(scratch)
        gitops.init_scratch(tree)
        for path, source in sources.items():
            (tree / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, tree / path)
        for patch in patches:
            result = gitops.apply_patch(tree, patch, include=present)
            if not result.ok:
                error = f"{patch.name}: {result.stderr.splitlines()[0]}"
                return Checked(name, patches, False, tuple(missing), error, len(sources))
    return Checked(name, patches, True, tuple(missing), checked=len(sources))


def summary(folder: Path, groups: Sequence[Group]) -> list[str]:
    """export-pr's line for each group whose PR is made from the release: what its upstream patch was made against."""
    lines = []
    for group in (g for g in groups if not (g.carried or g.comment or g.held or g.onto)):
        patch = upstream_patch(folder, group.name)
        if patch is None:
            lines.append(
                f"{folder.name}: group {group.name} has no pr/{group.name}{UPSTREAM_PATCH_SUFFIX}: its PR is made "
                "against the release only, not rebased onto upstream's newer files"
            )
            continue
        read = [f"{r.path} at {r.where}" for r in revisions(patch) if r.where != "new"]
        at_commit = any(r.commit for r in revisions(patch))
        unconfirmed = "; the branch those commits are on is not confirmed" if at_commit else ""
        lines.append(
            f"{folder.name}: group {group.name} is also {patch.relative_to(folder.parent.parent)}, made against "
            f"upstream's newest files read ({'; '.join(read)}){unconfirmed}; check it with python -m "
            f"patchset export upstream-prs {folder.name}"
        )
    return lines


def check_series(series_name: str, patches_dir: Path, cache_root: Path, pins: Pins, *, download: bool) -> int:
    """``export upstream-prs``: one line per group of ``series_name``; 1 when a patch does not apply, else 0."""
    series = load_series(patches_dir, series_name)
    folder = series.path.parent
    groups = load_groups(folder, len(series.patches))
    failed = False
    for group in groups:
        for why in problems(p) if (p := upstream_patch(folder, group.name)) else ():
            print(f"{group.name}: {why}")
            failed = True
        checked = check_group(folder, groups, group.name, cache_root, pins, download=download)
        if checked is not None:
            print(checked.line())
            failed = failed or checked.applied is False
    return 1 if failed else 0
