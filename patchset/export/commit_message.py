"""A patch's message cut to what upstream gets: the DEP-3 fields and the "Why this patch ... Drop it ..." paragraph
are for this project, and upstream's PR template asks for neither; the author is the user who sends it."""

from __future__ import annotations

import re

from patchset.export.series_export import TRAILER
from patchset.series import columns
from patchset.series.model import Patch, split_patch

# DEP-3 fields and this project's own (``Upstream-Check:``; ``Patch-Filename:``, the trailer of a maintainer
# checkout's commits, ``series_export.TRAILER``): for the patchset, not for the upstream commit.
_DEP3_LINE = re.compile(
    r"^(Description|Origin|Bug(-[A-Za-z0-9]+)?|Forwarded|Author|Reviewed-by|Acked-by|Last-Update|Applied-Upstream"
    rf"|Upstream-Check|Upstream-Commit|{TRAILER}):\s",
    re.IGNORECASE,
)
_PROJECT_PARAGRAPH = re.compile(r"^(Why this patch\b|Drop (it|this patch)\b)", re.IGNORECASE)


def upstream_paragraphs(body: str) -> list[str]:
    """The paragraphs of a patch message that belong upstream: in a block of fields only the DEP-3 ones go (with
    their continuation lines; ``Signed-off-by:`` stays), and the "Why this patch" paragraph goes."""
    kept = []
    for paragraph in (p.strip("\n") for p in re.split(r"\n\s*\n", body) if p.strip()):
        if _PROJECT_PARAGRAPH.match(paragraph):
            continue
        lines = paragraph.splitlines()
        if not (columns.field_block(lines) and any(_DEP3_LINE.match(line) for line in lines)):
            kept.append(paragraph)
            continue
        upstream_lines: list[str] = []
        dropping = False
        for line in lines:
            if not line[:1].isspace():  # a field's first line; a continuation goes where its field goes
                dropping = bool(_DEP3_LINE.match(line))
            if not dropping:
                upstream_lines.append(line)
        if upstream_lines:
            kept.append("\n".join(upstream_lines))
    return kept


def upstream_patch_text(patch: Patch, author: str) -> str:
    """The patch with its message cut to what upstream gets, by ``author`` (``Name <email>``)."""
    headers, body, rest = split_patch(patch.text)
    headers = re.sub(r"^From: .*(?:\n[ \t].*)*$", lambda _: f"From: {author}", headers, count=1, flags=re.MULTILINE)
    paragraphs = upstream_paragraphs(body)
    new_body = "\n\n".join(paragraphs) + "\n" if paragraphs else ""
    if new_body and not rest.startswith("\n"):
        new_body += "\n"
    return headers + new_body + rest
