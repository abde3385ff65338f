"""How each concern group goes upstream, and why: a PR, a comment on an open PR, a held branch, or nothing.

Upstream's own process decides it (verl's ``AGENTS.md``: "If an open PR already addresses the same fix, do not open
another. If your approach is materially different, explain the difference in the issue."). ``groups`` declares it
per group (``patchset.series.groups``); export-pr prints one line per group from ``route`` before it makes anything,
and the text of each comment from ``comment_text``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from patchset.series.groups import COMMENT_SUFFIX, Group
from patchset.series.model import Patch

_DIFF = re.compile(r"^diff --git a/(?P<path>\S+) ", re.MULTILINE)


def route(group: Group) -> tuple[str, str]:
    """(what export-pr makes of ``group``, why): "PR", "comment", "held" or "carried"."""
    if group.carried:
        return "carried", f"no PR: {group.carried}"
    if group.held:
        design = f"; its design goes to #{group.comment[0]} as a comment first (below)" if group.comment else ""
        return "held", f"branch made and gated, PR not opened yet: {group.held}{design}"
    if group.comment:
        target, *copies = group.comment
        also = f", copied to {', '.join(f'#{n}' for n in copies)}" if copies else ""
        return "comment", (
            f"a comment on open PR #{target}{also}, not a PR: that PR already makes this fix, and upstream asks for "
            "no second PR (its AGENTS.md); the patch stays carried until upstream merges a fix"
        )
    return "PR", f"a PR onto {group.onto}" if group.onto else "a PR"


def _test_diffs(patches: Sequence[Patch]) -> list[str]:
    """The hunks of ``patches`` that touch upstream's ``tests/``: the tests that go with a comment."""
    found = []
    for patch in patches:
        text = patch.text
        signature = text.rfind("\n-- \n")  # git format-patch's closing "-- " and git version
        text = text[: signature + 1] if signature != -1 else text
        starts = [m.start() for m in _DIFF.finditer(text)]
        for begin, end in zip(starts, [*starts[1:], len(text)], strict=True):
            match = _DIFF.match(text, begin)
            if match is not None and match["path"].startswith("tests/"):
                found.append(text[begin:end].rstrip("\n"))
    return found


def comment_text(group: Group, patches: Sequence[Patch], repository: str) -> str:
    """The comment for the open PR ``group.comment`` names: its description (what ours adds and why), then the tests
    of its patches as a diff, so that a maintainer can run them on that PR's branch. For a held group: its
    ``pr/<name>.comment.md``, the design set out for the issue."""
    description = group.description
    if description is None:
        raise ValueError(f"group {group.name} has no pr/{group.name}.md")
    if group.held:  # the design, argued in the issue before the held branch becomes a PR
        design = description.path.with_name(f"{group.name}{COMMENT_SUFFIX}").read_text(encoding="utf-8")
        target = f"{repository.rstrip('/')}/issues/{group.comment[0]}"
        return "\n".join([f"----- comment on {target} -----", design.rstrip("\n"), "----- end -----"])
    lines = [f"**{description.title}**", ""]
    lines += [line for paragraph in description.message for line in (paragraph, "")]
    if description.sections:
        lines += [description.sections.replace("\n## ", "\n#### ").replace("## ", "#### ", 1), ""]
    diffs = _test_diffs(patches)
    if diffs:
        lines += ["#### The tests, as a patch to apply on this PR's branch", "", "```diff", *diffs, "```", ""]
    target = f"{repository.rstrip('/')}/pull/{group.comment[0]}"
    header = f"----- comment on {target} -----"
    return "\n".join([header, *lines, "----- end -----"])
