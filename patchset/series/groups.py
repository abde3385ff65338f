"""Concern groups of a series, ``patches/<series>/groups``: which patches go upstream together, one pull request per
group, and how; docs/maintaining.md, "Sending a patch upstream", describes the format."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from patchset.plumbing.errors import BadInput

GROUPS_FILE = "groups"
DESCRIPTIONS_DIR = "pr"
UPSTREAM_TESTS_SUFFIX = ".upstream-tests.patch"
COMMENT_SUFFIX = ".comment.md"  # a held group's design, set out for the issue before its PR
UPSTREAM_PATCH_SUFFIX = ".upstream.patch"  # the PR against upstream's newest files read (export.upstream_prs)
RESOLUTION_SUFFIX = ".resolution.patch"  # resolves a cherry-pick's conflicts on the branch that takes it
GROUP_NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_NUMBER = re.compile(r"^\d{4}$")
# the upstream revision an upstream-tests patch was made against: a commit hash, then where it was read
UPSTREAM_COMMIT = re.compile(r"^Upstream-Commit:[ \t]*(?P<commit>[0-9a-f]{7,40})\b(?P<where>.*)$", re.MULTILINE)
_ISSUE = re.compile(r"^\d+$")


@dataclass(frozen=True)
class Description:
    """A group's PR description: the title line, the commit message paragraphs, the PR-only sections."""

    path: Path
    title: str
    message: tuple[str, ...]
    sections: str


@dataclass(frozen=True)
class Group:
    """One concern: its name, its patches' numbers (series order), and how it is sent."""

    name: str
    numbers: tuple[int, ...]
    fold: bool = False
    after: str | None = None
    line: int = 0
    onto: str | None = None  # the upstream branch that takes its PR
    carried: str | None = None  # why it stays a carried patch (no PR), when it does
    held: str | None = None  # why its branch is made but its PR waits, when it does
    comment: tuple[int, ...] = ()  # the open PR (then issues) it goes to as a comment, instead of a PR
    description: Description | None = field(default=None, compare=False)
    upstream_tests: Path | None = field(default=None, compare=False)  # its pr/<name>.upstream-tests.patch


@dataclass(frozen=True)
class GroupFile:
    """What a ``groups`` file says, and the problems found reading it (one string each, with its line)."""

    groups: tuple[Group, ...]
    problems: tuple[tuple[int, str], ...]


def read_description(path: Path) -> Description:
    """Parse ``pr/<name>.md``; raise ``BadInput`` naming the file when it has no title line."""
    text = path.read_text(encoding="utf-8")
    title, _, rest = text.partition("\n")
    if not title.strip() or title.startswith("#"):
        raise BadInput(
            f"{path}: the first line must be the PR title (the upstream's title form), not empty or a heading"
        )
    match = re.search(r"^## ", rest, re.MULTILINE)
    head, sections = (rest[: match.start()], rest[match.start() :]) if match else (rest, "")
    message = tuple(p.strip("\n") for p in re.split(r"\n\s*\n", head) if p.strip())  # its paragraphs
    return Description(path=path, title=title.strip(), message=message, sections=sections.strip("\n"))


def parse_groups(text: str) -> GroupFile:
    """Every group of a ``groups`` file, and the problems of its lines (syntax only; see ``check_groups``)."""
    groups: list[Group] = []
    problems: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("#"):
            continue
        # a reason runs to the end of the line and may name an upstream issue (#7829): only the options lose comments
        code, said, carried = line.partition(" carried=")
        code, held_said, held = code.partition(" held=")
        tokens = code.split("#", 1)[0].split()
        if not tokens:
            continue
        name, rest = tokens[0], tokens[1:]
        if not GROUP_NAME.match(name):
            problems.append((number, f"group name {name!r} is not lowercase a-z, 0-9 and -"))
            continue
        numbers: list[int] = []
        fold, after, onto = False, None, None
        comment: tuple[int, ...] = ()
        for token in rest:
            value = token.partition("=")[2]
            if _NUMBER.match(token):
                numbers.append(int(token))
            elif token == "fold":
                fold = True
            elif token.startswith("after=") and GROUP_NAME.match(value):
                after = value
            elif token.startswith("onto=") and value:
                onto = value
            elif token.startswith("comment=") and all(_ISSUE.match(n) for n in value.split(",")):
                comment = tuple(int(n) for n in value.split(","))
            else:  # reported; the rest of the line still counts, so one typo is one problem
                options = "'fold', 'after=', 'onto=', 'comment=<PR>[,<issue>]', 'held=' or 'carried='"
                problems.append((number, f"{name}: {token!r} is not a patch number (NNNN), {options}"))
        if not numbers:
            problems.append((number, f"{name}: lists no patch; give the NNNN numbers of its patches in series"))
            continue
        reason = carried.strip() or None
        waits = held.strip() or None
        if said and not reason:
            problems.append((number, f"{name}: carried= gives no reason; say why it stays a carried patch"))
        if held_said and not waits:
            problems.append((number, f"{name}: held= gives no reason; say what its PR waits for"))
        if reason and (onto or comment or waits):
            problems.append((number, f"{name}: a carried group goes nowhere upstream: no onto=, comment= or held="))
        if comment and onto and not waits:
            problems.append((number, f"{name}: a comment= group makes no branch unless held=: no onto= alone"))
        groups.append(Group(name, tuple(numbers), fold, after, number, onto, reason, waits, comment))
    return GroupFile(groups=tuple(groups), problems=tuple(problems))


def check_groups(groups: tuple[Group, ...], patch_count: int) -> list[tuple[int, str]]:
    """Problems of ``groups`` against a series of ``patch_count`` patches: (line, message)."""
    problems: list[tuple[int, str]] = []
    seen_names: dict[str, int] = {}
    owner: dict[int, str] = {}
    for group in groups:
        if (first := seen_names.get(group.name)) is not None:
            problems.append((group.line, f"group {group.name} is defined twice (first on line {first})"))
            continue
        if group.after is not None and group.after not in seen_names:
            problems.append(
                (group.line, f"{group.name}: after={group.after} names no group defined above it; define that first")
            )
        seen_names[group.name] = group.line
        if list(group.numbers) != sorted(set(group.numbers)):
            problems.append((group.line, f"{group.name}: list its patches once each, in series order"))
        for number in group.numbers:
            if not 1 <= number <= patch_count:
                problems.append((group.line, f"{group.name}: {number:04d} is not a patch of series (1-{patch_count})"))
            elif number in owner and owner[number] != group.name:
                problems.append((group.line, f"{group.name}: {number:04d} is already in group {owner[number]}"))
            else:
                owner[number] = group.name
    for number in range(1, patch_count + 1):
        if number not in owner:
            problems.append(
                (0, f"patch {number:04d} of series is in no group; add it to one (a new group is one line)")
            )
    return problems


def load_groups(folder: Path, patch_count: int) -> tuple[Group, ...]:
    """The folder's groups with their descriptions; without a ``groups`` file, one per patch, each after the last."""
    path = folder / GROUPS_FILE
    if not path.is_file():
        return tuple(
            Group(f"patch-{n:04d}", (n,), after=f"patch-{n - 1:04d}" if n > 1 else None)
            for n in range(1, patch_count + 1)
        )
    parsed = parse_groups(path.read_text(encoding="utf-8"))
    problems = [*parsed.problems, *check_groups(parsed.groups, patch_count)]
    if problems:
        line, message = problems[0]
        raise BadInput(f"{path}{f':{line}' if line else ''}: {message}; see scripts/export.sh lint")
    groups = []
    for group in parsed.groups:
        description_file = folder / DESCRIPTIONS_DIR / f"{group.name}.md"
        description = read_description(description_file) if description_file.is_file() else None
        if group.fold and description is None:
            raise BadInput(f"{path}:{group.line}: {group.name} folds its patches but {description_file} is missing")
        tests = folder / DESCRIPTIONS_DIR / f"{group.name}{UPSTREAM_TESTS_SUFFIX}"
        groups.append(replace(group, description=description, upstream_tests=tests if tests.is_file() else None))
    return tuple(groups)


def chain(groups: tuple[Group, ...], name: str) -> list[Group]:
    """The groups ``name`` builds on, base first, ending with ``name`` itself."""
    by_name = {group.name: group for group in groups}
    if name not in by_name:
        raise BadInput(f"no group {name!r}; the groups are: {', '.join(by_name)}")
    found: list[Group] = []
    current: str | None = name
    while current is not None:
        group = by_name[current]
        found.insert(0, group)
        current = group.after
    return found


_NUMBER_TOKEN = re.compile(r"(?<!\S)\d{4}(?!\S)")


def renumber_text(text: str, moved: dict[int, int | None], added: list[tuple[int, str]]) -> str:
    """A ``groups`` file after an export renumbered its series (``moved``: old number -> new, None: gone); each
    ``added`` (number, slug) patch gets a group of its own."""

    def number(match: re.Match[str]) -> str:
        new = moved.get(int(match[0]), int(match[0]))
        return "" if new is None else f"{new:04d}"

    lines = []
    names = set()
    for line in text.splitlines():
        code, sep, comment = line.partition("#")
        if code.split():
            names.add(code.split()[0])
        lines.append(_NUMBER_TOKEN.sub(number, code) + sep + comment)
    for new, slug in added:
        name, extra = slug, 2
        while name in names:
            name, extra = f"{slug}-{extra}", extra + 1
        names.add(name)
        lines.append(f"{name} {new:04d}")
    return "".join(f"{line}\n" for line in lines)
