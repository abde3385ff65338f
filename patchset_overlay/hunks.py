"""A ``git format-patch`` file read and applied to text in memory as ``git apply`` would (exact context, never fuzzed),
with the standard library only: training machines may have neither git nor this project's tooling.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_FIELD = re.compile(r"^([A-Z][A-Za-z-]+): (.*)$")


class HunkError(ValueError):
    """A hunk's context is not in the text it is applied to."""


@dataclass(frozen=True)
class Hunk:
    old_start: int
    new_start: int
    old: tuple[str, ...]  # the lines it expects (context and removed), each with its line ending
    new: tuple[str, ...]  # the lines it leaves (context and added)


@dataclass
class Patch:
    """One patch file: its slug (the file name without ``NNNN-`` and ``.patch``), DEP-3 fields, hunks per path."""

    path: Path
    fields: dict[str, str] = field(default_factory=dict)
    files: dict[str, list[Hunk]] = field(default_factory=dict)  # path in the tree (b/ side) -> its hunks
    new_files: set[str] = field(default_factory=set)

    @property
    def slug(self) -> str:
        return self.path.name.removesuffix(".patch").split("-", 1)[1]

    @property
    def applied_upstream(self) -> str | None:
        """The first upstream release that has this change (DEP-3 ``Applied-Upstream: 0.9.0, <url>``), or None."""
        value = self.fields.get("Applied-Upstream")
        return value.split(",", 1)[0].strip() if value else None


def split_lines(text: str) -> list[str]:
    """``text``'s lines with their ``\n``: only ``\n`` ends a line, as for git (not ``str.splitlines``' form feed)."""
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def read_patch(path: Path) -> Patch:
    """Parse ``path``; raise ValueError naming the file and line where it is not a patch this reader knows."""
    patch = Patch(path)
    lines = split_lines(path.read_text(encoding="utf-8"))
    current: str | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("diff --git "):
            current = None
        elif line.startswith("--- ") and current is None:
            old_name = line[4:].strip()
            name = lines[index + 1][4:].split("\t", 1)[0].strip()
            current = name[2:] if name[:2] in ("a/", "b/") else name
            patch.files.setdefault(current, [])
            if old_name == "/dev/null":
                patch.new_files.add(current)
            index += 1
        elif line.startswith("@@") and current is not None:
            match = _HUNK.match(line)
            if match is None:
                raise ValueError(f"{path}:{index + 1}: not a hunk header: {line.rstrip()}")
            old_count = 1 if match.group(2) is None else int(match.group(2))
            new_count = 1 if match.group(4) is None else int(match.group(4))
            old: list[str] = []
            new: list[str] = []
            index += 1
            while (len(old) < old_count or len(new) < new_count) and index < len(lines):
                body = lines[index]
                kind, text = body[:1], body[1:]
                if kind == " " or body == "\n":
                    old.append(text or "\n")
                    new.append(text or "\n")
                elif kind == "-":
                    old.append(text)
                elif kind == "+":
                    new.append(text)
                elif kind != "\\":
                    raise ValueError(f"{path}:{index + 1}: unexpected line in a hunk: {body.rstrip()}")
                index += 1
                if index < len(lines) and lines[index].startswith("\\"):  # "\ No newline at end of file"
                    if kind in (" ", "-"):
                        old[-1] = old[-1].rstrip("\n")
                    if kind in (" ", "+"):
                        new[-1] = new[-1].rstrip("\n")
                    index += 1
            patch.files[current].append(Hunk(int(match.group(1)), int(match.group(3)), tuple(old), tuple(new)))
            continue
        elif current is None and (match := _FIELD.match(line.rstrip("\n"))):
            patch.fields.setdefault(match.group(1), match.group(2))
        index += 1
    return patch


def _find(lines: list[str], wanted: tuple[str, ...], expected: int) -> int:
    """The start of ``wanted`` in ``lines`` nearest to ``expected``, or -1."""
    size = len(wanted)
    for distance in range(len(lines) + 1):
        for start in (expected - distance, expected + distance) if distance else (expected,):
            if 0 <= start <= len(lines) - size and tuple(lines[start : start + size]) == wanted:
                return start
        if expected - distance < 0 and expected + distance > len(lines) - size:
            break
    return -1


def apply_hunks(text: str, hunks: list[Hunk], reverse: bool = False, where: str = "") -> str:
    """``text`` with ``hunks`` applied (or taken back, with ``reverse``); HunkError names the first that fails."""
    lines = split_lines(text)
    offset = 0
    for number, hunk in enumerate(hunks, 1):
        old, new = (hunk.new, hunk.old) if reverse else (hunk.old, hunk.new)
        at = hunk.new_start if reverse else hunk.old_start
        expected = max(at - 1 + offset, 0) if old else at + offset
        start = _find(lines, old, expected)
        if start < 0:
            raise HunkError(f"{where}: hunk {number} (line {at}) does not apply")
        lines[start : start + len(old)] = new
        offset = start - (at - 1) + len(new) - len(old)
    return "".join(lines)
