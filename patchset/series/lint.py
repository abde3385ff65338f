"""A lint of the patch series: every problem is one line naming the file (and line) and what is wrong. Unlike
``load_series``, which stops at the first problem, it reports them all; docs/maintaining.md lists each rule."""

from __future__ import annotations

import email.parser
import email.policy
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from patchset.plumbing import gitops, patchtext
from patchset.plumbing.errors import BadInput
from patchset.plumbing.ui import display_path
from patchset.series import columns
from patchset.series.copies import check_copies
from patchset.series.groups import (
    COMMENT_SUFFIX,
    DESCRIPTIONS_DIR,
    GROUPS_FILE,
    RESOLUTION_SUFFIX,
    UPSTREAM_COMMIT,
    UPSTREAM_PATCH_SUFFIX,
    UPSTREAM_TESTS_SUFFIX,
    check_groups,
    parse_groups,
    read_description,
)
from patchset.series.model import PATCH_NAME, parse_series, read_patch, subject_of
from patchset.series.parts import PARTS_FILE, check_teeth, parse_teeth, read_parts
from patchset.upstreams.pins import load_pins
from patchset.upstreams.pr_template import NOT_DUPLICATE, body_problems
from patchset.upstreams.registry import ANY_SUBJECT_FORM, UPSTREAMS

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_UPSTREAM_WORDS = ("fixed", "applied", "merged", "included")
_URL = re.compile(r"https?://\S+")
_ORIGIN = re.compile(r"^(?P<kind>upstream|backport|vendor|other)\b[,\s]*(?P<rest>.*)$", re.IGNORECASE)
_FORWARDED_WORD = re.compile(r"^(?P<word>no|not-needed)\b[\s,;:(-]*(?P<reason>.*?)\)?$", re.IGNORECASE)
_DIFF_GIT = "diff --git "
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")


@dataclass(frozen=True)
class Problem:
    """One lint finding: the file, its line (0 when it is about the whole file) and what is wrong."""

    path: Path
    message: str
    line: int = 0

    def __str__(self) -> str:
        where = display_path(self.path) + (f":{self.line}" if self.line else "")
        return f"{where}: {self.message}"


def series_folders(patches_dir: Path) -> tuple[list[Path], list[Problem]]:
    """The series folders to lint, in a stable order, and problems with ``upstreams.toml`` itself."""
    problems: list[Problem] = []
    named: list[str] = []
    pins_file = patches_dir / "upstreams.toml"
    if pins_file.is_file():
        try:
            named = list(dict.fromkeys(pin.series for pin in load_pins(pins_file).pins))
        except BadInput as exc:
            problems.append(Problem(pins_file, str(exc).removeprefix(f"{pins_file}: ")))
    found = [
        child.name
        for child in sorted(patches_dir.iterdir())
        if child.is_dir()
        and not child.name.startswith(".")
        and ((child / "series").exists() or any(child.rglob("*.patch")))
    ]
    for stray in sorted(patches_dir.glob("*.patch")):
        problems.append(Problem(stray, "not in a series folder; move it into patches/<upstream>/ and list it"))
    return [patches_dir / name for name in dict.fromkeys([*named, *found])], problems


def subject_problem(series: str | None, subject: str, what: str = "Subject") -> str | None:
    """Why ``subject`` does not fit upstream: not in the PR-title form of ``series``' upstream, or too wide."""
    if series is not None:
        # a release line's series (verl-0.7) takes its upstream's form
        upstream = next((key for key in UPSTREAMS if series == key or series.startswith(f"{key}-")), None)
        form = UPSTREAMS[upstream].subject_form if upstream else ANY_SUBJECT_FORM
        if not form.pattern.match(subject):
            return f"{what} {subject!r} is not in the upstream's PR-title form {form.shown}"
    return columns.subject_problem(subject, what)


def _message_problems(path: Path, missing: str, series: str | None = None) -> list[Problem]:
    """The subject's problem (``missing`` when it has none; with ``series``, its upstream's PR-title form first),
    then the message lines over 72 columns (``patchset.series.columns``; DEP-3 fields and URLs exempt)."""
    raw = path.read_bytes()
    header = email.parser.BytesHeaderParser(policy=email.policy.default).parsebytes(raw)
    subject = subject_of(str(header.get("Subject", "")))
    problems: list[Problem] = []
    if not subject:
        problems.append(Problem(path, missing))
    elif (why := subject_problem(series, subject)) is not None:
        problems.append(Problem(path, why))
    lines = columns.patch_message_lines(raw.decode("utf-8", "surrogateescape"))
    return problems + [Problem(path, message, number) for number, message in columns.long_lines(lines)]


def _lint_header(path: Path, series: str) -> list[Problem]:
    problems = _message_problems(path, "no Subject (the commit's first line); export it with git format-patch", series)
    patch = read_patch(path)
    fields = patch.fields
    if "Origin" not in fields and "Author" not in fields:
        problems.append(Problem(path, "header lacks Origin: (backport/vendor + URL) or Author:"))
    origin = fields.get("Origin")
    kind = _ORIGIN.match(origin or "")
    if origin is not None and kind is None:
        problems.append(Problem(path, f"Origin: {origin} must start with upstream, backport, vendor or other"))
    elif kind and kind["kind"].lower() in ("upstream", "backport") and not _URL.search(kind["rest"]):
        problems.append(Problem(path, f"Origin: {kind['kind']} needs the upstream commit or PR URL after it"))
    for name in (name for name in fields if name == "Bug" or name.startswith("Bug-")):
        if not _URL.match(fields[name]):
            problems.append(Problem(path, f"{name}: must be the URL of the upstream bug this patch fixes"))
    forwarded = fields.get("Forwarded")
    word = _FORWARDED_WORD.match(forwarded or "")  # never with a URL
    if forwarded is None:
        problems.append(Problem(path, "header lacks Forwarded: (no or not-needed with the reason, or the PR URL)"))
    elif not _URL.match(forwarded) and word is None:
        why = f"Forwarded: {forwarded} must be no or not-needed with a reason, or the URL it was sent to"
        problems.append(Problem(path, why))
    elif word and not word["reason"].strip():
        why = f"Forwarded: {word['word']} needs the reason after it (e.g. 'no, sent as PR once ...')"
        problems.append(Problem(path, why))
    last_update = fields.get("Last-Update")
    if last_update is None:
        problems.append(Problem(path, "header lacks Last-Update: (YYYY-MM-DD)"))
    elif not _DATE.match(last_update):
        problems.append(Problem(path, f"Last-Update: {last_update} is not a YYYY-MM-DD date"))
    if "Applied-Upstream" in fields:
        if patch.upstream_since is None:
            problems.append(Problem(path, "Applied-Upstream: must start with the upstream version, e.g. 0.9.0, <URL>"))
    elif patch.upstream_checks:
        problems.append(
            Problem(path, "Upstream-Check: needs Applied-Upstream: <version>, <URL> (since when upstream has it)")
        )
    elif forwarded and "upstream" in forwarded.lower() and any(said in forwarded.lower() for said in _UPSTREAM_WORDS):
        problems.append(Problem(path, "Forwarded: says it is upstream, but the header lacks Applied-Upstream:"))
    return problems


def _lint_added_lines(path: Path) -> list[Problem]:
    """Trailing spaces or tabs on lines the patch adds (a CR before the newline is the file's line ending)."""
    problems: list[Problem] = []
    current = ""
    in_hunk = False
    text = path.read_bytes().decode("utf-8", "surrogateescape")
    for number, line in enumerate(text.split("\n"), start=1):
        if line.startswith(_DIFF_GIT):
            paths = patchtext.patch_paths(line + "\n")
            current, in_hunk = (paths[-1] if paths else line[len(_DIFF_GIT) :]), False
        elif _HUNK.match(line):
            in_hunk = True
        elif in_hunk and line.startswith("+"):
            body = line[1:].removesuffix("\r")
            if body != body.rstrip(" \t"):
                problems.append(Problem(path, f"trailing whitespace on an added line of {current}", number))
        elif in_hunk and not line.startswith((" ", "-", "\\")):
            in_hunk = False
    return problems


def lint_patch(path: Path, series: str = "") -> list[Problem]:
    """Every problem of one patch file (parse, header fields, whitespace); ``series`` picks the subject form."""
    error = gitops.patch_parse_error(path)
    if error is not None:
        return [Problem(path, f"does not parse as a patch ({error}); re-export it with scripts/export.sh")]
    try:
        return _lint_header(path, series) + _lint_added_lines(path)
    except BadInput as exc:  # a malformed Upstream-Check: line
        return [Problem(path, str(exc).removeprefix(f"{path}: "))] + _lint_added_lines(path)


_NEW_FILE = re.compile(r"^diff --git .*\n(?:(?!diff --git ).*\n)*?new file mode ", re.MULTILINE)


def lint_upstream_tests(path: Path, groups: set[str]) -> list[Problem]:
    """Problems of a group's ``pr/<group>.upstream-tests.patch`` (``groups``: the group names)."""
    group = path.name.removesuffix(UPSTREAM_TESTS_SUFFIX)
    problems = []
    if group not in groups:
        groups_file = display_path(path.parent.parent / GROUPS_FILE)
        problems.append(Problem(path, f"no group {group} in {groups_file}; name it <group>{UPSTREAM_TESTS_SUFFIX}"))
    if (error := gitops.patch_parse_error(path)) is not None:
        return [*problems, Problem(path, f"does not parse as a patch ({error}); make it with git format-patch")]
    text = path.read_bytes().decode("utf-8", "surrogateescape")
    problems += _message_problems(path, "no Subject (what the change to upstream's tests is); use git format-patch")
    if not UPSTREAM_COMMIT.search(text.partition("\ndiff --git ")[0]):
        problems.append(
            Problem(path, "header lacks Upstream-Commit: <hash> (<where read>), the revision of the tests it changes")
        )
    # tests/, and docs/ for a PR that documents what it changes (a release sdist ships neither)
    outside = [name for name in patchtext.patch_paths(text) if not name.startswith(("tests/", "docs/"))]
    if outside:
        problems.append(
            Problem(path, f"touches {', '.join(outside)}: an upstream-tests patch changes only tests/ and docs/")
        )
    for match in _NEW_FILE.finditer(text):
        created = patchtext.patch_paths(match[0])
        problems.append(
            Problem(path, f"creates {', '.join(created)}: a new test goes into the series, which always carries it")
        )
    return problems + _lint_added_lines(path)


def lint_groups(folder: Path, patch_count: int) -> list[Problem]:
    """Problems of the folder's ``groups`` file and ``pr/*.md`` descriptions (none without a groups file)."""
    groups_file = folder / GROUPS_FILE
    descriptions = folder / DESCRIPTIONS_DIR
    if not groups_file.is_file():
        orphans = [*descriptions.glob("*.md"), *descriptions.glob(f"*{UPSTREAM_TESTS_SUFFIX}")]
        return [Problem(path, f"no {GROUPS_FILE} file names this group") for path in sorted(orphans)]
    parsed = parse_groups(groups_file.read_text(encoding="utf-8"))
    problems = [Problem(groups_file, message, line) for line, message in parsed.problems]
    problems += [Problem(groups_file, message, line) for line, message in check_groups(parsed.groups, patch_count)]
    names = {group.name for group in parsed.groups}
    for group in parsed.groups:
        description = descriptions / f"{group.name}.md"
        if not description.is_file():
            shown = display_path(description)
            why = "its patches are folded into one commit" if group.fold else "every group is a pull request"
            problems.append(Problem(groups_file, f"{group.name} has no {shown}, its PR body ({why})", group.line))
    for group in parsed.groups:
        design = descriptions / f"{group.name}{COMMENT_SUFFIX}"
        if group.held and group.comment and not design.is_file():
            shown = display_path(design)
            problems.append(Problem(groups_file, f"{group.name} is held for #{group.comment[0]} but has no {shown}"))
    for path in sorted(descriptions.glob(f"*{COMMENT_SUFFIX}")):
        group = next((g for g in parsed.groups if f"{g.name}{COMMENT_SUFFIX}" == path.name), None)
        if group is None or not (group.held and group.comment):
            problems.append(Problem(path, f"no group with held= and comment= of this name in {GROUPS_FILE}"))
        text = path.read_text(encoding="utf-8")
        lines = list(enumerate(text.splitlines(), start=1))
        problems += [Problem(path, message, number) for number, message in columns.long_lines(lines, markdown=True)]
        problems += [Problem(path, f"comment: {why}") for why in body_problems(text)]
    for path in sorted(p for p in descriptions.glob("*.md") if not p.name.endswith(COMMENT_SUFFIX)):
        if path.stem not in names:
            problems.append(
                Problem(path, f"no group {path.stem} in {display_path(groups_file)}; add it or delete this")
            )
            continue
        try:
            title = read_description(path).title
        except BadInput as exc:
            problems.append(Problem(path, str(exc).removeprefix(f"{path}: ")))
            continue
        if (why := subject_problem(folder.name, title, "PR title")) is not None:
            problems.append(Problem(path, why, 1))
        text = path.read_text(encoding="utf-8")
        lines = list(enumerate(text.splitlines(), start=1))[1:]
        problems += [Problem(path, message, number) for number, message in columns.long_lines(lines, markdown=True)]
        problems += [Problem(path, f"PR body: {why}") for why in body_problems(text)]
        group = next(group for group in parsed.groups if group.name == path.stem)
        opens_pr = not group.carried and (not group.comment or bool(group.held))
        if opens_pr and f"\n## {NOT_DUPLICATE}\n" not in text:
            problems.append(Problem(path, f"no '## {NOT_DUPLICATE}' section: upstream asks it of every PR"))
    for path in sorted(descriptions.glob(f"*{UPSTREAM_TESTS_SUFFIX}")):
        problems += lint_upstream_tests(path, names)
    for path in sorted(descriptions.glob(f"*{UPSTREAM_PATCH_SUFFIX}")):
        if path.name.removesuffix(UPSTREAM_PATCH_SUFFIX) not in names:
            problems.append(Problem(path, f"no group of this name in {display_path(groups_file)}; rename or delete it"))
    onto = {group.name for group in parsed.groups if group.onto}
    for path in sorted(descriptions.glob(f"*{RESOLUTION_SUFFIX}")):
        if path.name.removesuffix(RESOLUTION_SUFFIX) not in onto:
            problems.append(Problem(path, f"no group with onto= of this name in {display_path(groups_file)}"))
    return problems


def lint_teeth(folder: Path, patch_names: list[str]) -> list[Problem]:
    """Problems of the teeth the folder's ``parts.toml`` declares."""
    parts_file = folder / PARTS_FILE
    if not parts_file.is_file():
        return [Problem(parts_file, "missing; give each patch a table with its teeth (the tests that show its bug)")]
    try:
        entries, problems = parse_teeth(read_parts(folder))
    except BadInput as error:
        return [Problem(parts_file, str(error).removeprefix(f"{parts_file}: "))]
    return [Problem(parts_file, message) for message in problems + check_teeth(entries, patch_names)]


def lint_folder(folder: Path) -> list[Problem]:
    """Every problem of one series folder: its ``series`` file, the folder's patches and each listed patch."""
    series_file = folder / "series"
    if not folder.is_dir():
        return [Problem(folder, "series folder named in upstreams.toml does not exist; create it with a series file")]
    if not series_file.is_file():
        return [Problem(series_file, "missing; list the folder's patches in it, in order, one a line")]
    entries = parse_series(series_file.read_text(encoding="utf-8").splitlines(), folder)
    problems = [Problem(series_file, entry.problem, entry.line) for entry in entries if entry.problem is not None]
    entries = [entry for entry in entries if entry.problem is None]
    listed = {entry.name for entry in entries}
    for position, entry in enumerate(entries, start=1):
        path = folder / entry.name
        if (match := PATCH_NAME.match(entry.name)) is None:
            problems.append(Problem(path, "name does not match NNNN-<area>-<slug>.patch (lowercase a-z, 0-9 and -)"))
        elif int(match["number"]) != position:
            where = f"patch {position} of {display_path(series_file)}"
            why = f"numbered {match['number']} but is {where}; rename it {position:04d}{entry.name[4:]}"
            problems.append(Problem(path, why))
        problems += lint_patch(path, folder.name)
    for path in sorted(folder.rglob("*.patch")):
        kept_beside = (UPSTREAM_TESTS_SUFFIX, RESOLUTION_SUFFIX, UPSTREAM_PATCH_SUFFIX)
        if path.parent == folder / DESCRIPTIONS_DIR and path.name.endswith(kept_beside):
            continue  # a group's change to upstream's tests, its cherry-pick's resolution, its rebased PR (lint_groups)
        if path.relative_to(folder).as_posix() not in listed:
            problems.append(Problem(path, f"not listed in {display_path(series_file)}; list it or delete it"))
    names = [PurePosixPath(entry.name).name for entry in entries]
    return problems + lint_groups(folder, len(entries)) + lint_teeth(folder, names)


def lint_patches_dir(patches_dir: Path) -> tuple[int, list[Problem]]:
    """(number of series folders, every problem) for ``patches_dir``; ``BadInput`` when it is not a folder."""
    if not patches_dir.is_dir():
        raise BadInput(f"{display_path(patches_dir)} is not a folder; pass --patches-dir with the patches folder")
    folders, problems = series_folders(patches_dir)
    for folder in folders:
        problems += lint_folder(folder)
        problems += [Problem(folder / "series", message, line) for line, message in check_copies(patches_dir, folder)]
    return len(folders), problems
