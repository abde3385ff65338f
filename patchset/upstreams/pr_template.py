"""What an export-pr PR body says, before an upstream's PR template lays it out. Upstream's maintainers read it: it
stays short and uses no word that means something only to this project (``body_problems``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_BODY_LINES = 80
# words and forms a reader upstream cannot follow: this project's names, its tools and files, its notes on sources
FORBIDDEN = (
    "branch unknown",
    "stored revision",
    "stored cop",
    "the index keeps",
    "pull-request refs",
    "this project",
    "regression suite",
    "python calls",
    "patchset",
    "carried patch",
    "teeth",
    "overlay",
    "export-pr",
    "sdist",
    "sha256",
    "patch header",
    "patch trailer",
    "vanilla",
    "the lock",
    "tests/regression",
    "scripts/",
    "verl-trinity",
    "not run again",
)
_SHA256 = re.compile(r"\b[0-9a-f]{64}\b")
# the description's section that is an issue to open before the PR: export-pr prints it apart, not in the body
ISSUE_FIRST = "Issue to open first"
# the description's section that says why the PR duplicates no open one (verl's AGENTS.md asks it of every PR)
NOT_DUPLICATE = "Why this is not a duplicate"
# what only the person who sends the PR can declare (verl's AGENTS.md): left unticked in every body
DECLARATIONS = (
    "- [ ] AI assistance: say whether and how it was used, and add its `Co-authored-by:` trailer to the commits.",
    "- [ ] I reviewed every changed line, can defend the change, and ran the tests above myself.",
)


@dataclass(frozen=True)
class PrParts:
    """What a PR body says, before an upstream's template lays it out."""

    overview: list[str]  # what and why, in a few lines: the description's paragraphs before its first section
    related: list[str]  # one line each: what the PR is made against or cherry-picks, what it depends on, fixes
    tests: list[str]  # the gates that ran here and what they said, one line each
    sections: dict[str, str] = field(default_factory=dict)  # the description's "## " sections, by heading
    passed: bool = True  # every gate passed
    new_tests: bool = False  # the branch adds or changes tests

    def declarations(self, level: str) -> list[str]:
        """Why the PR is not a duplicate, then the declarations left to its sender, under headings of ``level``."""
        return [
            f"{level} {NOT_DUPLICATE}",
            "",
            *self.section(NOT_DUPLICATE, "No open PR or issue makes this change."),
            "",
            f"{level} Declarations (for the person sending this PR)",
            "",
            *DECLARATIONS,
            "",
        ]

    def section(self, heading: str, default: str = "") -> list[str]:
        """The lines of the description's section ``heading`` (``default`` when it has none)."""
        return self.sections.get(heading, default).splitlines()

    def other_sections(self, known: tuple[str, ...], level: str = "####") -> list[str]:
        """The description's sections not in ``known``, each under a heading of ``level``."""
        lines: list[str] = []
        for heading, text in self.sections.items():
            if heading not in known:
                lines += [f"{level} {heading}", "", *text.splitlines(), ""]
        return lines


def body_problems(body: str) -> list[str]:
    """Why ``body`` is not a PR body upstream reads as its own: too long, or a word from ``FORBIDDEN``."""
    problems = []
    lines = body.rstrip("\n").splitlines()
    if len(lines) > MAX_BODY_LINES:
        problems.append(f"{len(lines)} lines, over the limit of {MAX_BODY_LINES}")
    for number, line in enumerate(lines, start=1):
        lowered = line.lower()
        problems += [f"line {number}: {word!r} means nothing upstream" for word in FORBIDDEN if word in lowered]
        if _SHA256.search(line):
            problems.append(f"line {number}: a sha256 means nothing upstream")
    return problems


def split_sections(text: str) -> dict[str, str]:
    """{heading: its text} of the ``## `` sections of a description."""
    chunks = (chunk.partition("\n") for chunk in re.split(r"^## ", text, flags=re.MULTILINE)[1:])
    return {heading.strip(): rest.strip("\n") for heading, _, rest in chunks}


# an upstream's PR template: the body export-pr prints, from its parts
PrTemplate = Callable[[PrParts], str]
