"""What each concern group sends upstream: a PR in the upstream's template, a comment on an open PR, a held branch,
or nothing (``route``). The body is for upstream's reviewers; how the gates ran here stays in export-pr's output."""

from __future__ import annotations

import re
from collections.abc import Sequence

from patchset.export.pr_gates import Gates
from patchset.plumbing import patchtext
from patchset.series.groups import COMMENT_SUFFIX, Group
from patchset.series.model import Patch
from patchset.upstreams.pr_template import PrParts, split_sections
from patchset.upstreams.registry import UPSTREAMS

_PR_NUMBER = re.compile(r"/pull/(?P<number>\d+)")
_SHOWN_NOT_RUN = 4  # upstream test files named in the line saying which could not run on a CPU


def _where(key: str, base: str, group: Group | None, patches: Sequence[Patch], cherry_pick: str | None) -> list[str]:
    """The lines that say what the PR is made against, or which upstream commit it cherry-picks."""
    onto = group.onto if group is not None and group.onto else None
    if cherry_pick:
        since = next((p.upstream_since for p in patches if p.upstream_since), None)
        pr = next((m["number"] for p in patches if (m := _PR_NUMBER.search(p.fields.get("Applied-Upstream", "")))), "")
        return [
            f"Backport of #{pr} to `{onto or base}`: `git cherry-pick -x {cherry_pick}`"
            + (f" (in main and v{since})." if since else ".")
        ]
    if onto and (base == onto or base.endswith(f"/{onto}")):
        return [f"Made against `{onto}`."]
    title = UPSTREAMS[key].title
    return [f"Made against the {title} {base} release" + (f"; it is meant for `{onto}`." if onto else ".")]


_ISSUE_NUMBER = re.compile(r"/(?:issues|pull)/(?P<number>\d+)")


def _fixes(patches: Sequence[Patch], cherry_pick: str | None, group: Group | None) -> list[str]:
    """ "Fixes <bug>" for each ``Bug:`` the PR closes: not a backport's, nor one the description already names."""
    if cherry_pick:
        return []
    said = ""
    if group is not None and group.description is not None:
        said = "\n".join((*group.description.message, group.description.sections))
    lines = []
    for value in (v for p in patches for name, v in p.fields.items() if name.split("-")[0] == "Bug"):
        number = _ISSUE_NUMBER.search(value)
        if number is None or not re.search(rf"#{number['number']}\b", said):
            lines.append(f"Fixes {value}")
    return list(dict.fromkeys(lines))


def _test_lines(gates: Gates) -> list[str]:
    """The tests upstream runs, as they ran on the branch: lint, the CPU tests, what needs a GPU or Ray."""
    lint = gates.lint
    names = ", ".join(dict.fromkeys(hook.name.split(" (")[0] for hook in lint.hooks if hook.status != "Skipped"))
    lines = [f"- `pre-commit run` on the changed files ({names}): {'passed' if lint.passed else 'FAILED'}."]
    tests = gates.tests
    if tests.files:
        summary = tests.summary.split("; the same gate passed")[0]  # a pass recalled reads as one run
        summary = summary.replace("also fails on vanilla ", "also fails without it on ")
        lines.append(f"- `pytest {' '.join(tests.files)}` (CPU): {summary}.")
    not_run = [test.path.rsplit("/", 1)[-1] for test in tests.not_run]
    if not_run:
        shown = ", ".join(f"`{name}`" for name in not_run[:_SHOWN_NOT_RUN])
        more = f" and {len(not_run) - _SHOWN_NOT_RUN} more" if len(not_run) > _SHOWN_NOT_RUN else ""
        lines.append(f"- Not run on CPU (GPU, Ray or modules CI installs): {shown}{more}.")
    return lines


def pr_title(patches: Sequence[Patch], group: Group | None = None) -> str:
    if group is not None and group.description is not None:
        return group.description.title
    return patches[0].subject if len(patches) == 1 else f"{patches[0].subject} (+{len(patches) - 1} more)"


def _depends(group: Group | None, groups: Sequence[Group]) -> list[str]:
    if group is None or group.after is None:
        return []
    before = next((g for g in groups if g.name == group.after), None)
    title = before.description.title if before is not None and before.description is not None else group.after
    return [f'Depends on the PR "{title}": its commits come first on this branch; review the ones after them.']


def pr_body(
    key: str,
    base: str,
    patches: Sequence[Patch],
    changed: Sequence[str],
    gates: Gates,
    group: Group | None = None,
    cherry_pick: str | None = None,
    groups: Sequence[Group] = (),
) -> str:
    """The PR body in the upstream's template: the group's description, what it is made against, the gates."""
    template = UPSTREAMS[key].pr_template
    if template is None:
        raise ValueError(f"no PR template for {key!r}")
    description = group.description if group is not None else None
    overview = list(description.message) if description is not None else [p.subject for p in patches]
    parts = PrParts(
        overview=overview,
        related=[
            *_where(key, base, group, patches, cherry_pick),
            *_depends(group, groups),
            *_fixes(patches, cherry_pick, group),
        ],
        tests=_test_lines(gates),
        sections=split_sections(description.sections) if description is not None else {},
        passed=gates.passed,
        new_tests=bool(gates.tests.own_files) or any(path.startswith("tests/") for path in changed),
    )
    return template(parts)


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
        signature = patch.text.rfind("\n-- \n")  # git format-patch's closing "-- " and git version
        files = patchtext.split_files(patch.text[: signature + 1] if signature != -1 else patch.text)[1]
        found += [diff.rstrip("\n") for diff in files if patchtext.patch_paths(diff)[0].startswith("tests/")]
    return found


def comment_text(group: Group, patches: Sequence[Patch], repository: str) -> str:
    """The comment for the open PR ``group.comment`` names, with our tests as a diff to run on that PR's branch; for
    a held group, its ``pr/<name>.comment.md``."""
    description = group.description
    if description is None:
        raise ValueError(f"group {group.name} has no pr/{group.name}.md")
    if group.held:  # the design, argued in the issue before the held branch becomes a PR
        design = description.path.with_name(f"{group.name}{COMMENT_SUFFIX}").read_text(encoding="utf-8")
        lines = [design.rstrip("\n")]
    else:
        lines = [f"**{description.title}**", ""]
        lines += [line for paragraph in description.message for line in (paragraph, "")]
        if description.sections:
            lines += [description.sections.replace("\n## ", "\n#### ").replace("## ", "#### ", 1), ""]
        if diffs := _test_diffs(patches):
            lines += ["#### The tests, as a patch to apply on this PR's branch", "", "```diff", *diffs, "```", ""]
    target = f"{repository.rstrip('/')}/{'issues' if group.held else 'pull'}/{group.comment[0]}"
    return "\n".join([f"----- comment on {target} -----", *lines, "----- end -----"])
