"""The same patch in the series of two release lines: a ``# copy of <source>`` entry must be its source's change, the
same message and lines removed and added (docs/maintaining.md)."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from patchset.series.model import parse_series

_COPY = re.compile(r"#\s*copy of\s+(?P<source>\S+\.patch)\b")
_DIFF_GIT = "diff --git "


def copy_sources(folder: Path) -> dict[str, tuple[int, PurePosixPath]]:
    """{entry name: (series line, source path relative to the patches dir)} of the copies ``folder`` lists."""
    series_file = folder / "series"
    if not series_file.is_file():
        return {}
    entries = parse_series(series_file.read_text(encoding="utf-8").splitlines(), folder)
    found = [(entry, match) for entry in entries if (match := _COPY.search(entry.comment))]
    return {entry.name: (entry.line, PurePosixPath(match["source"])) for entry, match in found}


def message_of(text: str) -> str:
    """The commit message of a format-patch text: from ``Subject:`` to the diff (the From and Date lines left out)."""
    head = text.partition(f"\n{_DIFF_GIT}")[0]
    subject_on = head.find("\nSubject: ")
    return head[subject_on + 1 :] if subject_on >= 0 else head


def change_of(text: str) -> list[tuple[str, tuple[str, ...]]]:
    """(file header, the lines removed and added) for each file a format-patch text changes: what it does, without
    what depends on the release it was made against."""
    changes: list[tuple[str, tuple[str, ...]]] = []
    for section in text.split(f"\n{_DIFF_GIT}")[1:]:
        header, *lines = section.splitlines()
        in_hunk = False
        changed: list[str] = []
        for line in lines:
            if line.startswith("@@"):
                in_hunk = True
            elif in_hunk and line[:1] in ("+", "-"):
                changed.append(line)
            elif not in_hunk and line.startswith(("new file mode", "deleted file mode", "rename ")):
                changed.append(line)
        changes.append((header, tuple(changed)))
    return changes


def _drift(copy: str, source: str) -> str | None:
    """How the format-patch text ``copy`` differs from ``source`` in what it says or does (None: it does not)."""
    if message_of(copy) != message_of(source):
        return "its message differs from"
    mine, theirs = change_of(copy), change_of(source)
    if [header for header, _ in mine] != [header for header, _ in theirs]:
        return "it changes other files than"
    for (header, lines), (_, source_lines) in zip(mine, theirs, strict=True):
        if lines != source_lines:
            return f"it changes {header.rpartition(' b/')[2]} otherwise than"
    return None


def check_copies(patches_dir: Path, folder: Path) -> list[tuple[int, str]]:
    """(line of ``folder``'s series file, problem) for each copy there that is not its source's change."""
    problems = []
    refresh = f"scripts/export.sh checkout {folder.name} --force && scripts/export.sh export {folder.name}"
    for name, (line, source) in copy_sources(folder).items():
        source_path = patches_dir / source
        if source.is_absolute() or ".." in source.parts or not source_path.is_file():
            problems.append((line, f"{name} is a copy of {source}, which is not a patch of {patches_dir.name}/"))
            continue
        copy_path = folder / name
        if not copy_path.is_file():
            continue  # the series lint names a listed patch that is missing
        why = _drift(copy_path.read_text(encoding="utf-8"), source_path.read_text(encoding="utf-8"))
        if why:
            problems.append((line, f"{name} is a copy of {source}, but {why} it; refresh the copy: {refresh}"))
    return problems


def checkout_files(patches_dir: Path, folder: Path, names: list[str]) -> list[Path]:
    """The patch files a maintainer checkout of ``folder``'s series commits, in order, each copy's source in its
    place, so that an export makes every copy again from its source."""
    sources = copy_sources(folder)
    return [patches_dir / sources[name][1] if name in sources else folder / name for name in names]
