"""A PR's title and body: the group's description (``pr/<group>.md``) or its patches' messages, the gates' results,
laid out in the upstream's PR template (its registry entry's ``pr_template``)."""

from __future__ import annotations

from collections.abc import Sequence

from patchset.export.branches import BRANCH_PREFIX
from patchset.export.pr_gates import Gates
from patchset.series.groups import Group
from patchset.series.model import Patch
from patchset.upstreams.pr_template import PrParts
from patchset.upstreams.registry import UPSTREAMS


def _related(patches: Sequence[Patch], tag: str) -> list[str]:
    lines = []
    for patch in patches:
        if since := patch.fields.get("Applied-Upstream"):
            lines.append(f"Backport to the {tag} release line; upstream has this change since {since}.")
        for name, value in patch.fields.items():
            if name == "Bug" or name.startswith("Bug-"):
                lines.append(f"Fixes {value}")
    return list(dict.fromkeys(lines))


def _test_lines(key: str, gates: Gates) -> list[str]:
    lines = [
        f"- Lint: `{gates.lint.command}` with {', '.join(h.name for h in gates.lint.hooks)}: {gates.lint.summary()}.",
    ]
    if gates.tests.files:
        files = " ".join(gates.tests.files)
        lines.append(f"- CPU tests: `pytest {files}`: {gates.tests.summary}.")
    else:
        lines.append(f"- CPU tests: {gates.tests.summary}.")
    lines += [f"  - `{test.path}`: upstream's test, {test.why}." for test in gates.tests.upstream]
    lines += [f"- Not run here: upstream's `{test.path}` ({test.why}): {test.not_run}." for test in gates.tests.not_run]
    lines += [f"- {note}" for note in gates.tests.notes]
    lines.append(f"- Not run: {UPSTREAMS[key].lint_not_run}.")
    return lines


def pr_title(patches: Sequence[Patch], group: Group | None = None) -> str:
    if group is not None and group.description is not None:
        return group.description.title
    return patches[0].subject if len(patches) == 1 else f"{patches[0].subject} (+{len(patches) - 1} more)"


def _stack_lines(group: Group | None, series: str, base_commits: int) -> list[str]:
    if group is None or group.after is None:
        return []
    return [
        f"Depends on the {group.after} PR (branch `{BRANCH_PREFIX}{series}-{group.after}`): this branch holds its "
        f"{base_commits} commit(s) first; review the commits after them. Rebase onto main once that PR is merged.",
        "",
    ]


def pr_body(
    key: str,
    tag: str,
    patches: Sequence[Patch],
    messages: dict[str, list[str]],
    changed: Sequence[str],
    gates: Gates,
    group: Group | None = None,
    base_commits: int = 0,
) -> str:
    """The PR body in the upstream's template, filled from the group's description (``pr/<group>.md``) or the
    patch messages, and the gates' results."""
    template = UPSTREAMS[key].pr_template
    if template is None:
        raise ValueError(f"no PR template for {key!r}")
    description = group.description if group is not None else None
    if description is not None:
        paragraphs = list(description.message)
        sections = description.sections
    else:
        paragraphs = [p for patch in patches for p in messages[patch.name]]
        sections = ""
    parts = PrParts(
        stack=_stack_lines(group, key, base_commits),
        paragraphs=paragraphs,
        overview=paragraphs[:1] if paragraphs else [patches[0].subject],
        details=paragraphs[1:],
        related=_related(patches, tag),
        tests=_test_lines(key, gates),
        files=[f"- `{path}`" for path in changed],
        sections=sections,
        passed=gates.passed,
        new_tests=bool(gates.tests.own_files),
    )
    return template(parts)
