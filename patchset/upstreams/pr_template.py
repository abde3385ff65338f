"""What an export-pr PR body says, before an upstream's PR template (named by its registry entry) lays it out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class PrParts:
    """What a PR body says, before an upstream's template lays it out."""

    stack: list[str]  # the lines on the branch it depends on (a group ``after`` another)
    paragraphs: list[str]  # the description (``pr/<group>.md``'s message, else the patches')
    overview: list[str]  # its first paragraph (the subject when there is none)
    details: list[str]  # the others
    related: list[str]  # backport and "Fixes <bug>" lines
    tests: list[str]  # the gates run and what they said
    files: list[str]  # the files changed, one "- `path`" line each
    sections: str  # the further sections of ``pr/<group>.md``
    passed: bool  # every gate passed
    new_tests: bool  # the branch adds tests of its own

    def section_lines(self) -> list[str]:
        """The further sections of ``pr/<group>.md`` one heading level down (``## `` -> ``### ``), then a blank line;
        none when it has none."""
        if not self.sections:
            return []
        return [self.sections.replace("\n## ", "\n### ").replace("## ", "### ", 1), ""]


# an upstream's PR template: the body export-pr prints, from its parts
PrTemplate = Callable[[PrParts], str]
