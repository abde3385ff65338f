"""A generated section of a text file: the text between a start and an end marker, made by code, never by hand."""

from __future__ import annotations

from pathlib import Path

from patchset.plumbing.errors import BadInput


def section(path: Path, start: str, end: str, what: str) -> tuple[str, int, int]:
    """``path``'s text and where its section is (from the start marker to the end of the end marker); a file
    without both markers, in order, is bad input (``what``: the section, in the message)."""
    text = path.read_text(encoding="utf-8")
    first, last = text.find(start), text.find(end)
    if first < 0 or last < first:
        raise BadInput(f"{path} has no {what} markers ({start!r} ... {end!r})")
    return text, first, last + len(end)


def differs(path: Path, start: str, end: str, what: str, made: str) -> bool:
    text, first, last = section(path, start, end, what)
    return text[first:last] != made


def replace(path: Path, start: str, end: str, what: str, made: str) -> None:
    text, first, last = section(path, start, end, what)
    path.write_text(text[:first] + made + text[last:], encoding="utf-8")
