"""The teeth of each patch: the regression tests that show the bug it fixes, kept beside ``series``.

``patches/<series>/teeth`` names, for every patch of the series, the tests of ``tests/regression`` that fail on
the unpatched upstream and pass once the bug is fixed, as a pytest ``-k`` expression, one patch a line (``#``
comments and blank lines ignored)::

    # patch (its file name without NNNN- and .patch)   tests (pytest -k expression)
    algo-normalize-geo-mean-policy-loss-global-mini    geo_mean

A patch is named by its slug, so that renumbering the series (a patch inserted or dropped) leaves the file as it
is; a patch whose subject changes gets a new slug, and the lint names the entry that no longer matches. Two
readers: the test command's teeth run on a release that takes part of the series, and ``apply``, which runs a
patch's teeth on the tree as shipped when the patch neither applies nor is in upstream by content (upstream may
have fixed the bug its own way: ``patchset.apply.behaviour``). The lint checks that every patch has its entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from patchset.plumbing.errors import BadInput

TEETH_FILE = "teeth"


@dataclass(frozen=True)
class TeethEntry:
    """One line: the patch's slug, its tests as a pytest ``-k`` expression, and the line number."""

    slug: str
    selection: str
    line: int


def slug_of(patch_name: str) -> str:
    """``0003-algo-normalize-x.patch`` -> ``algo-normalize-x``: the name without its number and extension."""
    stem = patch_name.removesuffix(".patch")
    number, dash, rest = stem.partition("-")
    return rest if dash and number.isdigit() else stem


def parse_teeth(text: str) -> tuple[list[TeethEntry], list[tuple[int, str]]]:
    """Every entry of a ``teeth`` file, and the problems of its lines (line, message): an entry without tests, a
    patch named twice, parentheses that do not balance."""
    entries: list[TeethEntry] = []
    problems: list[tuple[int, str]] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        code = line.split("#", 1)[0].strip()
        if not code:
            continue
        slug, *rest = code.split(None, 1)
        selection = rest[0].strip() if rest else ""
        if slug in seen:
            problems.append((number, f"{slug} is listed twice (first on line {seen[slug]})"))
            continue
        if not selection:
            problems.append((number, f"{slug}: names no tests; give a pytest -k expression of tests/regression"))
        elif selection.count("(") != selection.count(")"):
            problems.append((number, f"{slug}: the parentheses of {selection!r} do not balance"))
        seen[slug] = number  # a malformed entry still names its patch: one problem, not two
        entries.append(TeethEntry(slug, selection, number))
    return entries, problems


def check_teeth(entries: Sequence[TeethEntry], patch_names: Sequence[str]) -> list[tuple[int, str]]:
    """Problems of ``entries`` against the series' patches: a patch without an entry, an entry for no patch."""
    slugs = {slug_of(name): name for name in patch_names}
    named = {entry.slug for entry in entries}
    problems = [
        (entry.line, f"{entry.slug} is no patch of the series (renamed? its slug is its file name without NNNN-)")
        for entry in entries
        if entry.slug not in slugs
    ]
    problems += [
        (0, f"{name} has no entry; name the regression tests that show its bug (a pytest -k expression)")
        for slug, name in slugs.items()
        if slug not in named
    ]
    return problems


def load_teeth(folder: Path, patch_names: Sequence[str]) -> dict[str, str]:
    """{patch file name: its tests' ``-k`` expression} from the folder's ``teeth`` file ({} without one); raise
    ``BadInput`` naming the line of a malformed entry. A patch without an entry is left out (the lint names it)."""
    path = folder / TEETH_FILE
    if not path.is_file():
        return {}
    entries, problems = parse_teeth(path.read_text(encoding="utf-8"))
    if problems:
        line, message = problems[0]
        raise BadInput(f"{path}:{line}: {message}; see scripts/export.sh lint")
    by_slug = {entry.slug: entry.selection for entry in entries}
    return {name: by_slug[slug_of(name)] for name in patch_names if slug_of(name) in by_slug}
