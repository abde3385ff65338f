"""Maintainer checkouts of a series, and the byte-stable export of their commits back into the series folder: every
configuration key that changes ``git format-patch`` output is pinned, so an unchanged branch exports the same bytes."""

from __future__ import annotations

import difflib
import email.parser
import email.policy
import email.utils
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from patchset.plumbing import files, gitops, tempdirs
from patchset.plumbing.errors import BadInput, DoesNotApply
from patchset.plumbing.ui import Console, display_path
from patchset.series.groups import GROUPS_FILE, renumber_text
from patchset.series.model import PATCH_NAME, parse_series, read_patch, split_comment, split_patch, subject_of
from patchset.upstreams.pins import Pin

BRANCH = "patches"
# the trailer of a maintainer checkout's commit that names its patch file (Electron's); never in an exported patch
TRAILER = "Patch-Filename"
_TRAILER_LINE = re.compile(rf"^{TRAILER}: *(?P<name>\S+) *\n", re.MULTILINE)
_FIELD_LINE = re.compile(r"^[A-Za-z][A-Za-z0-9-]*: |^[ \t]")
SERIES_HEADER = "# Applied in this order by scripts/apply.sh; one patch file name a line."

_CONFIG_SERIES = "patchset.series"
_CONFIG_TAG = "patchset.tag"

# keys known to change ``git format-patch`` output that no option below sets, at git's default (older gits ignore some)
_FORMAT_CONFIG = {
    "core.abbrev": "auto",
    "core.attributesFile": "/dev/null",
    "core.quotePath": "true",
    "diff.algorithm": "myers",
    "diff.context": "3",
    "diff.dstPrefix": "b/",
    "diff.indentHeuristic": "true",
    "diff.interHunkContext": "0",
    "diff.mnemonicPrefix": "false",
    "diff.noprefix": "false",
    "diff.relative": "false",
    "diff.renames": "true",
    "diff.srcPrefix": "a/",
    "diff.suppressBlankEmpty": "false",
    "format.forceInBodyFrom": "false",
    "format.noprefix": "false",
    "format.suffix": ".patch",
    "i18n.logOutputEncoding": "UTF-8",
    "log.showSignature": "false",
}
# the house format plus the options that override format.* (--no-numbered: adding a patch rewrites no other)
_FORMAT_OPTIONS = (
    "--zero-commit",
    "--full-index",
    "--no-stat",
    "--no-signature",
    "--no-numbered",
    "--subject-prefix=PATCH",
    "--no-to",
    "--no-cc",
    "--no-add-header",
    "--no-thread",
    "--no-cover-letter",
    "--no-base",
    "--no-notes",
    "--no-signoff",
    "--no-from",
    "--encode-email-headers",
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "-O/dev/null",
)

_AREA = re.compile(r"^\[(?P<area>[^\]]*)\]\s*")
_CHANGE_TYPE = re.compile(
    r"^(?:fix|feat|feature|refactor|chore|docs?|tests?|perf|ci|build|style|revert|misc)(?:\([^)]*\))?!?:\s*",
    re.IGNORECASE,
)
_STOP_WORDS = frozenset({"a", "an", "the", "by", "of", "to", "in", "on", "for", "and", "with", "from", "at", "as"})
_SLUG_MAX = 50
_DIFF_LINES_SHOWN = 12


def _git_env() -> dict[str, str]:
    """The user's global and system git config off, and no identity or date from the environment."""
    identity = re.compile(r"GIT_(AUTHOR|COMMITTER)_(NAME|EMAIL|DATE)")
    return {name: value for name, value in gitops.isolated_env().items() if not identity.fullmatch(name)}


def _message_end(text: str) -> int:
    """Where the message of the ``git format-patch`` text ``text`` ends, the blank lines before its cut left out."""
    headers, body, _ = split_patch(text)
    return len((headers + body).rstrip("\n")) + 1


def with_trailer(text: str, name: str) -> str:
    """``text`` (a patch) with ``Patch-Filename: name`` ending its message; `without_trailer` takes it out again."""
    end = _message_end(text)
    body = text[:end]
    last = body.rstrip("\n").rsplit("\n\n", 1)[-1]
    own_paragraph = not all(_FIELD_LINE.match(line) for line in last.splitlines())
    return body + ("\n" if own_paragraph else "") + f"{TRAILER}: {name}\n" + text[end:]


def without_trailer(text: str) -> tuple[str, str | None]:
    """``text`` without its ``Patch-Filename`` trailers, and the file the first one names (None: a new commit)."""
    end = _message_end(text)
    body = text[:end]
    found = list(_TRAILER_LINE.finditer(body))
    if not found:
        return text, None
    for match in reversed(found):
        start, stop = match.span()
        if body[:start].endswith("\n\n") and stop == len(body):  # a paragraph of its own: its blank line goes too
            start -= 1
        body = body[:start] + body[stop:]
    return body + text[end:], found[0]["name"]


def make_checkout(pin: Pin, vanilla: Path, patches: Sequence[tuple[str, Path]], dest: Path, console: Console) -> None:
    """Clone ``vanilla`` over ``dest`` and commit each of ``patches`` ((series entry, its file)) on ``BRANCH``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tempdirs.sweep(dest.parent)  # what killed checkouts left beside it
    tmp = Path(tempfile.mkdtemp(prefix=tempdirs.prefix("checkout", hidden=True), dir=dest.parent))
    try:
        tree = tmp / "tree"
        try:
            gitops.clone_local(vanilla, tree)
        except gitops.GitError as exc:
            raise BadInput(f"could not clone {display_path(vanilla)}: {exc}") from None
        env = _git_env()
        if gitops.tag_commit(tree, pin.tag) is None:
            raise BadInput(f"{display_path(vanilla)} has no tag {pin.tag}; remove it so the next run fetches it again")
        gitops.run_git([*gitops.NEUTRAL, "checkout", "-q", "-b", BRANCH, pin.tag], cwd=tree, env=env)
        gitops.run_git(["config", _CONFIG_SERIES, pin.series], cwd=tree, env=env)
        gitops.run_git(["config", _CONFIG_TAG, pin.tag], cwd=tree, env=env)
        for number, (entry, patch) in enumerate(patches, start=1):
            console.step(f"Committing {patch.name} ({number}/{len(patches)})")
            header = email.parser.BytesHeaderParser(policy=email.policy.default).parsebytes(patch.read_bytes())
            author = str(header.get("From", ""))
            if not email.utils.parseaddr(author)[1]:
                raise BadInput(f"{display_path(patch)} has no From: author; re-export it with git format-patch")
            am_env = gitops.committer_env(author, env)
            named = with_trailer(patch.read_bytes().decode("utf-8", "surrogateescape"), entry)
            if (reason := gitops.am(tree, named, am_env, ["--committer-date-is-author-date"])) is not None:
                raise DoesNotApply(
                    f"{patch.name} does not apply to {pin.label} with git am ({reason}); "
                    f"see scripts/apply.sh --check for the failing hunk"
                )
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tree, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@dataclass(frozen=True)
class Change:
    """One file the export changes: ``kind`` is changed, added, removed or renamed (from ``old_name``)."""

    kind: str
    name: str
    path: Path
    old: bytes | None
    new: bytes | None
    old_name: str | None = None
    subject: str = ""


@dataclass(frozen=True)
class Export:
    """What exporting a checkout would write: the series folder, its patches in order and their changes."""

    folder: Path
    names: tuple[str, ...]
    changes: tuple[Change, ...]  # none: the export is byte-identical to the folder
    source: str


def check_checkout(checkout: Path, pin: Pin, console: Console) -> None:
    """Refuse (``BadInput``, naming the path and the next step) anything but a maintainer checkout of ``pin``."""
    shown = display_path(checkout)
    remake = f"make one with: scripts/export.sh checkout {pin.key}"
    if not checkout.is_dir():
        raise BadInput(f"{shown} does not exist; {remake}")
    try:
        tree = gitops.find_worktree(checkout)
    except gitops.GitError as exc:
        raise BadInput(f"{shown}: {exc}") from None
    if tree is None or tree.prefix:
        raise BadInput(f"{shown} is not the top of a git checkout; {remake}")
    env = _git_env()
    series = gitops.git_value(checkout, "config", "--get", _CONFIG_SERIES, env=env)
    if series is not None and series != pin.series:
        raise BadInput(f"{shown} is a maintainer checkout of the {series} series, not {pin.series}; {remake}")
    tag = gitops.git_value(checkout, "config", "--get", _CONFIG_TAG, env=env)
    if tag is not None and tag != pin.tag:
        raise BadInput(f"{shown} was made on {tag}, but {pin.label} is pinned at {pin.tag}; {remake}")
    if gitops.tag_commit(checkout, pin.tag) is None:
        raise BadInput(f"{shown} has no tag {pin.tag}, so it is not a checkout of {pin.label}; {remake}")
    if gitops.git_value(checkout, "rev-parse", "-q", "--verify", f"refs/heads/{BRANCH}^{{commit}}", env=env) is None:
        raise BadInput(f"{shown} has no branch {BRANCH} (the series as commits on {pin.tag}); {remake}")
    if gitops.in_progress(checkout, ("rebase-merge", "rebase-apply"), env):
        raise BadInput(f"{shown} has a rebase or git am in progress; finish it (--continue) or --abort it first")
    if not gitops.is_ancestor(checkout, pin.tag, BRANCH):
        raise BadInput(f"{shown}: branch {BRANCH} is not based on {pin.tag}; rebase it: git rebase {pin.tag} {BRANCH}")
    if gitops.git_value(checkout, "rev-list", "--merges", f"{pin.tag}..{BRANCH}", env=env):
        raise BadInput(f"{shown}: {pin.tag}..{BRANCH} has merge commits; make it linear: git rebase {pin.tag}")
    if gitops.git_value(checkout, "symbolic-ref", "-q", "HEAD", env=env) != f"refs/heads/{BRANCH}":
        console.warn(f"{shown}: HEAD is not on branch {BRANCH}; exporting branch {BRANCH}")
    elif not gitops.is_clean(checkout):
        console.warn(f"{shown} has uncommitted changes; they are not exported (commit them: git commit --amend)")


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def new_slug(subject: str) -> str:
    """``[trainer] fix: scale the critic loss`` -> ``trainer-scale-critic-loss``, cut between words."""
    subject = subject_of(subject)
    area = _words(match["area"].split(",")[0]) if (match := _AREA.match(subject)) else []
    while match := _AREA.match(subject):  # every tag goes; the first ("[trainer] [ci] ...") names the area
        subject = subject[match.end() :]
    words = [w for w in _words(_CHANGE_TYPE.sub("", subject)) if w not in _STOP_WORDS] or ["patch"]
    slug = "-".join(area)
    for word in words:
        candidate = f"{slug}-{word}" if slug else word
        if len(candidate) > _SLUG_MAX and slug and len(words) > 1:
            break
        slug = candidate
    return slug[:_SLUG_MAX].strip("-") or "patch"


def patch_slug(name: str) -> str:
    """The part of a patch name after its number (``0001-trainer-x.patch`` -> ``trainer-x``), made a slug if need be."""
    if match := PATCH_NAME.match(name):
        return match["slug"]
    stem = re.sub(r"^\d+-", "", PurePosixPath(name).name.removesuffix(".patch"))
    return "-".join(_words(stem)) or "patch"


def assign_names(
    exported: Sequence[tuple[str | None, str]], old_entries: Sequence[str]
) -> list[tuple[str, str | None]]:
    """(file name, the old entry it continues or None) for each exported (trailer or None, subject), in order."""
    slugs = [patch_slug(named) if named is not None else new_slug(subject) for named, subject in exported]
    source: list[str | None] = [named if named in old_entries else None for named, _ in exported]
    claimed: set[str | None] = {None}
    for i, old in enumerate(source):  # the first patch that names an entry continues it
        source[i] = None if old in claimed else old
        claimed.add(old)
    for i, slug in enumerate(slugs):
        if source[i] is None:
            source[i] = next((e for e in old_entries if e not in claimed and patch_slug(e) == slug), None)
            claimed.add(source[i])
    names: list[tuple[str, str | None]] = []
    taken: set[str] = set()
    for i, slug in enumerate(slugs):
        name, extra = f"{i + 1:04d}-{slug}.patch", 2
        while name in taken:
            name, extra = f"{i + 1:04d}-{slug}-{extra}.patch", extra + 1
        taken.add(name)
        names.append((name, source[i]))
    return names


def series_text(old_lines: Sequence[str] | None, names: Sequence[tuple[str, str | None]]) -> str:
    """The ``series`` file listing ``names``, the old file's comments kept where they were or with their patch."""
    if old_lines is None:
        return "\n".join([SERIES_HEADER, *(name for name, _ in names)]) + "\n"
    comments: dict[str, str] = {}
    entry_lines: list[int] = []
    for number, line in enumerate(old_lines):
        entry, comment = split_comment(line)
        if entry:
            entry_lines.append(number)
            comments.setdefault(entry, comment)
    pending = [f"{name}{comments.get(old, '') if old else ''}" for name, old in names]
    out: list[str] = []
    for number, line in enumerate(old_lines):
        if number not in entry_lines:
            out.append(line)
        elif number == entry_lines[-1]:  # the last entry's place takes every name left
            out += pending
            pending = []
        elif pending:
            out.append(pending.pop(0))
    out += pending
    return "".join(f"{line}\n" for line in out)


def plan_export(pin: Pin, checkout: Path, patches_dir: Path, console: Console) -> Export:
    """What exporting ``checkout`` into ``patches_dir/<series>/`` would write, compared with what is there."""
    check_checkout(checkout, pin, console)
    folder = patches_dir / pin.series
    series_file = folder / "series"
    old_lines = series_file.read_text(encoding="utf-8").splitlines() if series_file.is_file() else None
    old_entries = list(dict.fromkeys(entry.name for entry in parse_series(old_lines or [], folder)))  # each once
    with tempfile.TemporaryDirectory(prefix=tempdirs.prefix("export")) as tmp:
        args = [*_FORMAT_OPTIONS, "-o", tmp, f"{pin.tag}..{BRANCH}"]
        try:  # byte-stable: every setting that changes the output is pinned above
            gitops.run_git([*gitops.config_args(_FORMAT_CONFIG), "format-patch", *args], cwd=checkout, env=_git_env())
        except gitops.GitError as exc:
            raise BadInput(f"cannot export {display_path(checkout)}: {exc}") from None
        exported = sorted(Path(tmp).glob("*.patch"))
        subjects = [read_patch(path).subject for path in exported]
        stripped = [without_trailer(path.read_bytes().decode("utf-8", "surrogateescape")) for path in exported]
    contents = [text.encode("utf-8", "surrogateescape") for text, _ in stripped]
    trailers = [named for _, named in stripped]
    names = assign_names(list(zip(trailers, subjects, strict=True)), old_entries)
    continued = {old for _, old in names if old is not None}
    if not any(trailers) and (lost := [entry for entry in old_entries if entry not in continued]):
        console.warn(
            f"no commit of {pin.tag}..{BRANCH} in {display_path(checkout)} carries a {TRAILER} trailer (a checkout "
            f"made before they were written?), so each is named from its subject and {', '.join(lost)} would go; "
            f"if that is wrong, export nothing, make a fresh checkout (scripts/export.sh checkout {pin.series} "
            f"--force) and redo the edits there"
        )
    changes: list[Change] = []
    for (name, old), data, subject in zip(names, contents, subjects, strict=True):
        path = folder / name
        if old is not None and old != name:
            before = (folder / old).read_bytes() if (folder / old).is_file() else None
            changes.append(Change("renamed", name, path, before, data, old_name=old, subject=subject))
        elif not path.is_file():
            changes.append(Change("added", name, path, None, data, subject=subject))
        elif path.read_bytes() != data:
            changes.append(Change("changed", name, path, path.read_bytes(), data, subject=subject))
    kept = {name for name, _ in names}
    for entry in old_entries:
        if entry not in continued and entry not in kept:
            path = folder / entry
            changes.append(Change("removed", entry, path, path.read_bytes() if path.is_file() else None, None))
    new_series = series_text(old_lines, names).encode("utf-8")
    old_series = series_file.read_bytes() if series_file.is_file() else None
    if new_series != old_series:
        changes.append(Change("changed" if old_series else "added", "series", series_file, old_series, new_series))
    groups_file = folder / GROUPS_FILE
    if groups_file.is_file():  # keep the concern groups on the same patches, and give each new patch its own
        moved: dict[int, int | None] = {number: None for number in range(1, len(old_entries) + 1)}
        added: list[tuple[int, str]] = []
        for position, (name, old) in enumerate(names, start=1):
            if old is not None and old in old_entries:
                moved[old_entries.index(old) + 1] = position
            else:
                added.append((position, patch_slug(name)))
        old_groups = groups_file.read_bytes()
        new_groups = renumber_text(old_groups.decode("utf-8"), moved, added).encode("utf-8")
        if new_groups != old_groups:
            changes.append(Change("changed", GROUPS_FILE, groups_file, old_groups, new_groups))
    source = f"{pin.tag}..{BRANCH} of {display_path(checkout)}"
    return Export(folder=folder, names=tuple(name for name, _ in names), changes=tuple(changes), source=source)


def write_export(export: Export) -> None:
    """Write the changes of ``export``: patches first, files no longer listed removed, ``series`` last."""
    export.folder.mkdir(parents=True, exist_ok=True)
    names = set(export.names)
    for change in sorted(export.changes, key=lambda change: change.name == "series"):
        if change.new is not None:
            files.write_durably(change.path, change.new)
        replaced = change.old_name if change.kind == "renamed" else change.name if change.kind == "removed" else None
        if replaced is not None and replaced not in names and (export.folder / replaced).is_file():
            (export.folder / replaced).unlink()


def describe(change: Change) -> list[str]:
    """What ``change`` would do, in one line naming the file, then a short unified diff of it."""
    shown = display_path(change.path)
    if change.kind == "removed":
        return [f"{shown}: would be removed (no longer a commit on {BRANCH})"]
    old, new = ((data or b"").decode("utf-8", "surrogateescape").splitlines() for data in (change.old, change.new))
    if change.kind == "added":
        title = f'"{change.subject}"' if change.subject else f"{len(new)} lines"
        return [f"{shown}: would be added ({title})"]
    diff = list(difflib.unified_diff(old, new, n=0, lineterm=""))[2:]
    counts = f"+{sum(line.startswith('+') for line in diff)} -{sum(line.startswith('-') for line in diff)} lines"
    if change.kind == "renamed":
        head = f"{shown}: would replace {change.old_name}" + (f" ({counts})" if diff else " (same content)")
    else:
        head = f"{shown}: would change ({counts})"
    shown_diff = [f"    {line}" for line in diff[:_DIFF_LINES_SHOWN]]
    if len(diff) > _DIFF_LINES_SHOWN:
        shown_diff.append(f"    ... {len(diff) - _DIFF_LINES_SHOWN} more diff lines")
    return [head, *shown_diff]
