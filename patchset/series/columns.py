"""The 72-column rule of messages that go upstream (git's and both upstreams' convention). Exempt, as none can be
cut: ``Name: value`` fields, a URL, one word or code span, and in markdown a table row or a fenced code block."""

from __future__ import annotations

import itertools
import re

WIDTH = 72
_URL = re.compile(r"https?://")
_FIELD = re.compile(r"^[A-Za-z][A-Za-z0-9-]*:\s")


def field_block(lines: list[str]) -> bool:
    """True for a paragraph of ``Name: value`` lines, continuation lines indented (DEP-3 fields, trailers)."""
    return bool(lines) and all(_FIELD.match(ln) or (i and ln[:1].isspace()) for i, ln in enumerate(lines))


def long_lines(lines: list[tuple[int, str]], markdown: bool = False) -> list[tuple[int, str]]:
    """(line number, problem) for each line of a message over ``WIDTH`` columns that is not exempt."""
    problems: list[tuple[int, str]] = []
    fenced = False
    for blank, block in itertools.groupby(lines, key=lambda numbered: not numbered[1].strip()):
        paragraph = list(block)
        if blank or field_block([line for _, line in paragraph]):
            continue
        for number, line in paragraph:
            if markdown and line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            bare = line.strip()
            one_span = bare.startswith("`") and bare.endswith("`") and bare.count("`") == 2
            unbreakable = _URL.search(line) or " " not in bare or one_span
            exempt = unbreakable or (markdown and (fenced or line.lstrip().startswith("|")))
            if len(line) > WIDTH and not exempt:
                problems.append((number, f"message line of {len(line)} columns; wrap it at {WIDTH}"))
    return problems


def subject_problem(subject: str, what: str = "Subject") -> str | None:
    """Why ``subject`` is too long for upstream's history (None when it fits)."""
    if len(subject) <= WIDTH:
        return None
    return f"{what} of {len(subject)} columns; upstream's history keeps it within {WIDTH}: move detail to the body"


def patch_message_lines(text: str) -> list[tuple[int, str]]:
    """The message lines of a ``git format-patch`` file, numbered as in the file: after the mail headers, up to
    ``---`` or the first ``diff --git``."""
    numbered = list(enumerate(text.split("\n"), start=1))
    start = next((number for number, line in numbered if not line.strip()), len(numbered))
    message = itertools.takewhile(
        lambda item: item[1] != "---" and not item[1].startswith("diff --git "), numbered[start:]
    )
    return list(message)
