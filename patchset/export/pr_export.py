"""Send the series upstream: one PR branch per concern in the user's checkout, each checked by the upstream's gates.

``python -m patchset export-pr verl|trinity CHECKOUT`` (``scripts/export-pr.sh``) makes one branch
``patchset/<series>-<group>`` in CHECKOUT, a verl or Trinity-RFT git checkout at a version the series targets, for
each concern group of ``patches/<series>/groups`` (``--group NAME``, repeatable, for some). A group's branch
starts on the release tag (HEAD when the checkout has no such tag), or on the branch of the group it is ``after``.
It holds one commit per patch, as ``git am --keep-non-patch`` records it (author, date, subject and message from
the patch header) except that the lines meant for this project are dropped from the message: the DEP-3 fields
(``Bug:``, ``Forwarded:``, ...) and the "Why this patch ... Drop it ..." paragraph; upstream's PR template asks
for neither. A ``fold`` group becomes one commit instead, titled and described by ``pr/<group>.md``, so the PR
carries only the final state of each file and test.

A group's ``pr/<group>.upstream-tests.patch`` (its change to upstream test files the release sdist lacks) is
committed after the group's commits, as a commit of its own, when the checkout has those files; when it lacks
them the branch is made without it and the summary says so.

Each branch is built in a temporary ``git worktree`` of CHECKOUT, so the user's work tree, index and checked-out
branch are never touched: a branch ref is created only once every patch of it has applied. The upstream's lint
gates (``patchset.export.pr_gates``: its pre-commit hooks at its pinned versions, on the files the group changes) and
upstream's own tests of what the group changes (``patchset.export.test_selection``: those named for a changed
module or importing it, directly or through a package's re-export or registry; those that cannot run here are
named with the reason), plus the group's own tests, run on each branch with the test venv. The PR title and a
body in the upstream's PR template are printed for each branch, with the command that pushes it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from patchset.export import gate_record, pr_gates, test_selection
from patchset.plumbing import gitops, tempdirs
from patchset.plumbing.errors import EXIT_OK, BadInput, DoesNotApply
from patchset.plumbing.paths import REPO_ROOT
from patchset.plumbing.ui import Console, display_path
from patchset.series.groups import UPSTREAM_COMMIT, Group, chain, load_groups
from patchset.series.model import Patch, load_series, read_patch
from patchset.testenv.venv import ensure_venv
from patchset.upstreams.detect import detect
from patchset.upstreams.fetch import ensure_upstream, resolve_cache
from patchset.upstreams.pins import Pin, at_least, load_pins
from patchset.upstreams.registry import UPSTREAMS

EXIT_GATE_FAILED = 1
BRANCH_PREFIX = "patchset/"

# DEP-3 fields and this project's own (``Upstream-Check:``): for the patchset, not for the upstream commit.
_DEP3_LINE = re.compile(
    r"^(Description|Origin|Bug(-[A-Za-z0-9]+)?|Forwarded|Author|Reviewed-by|Acked-by|Last-Update|Applied-Upstream"
    r"|Upstream-Check|Upstream-Commit):\s",
    re.IGNORECASE,
)
_TRAILER_LINE = re.compile(r"^[A-Za-z][A-Za-z0-9-]*:\s")
_PROJECT_PARAGRAPH = re.compile(r"^(Why this patch\b|Drop (it|this patch)\b)", re.IGNORECASE)
_SLUG = re.compile(r"^\d{4}-(?P<slug>.+)\.patch$")


# --- the commit message ------------------------------------------------------------------------------------


def _paragraphs(text: str) -> list[str]:
    return [p.strip("\n") for p in re.split(r"\n\s*\n", text) if p.strip()]


def _field_block(paragraph: str) -> bool:
    """True for a paragraph of ``Name: value`` lines (continuations indented) holding a DEP-3 field."""
    lines = paragraph.splitlines()
    fields = all(_TRAILER_LINE.match(ln) or (i and ln[:1].isspace()) for i, ln in enumerate(lines))
    return fields and any(_DEP3_LINE.match(ln) for ln in lines)


def upstream_paragraphs(body: str) -> list[str]:
    """The paragraphs of a patch message that belong upstream: DEP-3 fields and "Why this patch" dropped.

    In a block of fields only the DEP-3 ones go (and their continuation lines): ``Signed-off-by:`` stays.
    """
    kept = []
    for paragraph in _paragraphs(body):
        if _PROJECT_PARAGRAPH.match(paragraph):
            continue
        if not _field_block(paragraph):
            kept.append(paragraph)
            continue
        lines: list[str] = []
        dropping = False
        for line in paragraph.splitlines():
            if line[:1].isspace():
                if not dropping:
                    lines.append(line)
                continue
            dropping = bool(_DEP3_LINE.match(line))
            if not dropping:
                lines.append(line)
        if lines:
            kept.append("\n".join(lines))
    return kept


def _split_patch(text: str) -> tuple[str, str, str]:
    """(mail headers with their blank line, message body, the rest from ``---`` or the first ``diff --git``)."""
    headers, sep, rest = text.partition("\n\n")
    if not sep:
        raise BadInput("patch has no message body")
    cut = len(rest)
    for marker in ("\n---\n", "\ndiff --git "):
        found = ("\n" + rest).find(marker)
        if found != -1:
            cut = min(cut, found)
    return headers + sep, rest[:cut], rest[cut:]


def upstream_patch_text(patch: Patch) -> tuple[str, list[str]]:
    """The patch with its message cut to what upstream gets, and those paragraphs."""
    headers, body, rest = _split_patch(patch.text)
    paragraphs = upstream_paragraphs(body)
    new_body = "\n\n".join(paragraphs) + "\n" if paragraphs else ""
    if new_body and not rest.startswith("\n"):
        new_body += "\n"
    return headers + new_body + rest, paragraphs


# --- the checkout and the branch --------------------------------------------------------------------------


def _git(checkout: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return gitops.run_git([*gitops.NEUTRAL, *args], cwd=checkout, check=check)


def _check_checkout(checkout: Path, key: str, patches_dir: Path) -> tuple[Pin, str]:
    """The pin the checkout is at and the commit to branch from; ``BadInput`` for anything else."""
    shown = display_path(checkout)
    found = detect(checkout, shown)
    if found.key != key:
        raise BadInput(f"{shown} is a {found.label} checkout, not {key}; pass the {key} checkout or the other series")
    pins = load_pins(patches_dir / "upstreams.toml")
    pin = pins.find(key, found.version)
    if pin is None or not pin.target:  # a companion-only pin is tested beside, never patched
        targets = ", ".join(pins.versions(key)) or "none"
        raise BadInput(
            f"{shown} is {found.label} {found.version} ({found.marker}), a version the {key} series does not target "
            f"(targets: {targets}); check out one of those releases"
        )
    tree = gitops.find_worktree(checkout)
    if tree is None or tree.prefix:
        raise BadInput(f"{shown} is not the top of a git checkout; pass the root of a git clone of {pin.label}")
    for state in ("rebase-merge", "rebase-apply", "MERGE_HEAD", "CHERRY_PICK_HEAD"):
        if (checkout / (gitops.git_value(checkout, "rev-parse", "--git-path", state) or state)).exists():
            raise BadInput(f"{shown} has a rebase, git am, merge or cherry-pick in progress; finish or abort it first")
    if not gitops.is_clean(checkout):
        raise BadInput(f"{shown} has uncommitted changes; commit or stash them first (git stash -u)")
    base = gitops.tag_commit(checkout, pin.tag) or gitops.head_commit(checkout)
    if base is None:
        raise BadInput(f"{shown} has no commit to branch from")
    return pin, base


def branch_name(series: str, patches: Sequence[Patch], group: Group | None = None) -> str:
    """``patchset/<series>-<group>`` from a groups file, else ``patchset/<series>-<slug of the first patch>``."""
    if group is not None and not group.name.startswith("patch-"):
        return f"{BRANCH_PREFIX}{series}-{group.name}"
    match = _SLUG.match(patches[0].name)
    slug = match["slug"] if match else re.sub(r"[^a-z0-9]+", "-", patches[0].name.lower()).strip("-")
    return f"{BRANCH_PREFIX}{series}-{slug}"


def _committer_env(checkout: Path, patch: Patch) -> dict[str, str]:
    """The user's identity as committer when git has one, else the patch's author (git am needs a committer)."""
    env = dict(os.environ)
    if gitops.run_git(["var", "GIT_COMMITTER_IDENT"], cwd=checkout, check=False).returncode != 0:
        from email.utils import parseaddr

        name, address = parseaddr(re.search(r"^From: (.*)$", patch.text, re.MULTILINE)[1])  # type: ignore[index]
        env.update(GIT_COMMITTER_NAME=name or address, GIT_COMMITTER_EMAIL=address)
    return env


def commit_patches(worktree: Path, patches: Sequence[Patch], scratch: Path, console: Console) -> dict[str, list[str]]:
    """``git am`` each patch (its message cut to what upstream gets) in ``worktree``; {patch name: paragraphs}."""
    messages: dict[str, list[str]] = {}
    for number, patch in enumerate(patches, start=1):
        console.step(f"Committing {patch.name} ({number}/{len(patches)})")
        text, paragraphs = upstream_patch_text(patch)
        edited = scratch / patch.name
        edited.write_bytes(text.encode("utf-8", "surrogateescape"))
        if (reason := gitops.am(worktree, edited, _committer_env(worktree, patch))) is not None:
            raise DoesNotApply(
                f"{patch.name} does not apply with git am ({reason}); no branch was made. "
                f"See scripts/apply.sh --check for the failing hunk"
            )
        messages[patch.name] = paragraphs
    return messages


# --- the PR text ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gates:
    lint: pr_gates.LintResult
    tests: pr_gates.TestRun

    @property
    def passed(self) -> bool:
        return self.lint.passed and self.tests.passed


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


def _verl_template(parts: PrParts) -> str:
    """verl's .github/PULL_REQUEST_TEMPLATE.md."""
    check = "x" if parts.passed else " "
    return "\n".join(
        [
            "### What does this PR do?",
            "",
            *parts.stack,
            *parts.overview,
            "",
            *parts.related,
            "",
            "### Test",
            "",
            *parts.tests,
            "",
            "### API and Usage Example",
            "",
            "New arguments and config fields default to the old behaviour; the sections below say what else "
            "changes for callers.",
            "",
            "### Design & Code Changes",
            "",
            *(p + "\n" for p in parts.details),
            "Files changed:",
            *parts.files,
            "",
            *([parts.sections.replace("\n## ", "\n### ").replace("## ", "### ", 1), ""] if parts.sections else []),
            "### Checklist Before Submitting",
            "",
            "- [x] Read the [Contribute Guide](https://github.com/volcengine/verl/blob/main/CONTRIBUTING.md).",
            f"- [{check}] Apply [pre-commit checks](https://github.com/volcengine/verl/blob/main/CONTRIBUTING.md"
            "#code-linting-and-formatting)",
            "- [ ] Add / Update [the documentation](https://github.com/volcengine/verl/tree/main/docs).",
            f"- [{'x' if parts.new_tests else ' '}] Add unit or end-to-end test(s) to "
            "[the CI workflow](https://github.com/volcengine/verl/tree/main/.github/workflows) to cover all the "
            "code.",
            "",
        ]
    )


def _trinity_template(parts: PrParts) -> str:
    """Trinity-RFT's .github/pull_request_template.md."""
    return "\n".join(
        [
            "## Description",
            "",
            *parts.stack,
            *(p + "\n" for p in parts.paragraphs),
            *parts.related,
            "",
            *([parts.sections.replace("\n## ", "\n### ").replace("## ", "### ", 1), ""] if parts.sections else []),
            "Test:",
            *parts.tests,
            "",
            "Files changed:",
            *parts.files,
            "",
            "## Checklist",
            "",
            "Please check the following items before code is ready to be reviewed.",
            "",
            f"- [{'x' if parts.passed else ' '}]  Code has passed all tests",
            "- [x]  Docstrings have been added/updated in Google Style",
            "- [ ]  Documentation has been updated",
            "- [ ]  Code is ready for review",
            "",
        ]
    )


# the PR body layouts, by the name an upstream's registry entry gives (``Upstream.pr_template``)
PR_TEMPLATES = {"verl": _verl_template, "trinity": _trinity_template}


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
    return PR_TEMPLATES[UPSTREAMS[key].pr_template](parts)


# --- the command ------------------------------------------------------------------------------------------


def _run_gates(
    pin: Pin,
    worktree: Path,
    release: str,
    changed: list[str],
    python: Path,
    records: Path | None,
    cache: str | None,
    patches_dir: Path,
    console: Console,
    scratch: Path,
    notes: Sequence[str] = (),
) -> Gates:
    """The gates on the branch checked out in ``worktree``: lint ``changed``, upstream's tests of what it changes
    (those of the ``release`` tree, chosen by ``test_selection``) and the test files among them; another upstream its
    tests import is the default pin of ``patches_dir``, from the cache ``cache``. ``records``: where passes are
    remembered (None: every gate runs). ``scratch``: a folder for this run's files. ``notes``: more lines for the
    tests' report."""
    key, label = pin.key, pin.name
    console.step(f"Running {key}'s lint gates through pre-commit on {len(changed)} changed file(s)")
    lint = pr_gates.run_lint(key, worktree, changed, python, records)
    base_files = _git(worktree, "ls-tree", "-r", "--name-only", release).stdout.splitlines()
    notes = list(notes)
    pythonpath = [worktree]
    importable = [worktree]  # the other upstreams' packages only, not their tests (pr_gates.only_package)
    if not any(path.startswith("tests/") for path in base_files):
        notes.append(
            f"{label}'s checkout has no tests/ folder (its sdist ships none), so none of upstream's own tests of the "
            "touched modules ran; only the patch's own tests ran. Run export-pr on a git clone of upstream to run them."
        )
    for other in UPSTREAMS[key].tests_import:
        other_pin = load_pins(patches_dir / "upstreams.toml").default_for(other)
        assert other_pin is not None
        pythonpath.append(ensure_upstream(other_pin, resolve_cache(cache, os.environ, REPO_ROOT), console))
        importable.append(pr_gates.only_package(pythonpath[-1], UPSTREAMS[other].package, scratch))
        notes.append(f"{UPSTREAMS[key].title}'s tests import {other}: run beside vanilla {other_pin.label}.")
    env = pr_gates.tool_env(python, importable, project=False)
    chosen = test_selection.select(key, worktree, changed, base_files, python, env)
    upstream, not_run = list(chosen.run), list(chosen.not_run)
    # which upstream files cannot be imported here (on the release either) is remembered like a pass: the same
    # content gives the same answer, so a second run neither probes again nor runs the first, failing, attempt
    memo = pr_gates.gaps_key(worktree, [test.path for test in upstream], python, pythonpath, release, records)
    known = gate_record.recall(records, memo) if records else None
    gaps: dict[str, str] = json.loads(known.summary) if known else {}
    for attempt in range(2):  # once more without the files that cannot be imported here
        if gaps:
            console.step(f"Not running {', '.join(gaps)}: they cannot be imported here, on vanilla {pin.tag} either")
            not_run += [replace(test, not_run=gaps[test.path]) for test in upstream if test.path in gaps]
            upstream = [test for test in upstream if test.path not in gaps]
        files = [*(test.path for test in upstream), *chosen.own]
        if not files:
            none = "no upstream test that can run here covers the touched modules, and the patch adds none"
            passed, summary, output = True, none, ""
            break
        console.step(f"Running the CPU tests: {' '.join(files)}")
        passed, summary, output = pr_gates.run_tests(worktree, files, python, pythonpath, records, importable)
        if passed or gaps or attempt:
            break
        gaps = _import_gaps(worktree, pin, release, upstream, output, python, importable)
        if not gaps:
            break
        if records:
            gate_record.remember(records, memo, json.dumps(gaps), "")
    if not passed and upstream:
        on_release = _fail_on_release(worktree, release, upstream, changed, output, python, importable)
        if on_release:
            passed = True
            summary += f"; every failure also fails on vanilla {pin.tag}, run the same way: {', '.join(on_release)}"
            notes.append(
                f"Upstream's own tests that fail on vanilla {pin.tag} too (the same files, in the same order), so not "
                f"because of this branch: {', '.join(on_release)}."
            )
    tests = pr_gates.TestRun(tuple(upstream), chosen.own, passed, summary, output, tuple(notes), tuple(not_run))
    return Gates(lint=lint, tests=tests)


_FAILED = re.compile(r"^(?:FAILED|ERROR) (?P<test>\S+)")


def _failed_tests(output: str) -> set[str]:
    """The test ids pytest's short summary names as failed or in error."""
    return {m["test"] for line in output.splitlines() if (m := _FAILED.match(line))}


@contextmanager
def _release_tree(worktree: Path, release: str, importable: Sequence[Path]) -> Iterator[tuple[Path, list[Path]]]:
    """A temporary worktree of ``release`` beside the branch's ``worktree``, and what its tests import there (it, then
    the other upstreams of ``importable``): the vanilla release, to tell upstream's own failures from the branch's."""
    vanilla = Path(tempfile.mkdtemp(prefix=tempdirs.prefix("pr-vanilla"))) / "tree"
    try:
        _git(worktree, "worktree", "add", "-q", "--detach", str(vanilla), release)
        yield vanilla, [vanilla, *(path for path in importable if path != worktree)]
    finally:
        gitops.run_git(["worktree", "remove", "--force", str(vanilla)], cwd=worktree, check=False)
        shutil.rmtree(vanilla.parent, ignore_errors=True)


def _fail_on_release(
    worktree: Path,
    release: str,
    upstream: Sequence[test_selection.Selected],
    changed: Sequence[str],
    output: str,
    python: Path,
    importable: Sequence[Path],
) -> list[str]:
    """The failures of the branch's test run (``output``) when every one is an upstream test that the branch does not
    change and that fails on the ``release`` tree too, run the same way (the same upstream files, as the release has
    them, in the same order: verl 0.7.1's ``test_algo_config_on_cpu.py`` fails after ``test_core_algos_on_cpu.py``
    on the release itself); else none: a failure of the branch's own stands."""
    failed = _failed_tests(output)
    files = [test.path for test in upstream]  # as the release has them, those the branch changes too
    if not failed or any(test.split("::")[0] not in files or test.split("::")[0] in changed for test in failed):
        return []
    with _release_tree(worktree, release, importable) as (vanilla, paths):
        _, _, before = pr_gates.run_tests(vanilla, files, python, paths, None, paths)
    return sorted(failed) if failed <= _failed_tests(before) else []


def _import_gaps(
    worktree: Path,
    pin: Pin,
    release: str,
    upstream: Sequence[test_selection.Selected],
    output: str,
    python: Path,
    importable: Sequence[Path],
) -> dict[str, str]:
    """{upstream test file: why it cannot run here} for those of ``upstream`` that pytest (``output``) could not
    import for a module the test venv lacks, and that cannot be imported on the ``release`` tree either: a gap of
    this machine's environment (a module upstream's CI installs), not something the branch broke."""
    files = [test.path for test in upstream]
    gaps = test_selection.import_gaps(output, files)
    env = pr_gates.tool_env(python, importable, project=False)
    absent = test_selection.missing_modules(python, {name.split(".")[0] for name in gaps.values()}, env)
    gaps = {test: name for test, name in gaps.items() if name.split(".")[0] in absent}
    if not gaps:
        return {}
    with _release_tree(worktree, release, importable) as (vanilla, paths):
        before = test_selection.import_gaps(pr_gates.collect_tests(vanilla, list(gaps), python, paths), files)
    return {
        test: f"imports {name} (through what it imports), which the test venv does not have; it cannot be "
        f"imported on vanilla {pin.label} either"
        for test, name in gaps.items()
        if before.get(test) == name
    }


def _report(gates: Gates, console: Console) -> None:
    for hook in gates.lint.hooks:
        console.step(f"lint {hook.name}: {hook.status}")
    if not gates.lint.passed:
        print(gates.lint.output.rstrip(), flush=True)
    console.summary(f"upstream lint: {'passed' if gates.lint.passed else 'FAILED'} ({gates.lint.summary()})")
    if not gates.tests.passed:
        print(gates.tests.output.rstrip()[-6000:], flush=True)
    shown = " ".join(gates.tests.files) or "none"
    console.summary(
        f"upstream CPU tests: {'passed' if gates.tests.passed else 'FAILED'} ({gates.tests.summary}; {shown})"
    )
    for test in gates.tests.upstream:
        console.summary(f"  upstream test run: {test.path} ({test.why})")
    for test in gates.tests.not_run:
        console.summary(f"  upstream test NOT run: {test.path} ({test.why}): {test.not_run}")
    for note in gates.tests.notes:
        console.summary(f"  note: {note}")


@dataclass(frozen=True)
class UpstreamTests:
    """What became of a group's ``pr/<group>.upstream-tests.patch`` on its branch: its files, and those the checkout
    lacks (then it was not applied)."""

    path: Path
    files: tuple[str, ...]
    missing: tuple[str, ...]

    @property
    def applied(self) -> bool:
        return not self.missing

    def note(self) -> str:
        name = display_path(self.path)
        if self.applied:
            return f"{name} changes upstream's {', '.join(self.files)}: committed on its own after the group's commits."
        return (
            f"{name} was NOT applied: the checkout lacks {', '.join(self.missing)} (a release sdist ships no such "
            "tests), so this branch does not carry the change to upstream's tests that this PR needs; run export-pr "
            "on a git clone of upstream"
        )


def _commit_upstream_tests(
    worktree: Path, group: Group, release_files: set[str], scratch: Path, console: Console
) -> UpstreamTests | None:
    """Commit ``group``'s upstream-tests patch in ``worktree`` when the release tree has every file it changes;
    None when the group has none. ``DoesNotApply`` when those files are there but the patch does not apply."""
    if group.upstream_tests is None:
        return None
    patch = read_patch(group.upstream_tests)
    missing = tuple(path for path in patch.files if path not in release_files)
    if missing:
        return UpstreamTests(group.upstream_tests, patch.files, missing)
    console.step(f"Committing {patch.name}: the group's change to upstream's {', '.join(patch.files)}")
    text, _ = upstream_patch_text(patch)
    edited = scratch / patch.name
    edited.write_bytes(text.encode("utf-8", "surrogateescape"))
    if (reason := gitops.am(worktree, edited, _committer_env(worktree, patch))) is not None:
        made = UPSTREAM_COMMIT.search(patch.text)
        against = f"upstream {made['commit']}{made['where']}" if made else "another revision of upstream"
        raise DoesNotApply(
            f"{display_path(group.upstream_tests)} does not apply to this checkout's {', '.join(patch.files)} "
            f"({reason}); it was made against {against.rstrip()}: remake it against the checkout's version of those "
            "files. No branch was made for this group"
        )
    return UpstreamTests(group.upstream_tests, patch.files, ())


@dataclass(frozen=True)
class _Branch:
    """One group's branch as made: its name, commits, files changed against its base, PR text inputs."""

    group: Group
    name: str
    patches: tuple[Patch, ...]
    base: str
    head: str
    base_commits: int
    changed: tuple[str, ...]
    messages: dict[str, list[str]]
    upstream_tests: UpstreamTests | None = None


def _fold(worktree: Path, group: Group, base: str, patches: Sequence[Patch]) -> None:
    """Squash the commits ``base..HEAD`` into one: the group's title and message, the first patch's author and
    the last patch's date."""
    assert group.description is not None
    message = "\n\n".join([group.description.title, *group.description.message]) + "\n"
    author = re.search(r"^From: (.*)$", patches[0].text, re.MULTILINE)
    date = re.search(r"^Date: (.*)$", patches[-1].text, re.MULTILINE)
    env = _committer_env(worktree, patches[0])
    if date:
        env["GIT_AUTHOR_DATE"] = date[1]
    _git(worktree, "reset", "-q", "--soft", base)
    args = ["commit", "-q", "--no-verify", "-m", message]
    if author:
        args += ["--author", author[1]]
    gitops.run_git([*gitops.NEUTRAL, *args], cwd=worktree, env=env)


def _select_patches(series_patches: Sequence[Patch], pin: Pin, console: Console) -> dict[int, Patch]:
    """{series number: patch} of the patches to send: those upstream has at ``pin`` are skipped."""
    chosen: dict[int, Patch] = {}
    for number, patch in enumerate(series_patches, start=1):
        since = patch.upstream_since
        if since and at_least(pin.version, since):
            console.step(f"Skipping {patch.name}: in upstream since {since}")
        else:
            chosen[number] = patch
    return chosen


def _make_branches(
    checkout: Path,
    pin: Pin,
    release: str,
    wanted: Sequence[Group],
    groups: tuple[Group, ...],
    chosen: dict[int, Patch],
    branch_option: str | None,
    force: bool,
    cache: str | None,
    patches_dir: Path,
    python: Path,
    records: Path | None,
    console: Console,
) -> list[tuple[_Branch, Gates]]:
    """Make and gate the branch of each group of ``wanted``, each on its ``after`` chain, in a temporary worktree."""
    made: list[tuple[_Branch, Gates]] = []
    scratch = Path(tempfile.mkdtemp(prefix=tempdirs.prefix("pr")))
    worktree = scratch / "tree"
    try:
        _git(checkout, "worktree", "add", "-q", "--detach", str(worktree), release)
        release_files = set(_git(worktree, "ls-tree", "-r", "--name-only", release).stdout.splitlines())
        heads: dict[str, str] = {}  # group -> the head of its branch made in this run, for the groups after it
        for group in wanted:
            # the lint hooks fix files in place (ruff --fix, black, isort): drop what they left of the last branch
            _git(worktree, "reset", "-q", "--hard")
            _git(worktree, "clean", "-q", "-f", "-d", "-x")
            _git(worktree, "checkout", "-q", "--detach", release)
            base = release
            base_commits = 0
            messages: dict[str, list[str]] = {}
            patches: list[Patch] = []
            tests_change: UpstreamTests | None = None
            for member in chain(groups, group.name):
                member_patches = [chosen[n] for n in member.numbers if n in chosen]
                if member is not group and member.name in heads:  # stack on the very commits of that branch
                    _git(worktree, "checkout", "-q", "--detach", heads[member.name])
                    member_patches = []
                start = gitops.head_commit(worktree)
                assert start is not None
                if member_patches:
                    messages = commit_patches(worktree, member_patches, scratch, console)
                    if member.fold and len(member_patches) > 1:
                        _fold(worktree, member, start, member_patches)
                    change = _commit_upstream_tests(worktree, member, release_files, scratch, console)
                    tests_change = change if member is group else tests_change
                if member is not group:
                    base = gitops.head_commit(worktree) or base
                    base_commits = int(_git(worktree, "rev-list", "--count", f"{release}..{base}").stdout.strip())
                else:
                    patches = member_patches
            if not patches:
                console.step(f"Skipping group {group.name}: upstream {pin.version} has all its patches")
                continue
            head = gitops.head_commit(worktree)
            assert head is not None
            name = branch_option or branch_name(pin.series, patches, group)
            if gitops.run_git(["check-ref-format", "--branch", name], cwd=checkout, check=False).returncode != 0:
                raise BadInput(f"{name!r} is not a valid branch name")
            ref = f"refs/heads/{name}^{{commit}}"
            exists = gitops.git_value(checkout, "rev-parse", "-q", "--verify", ref) is not None
            if exists and not force:
                raise BadInput(f"branch {name} already exists in {display_path(checkout)}; pass --force to replace it")
            if exists and gitops.git_value(checkout, "symbolic-ref", "-q", "HEAD") == f"refs/heads/{name}":
                raise BadInput(f"branch {name} is checked out in {display_path(checkout)}; switch to another first")
            _git(checkout, "branch", "-f", name, head)
            heads[group.name] = head
            commits = int(_git(worktree, "rev-list", "--count", f"{base}..{head}").stdout.strip())
            where = f"the {group.after} branch" if group.after else pin.tag
            console.step(f"Branch {name}: {commits} commit(s) on {where}")
            changed = _git(worktree, "diff", "--name-only", "--diff-filter=d", base, head).stdout.splitlines()
            notes = [tests_change.note()] if tests_change else []
            gates = _run_gates(
                pin, worktree, release, changed, python, records, cache, patches_dir, console, scratch, notes
            )
            branch = _Branch(
                group, name, tuple(patches), base, head, base_commits, tuple(changed), messages, tests_change
            )
            made.append((branch, gates))
    finally:
        gitops.run_git(["worktree", "remove", "--force", str(worktree)], cwd=checkout, check=False)
        gitops.run_git(["worktree", "prune"], cwd=checkout, check=False)
        shutil.rmtree(scratch, ignore_errors=True)
    return made


def export_pr(
    upstream: str,
    checkout: Path,
    console: Console,
    *,
    only_groups: Sequence[str] = (),
    branch: str | None = None,
    force: bool = False,
    cache: str | None = None,
    patches_dir: Path = REPO_ROOT / "patches",
    gate_records: Path | None = None,
) -> int:
    """Make and gate one branch per concern group of ``upstream``'s series in ``checkout`` (``only_groups``: those
    groups and the groups they come after); print each PR's title and body. ``branch`` names the one branch made,
    ``force`` replaces existing branches, ``cache`` is the ``--cache`` option, ``gate_records`` the folder where
    gate passes are remembered by content (None: every gate runs). ``EXIT_GATE_FAILED`` when a gate failed on a
    branch, else ``EXIT_OK``."""
    pin, release = _check_checkout(checkout, upstream, patches_dir)
    series = load_series(patches_dir, pin.series)
    groups = load_groups(series.path.parent, len(series.patches))
    wanted = list(groups) if not only_groups else [chain(groups, name)[-1] for name in dict.fromkeys(only_groups)]
    if branch and len(wanted) > 1:
        raise BadInput(f"--branch names one branch, but the {pin.series} series has {len(wanted)} groups; add --group")
    chosen = _select_patches(series.patches, pin, console)
    if not chosen:
        raise BadInput(f"every patch of the {pin.series} series is in {pin.label} already; nothing to send upstream")
    for patch in chosen.values():
        if since := patch.fields.get("Applied-Upstream"):
            console.warn(f"{patch.name} is in upstream {since}: send it only as a backport to the {pin.tag} line")
    python = ensure_venv()
    console.step(
        f"Making {len(wanted)} branch(es), one per group of {display_path(series.path.parent)}, on "
        f"{pin.tag if gitops.tag_commit(checkout, pin.tag) else 'HEAD'} ({release[:12]}) in a temporary worktree of "
        f"{display_path(checkout)}"
    )
    made = _make_branches(
        checkout, pin, release, wanted, groups, chosen, branch, force, cache, patches_dir, python, gate_records, console
    )

    shown = display_path(checkout)
    failed_any = False
    for branch, gates in made:
        console.summary(f"=== {branch.name} (group {branch.group.name}) ===")
        _report(gates, console)
        title = pr_title(branch.patches, branch.group)
        body = pr_body(
            pin.key, pin.tag, branch.patches, branch.messages, branch.changed, gates, branch.group, branch.base_commits
        )
        print(f"\n----- PR title -----\n{title}\n----- PR body -----\n{body}----- end -----", flush=True)
        if not gates.passed:
            failed_any = True
            failed = (
                [f"upstream lint ({', '.join(gates.lint.failed) or 'pre-commit'})"] if not gates.lint.passed else []
            )
            failed += [] if gates.tests.passed else [f"upstream CPU tests ({gates.tests.summary})"]
            print(
                f"error: {' and '.join(failed)} failed on branch {branch.name}; the branch is kept in {shown}: fix "
                f"the patch, then run again with --force",
                file=sys.stderr,
                flush=True,
            )
    for branch, gates in made:
        state = "gates passed" if gates.passed else "a gate FAILED"
        ran = f"{len(gates.tests.upstream)} upstream test file(s) ran, {len(gates.tests.not_run)} not run"
        tests = branch.upstream_tests
        extra = (
            ""
            if tests is None
            else f"; {display_path(tests.path)} "
            + ("applied" if tests.applied else f"NOT applied (the checkout lacks {', '.join(tests.missing)})")
        )
        console.summary(
            f"{pin.label}: branch {branch.name} ({len(branch.patches)} patch(es) as "
            f"{'one folded commit' if branch.group.fold and len(branch.patches) > 1 else 'one commit each'}); {state}; "
            f"{ran}{extra}"
        )
        if tests is not None and not tests.applied:
            console.warn(tests.note())
    if failed_any:
        return EXIT_GATE_FAILED
    names = " ".join(branch.name for branch, _ in made)
    console.summary(f"Your checked-out branch is unchanged. Push with: git -C {shown} push <your-fork> {names}")
    return EXIT_OK
