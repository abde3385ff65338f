"""Reading a patch's text (git format-patch output) without git: the paths it touches, the hunk at a line, its blobs."""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable
from dataclasses import dataclass

_DIFF_GIT = re.compile(r"^diff --git (?P<rest>.+)$")
_HUNK = re.compile(r"^@@ -(?P<old>\d+)(?:,\d+)? \+(?P<new>\d+)(?:,\d+)? @@.*$")
_NAME_LINES = ("--- ", "+++ ", "rename from ", "rename to ", "copy from ", "copy to ")
_INDEX = re.compile(r"^index (?P<before>[0-9a-f]+)\.\.(?P<after>[0-9a-f]+)(?: \d+)?$")


def _unquote(name: str) -> str:
    """Undo git's C-style quoting of a path (``"a/\\303\\251.py"``): the escapes of a Python bytes literal."""
    if not (len(name) >= 2 and name[0] == name[-1] == '"'):
        return name
    latin = codecs.decode(name[1:-1].encode("utf-8", "surrogateescape"), "unicode_escape")  # one char a byte
    return latin.encode("latin-1").decode("utf-8", "surrogateescape")


def _strip_side(name: str) -> str | None:
    """``a/x`` -> ``x``; ``/dev/null`` -> None (a --- / +++ / diff --git name, tab-suffix removed)."""
    name = _unquote(name.split("\t", 1)[0].strip())
    if name == "/dev/null":
        return None
    return name[2:] if name[:2] in ("a/", "b/") else name


def _names_from_diff_git(rest: str) -> list[str]:
    if rest.startswith('"'):
        end = rest.index('"', 1)
        while rest[end - 1] == "\\":
            end = rest.index('"', end + 1)
        first, second = rest[: end + 1], rest[end + 2 :]
        return [n for n in (_strip_side(first), _strip_side(second)) if n]
    if rest.endswith('"'):
        start = rest.rindex(' "')
        return [n for n in (_strip_side(rest[:start]), _strip_side(rest[start + 1 :])) if n]
    half = (len(rest) - 1) // 2  # "a/N b/N": the common case of an unrenamed, unquoted path
    if rest[half] == " " and rest[2:half] == rest[half + 3 :]:
        return [rest[2:half]]
    return []


def _header_name(line: str) -> str | None:
    """The path named by a file-header line (``--- a/x``, ``rename to x``, ...), else None."""
    for prefix in _NAME_LINES:
        if line.startswith(prefix):
            value = line[len(prefix) :]
            return _strip_side(value) if prefix in ("--- ", "+++ ") else _unquote(value)
    return None


@dataclass(frozen=True)
class BlobChange:
    """What a patch does to one file, by git blob id (``--full-index``): the file before and after it (None: absent)."""

    path: str
    before: str | None
    after: str | None


def _file_sections(text: str) -> list[tuple[list[str], list[str], list[BlobChange]]]:
    """(paths, hunk headers, what its ``index`` line says) for each file of a patch. Only header lines are read for
    names: inside a hunk a removed line ``-- x`` looks like ``--- x``."""
    sections: list[tuple[list[str], list[str], list[BlobChange]]] = []
    in_header = False
    for line in text.splitlines():
        if match := _DIFF_GIT.match(line):
            sections.append((_names_from_diff_git(match["rest"]), [], []))
            in_header = True
        elif sections and _HUNK.match(line):
            sections[-1][1].append(line)
            in_header = False
        elif in_header and (name := _header_name(line)):
            sections[-1][0].append(name)
        elif in_header and (index := _INDEX.match(line)) and sections[-1][0]:
            before, after = (None if set(blob) == {"0"} else blob for blob in (index["before"], index["after"]))
            sections[-1][2].append(BlobChange(sections[-1][0][-1], before, after))
    return sections


def patch_paths(text: str) -> list[str]:
    """Every path a patch reads or writes (both sides of a rename), in order of appearance, without duplicates."""
    return list(dict.fromkeys(name for names, _, _ in _file_sections(text) for name in names))


def split_files(text: str) -> tuple[str, list[str]]:
    """The message before a patch's first file, and each file's diff as the text has it (the last one ends with
    whatever follows it, such as format-patch's signature)."""
    head, *sections = re.split(r"(?m)^(?=diff --git )", text)
    return head, sections


def only_paths(text: str, keep: Callable[[str], bool]) -> str:
    """``text`` with only the files whose every path ``keep`` accepts: what of a patch a release installs (its
    package, not upstream's ``tests/``). The message before the first file stays as it is."""
    head, sections = split_files(text)
    return head + "".join(section for section in sections if all(map(keep, patch_paths(section))))


def cut_short(raw: bytes, files_read: int) -> str | None:
    """Why the patch ``raw`` looks truncated or corrupt, else None: it must end with a newline, as format-patch output
    does, and hold no more ``diff --git`` headers than the ``files_read`` git read (git drops a cut one silently)."""
    if not raw.endswith(b"\n"):
        return "it does not end with a newline: truncated?"
    headers = sum(1 for line in raw.split(b"\n") if line.startswith(b"diff --git "))
    if headers != files_read:
        return f"it has {headers} 'diff --git' headers but git reads {files_read} files from it: truncated or corrupt?"
    return None


def find_hunk(text: str, path: str, line: int, *, reverse: bool = False) -> str | None:
    """The ``@@ ... @@`` header of the hunk of ``path`` that starts at ``line`` (old side; new side if reverse)."""
    for names, hunks, _ in _file_sections(text):
        if path not in names:
            continue
        for hunk in hunks:
            if (match := _HUNK.match(hunk)) and int(match["new" if reverse else "old"]) == line:
                return hunk
    return None


def patch_blob_changes(text: str) -> list[BlobChange]:
    """Each file of a ``--full-index`` patch with the blob ids of its ``index`` line, in order; a file without one
    (a mode change only) is left out. The ids identify a file's content whatever git version reads them."""
    return [change for _, _, changes in _file_sections(text) for change in changes]
