"""The teeth of each patch: the regression tests that show the bug it fixes, declared in the series' ``parts.toml``.

Each patch's table (named by its slug, the file name without ``NNNN-`` and ``.patch``) has ``teeth``: the tests of
``tests/regression`` that fail on the unpatched upstream and pass once the bug is fixed, as a pytest ``-k``
expression::

    [algo-normalize-geo-mean-policy-loss-global-mini]
    teeth = "geo_mean and not outside_the_engine"

A slug survives renumbering (a patch inserted or dropped); a patch whose subject changes gets a new slug, and the
lint names the table that no longer matches. Two readers: the test command's teeth run on a release that takes part
of the series, and ``apply``, which runs a patch's teeth on the tree as shipped when the patch neither applies nor is
in upstream by content (upstream may have fixed the bug its own way: ``patchset.apply.behaviour``). The lint checks
that every patch has its teeth.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from patchset.plumbing.errors import BadInput
from patchset.series.parts import PARTS_FILE, read_parts, slug_of

__all__ = ["TeethEntry", "check_teeth", "load_teeth", "parse_teeth", "slug_of"]


@dataclass(frozen=True)
class TeethEntry:
    """One patch's teeth: its slug and its tests as a pytest ``-k`` expression."""

    slug: str
    selection: str


def parse_teeth(tables: Mapping[str, dict]) -> tuple[list[TeethEntry], list[str]]:
    """Every ``teeth`` of a ``parts.toml``'s tables, and the problems of each: not a string, no tests, parentheses
    that do not balance."""
    entries: list[TeethEntry] = []
    problems: list[str] = []
    for slug, table in tables.items():
        if not isinstance(table, dict) or "teeth" not in table:
            continue
        selection = table["teeth"]
        if not isinstance(selection, str) or not selection.strip():
            problems.append(f"[{slug}] teeth names no tests; give a pytest -k expression of tests/regression")
            entries.append(TeethEntry(slug, ""))  # a malformed entry still names its patch: one problem, not two
            continue
        if selection.count("(") != selection.count(")"):
            problems.append(f"[{slug}] the parentheses of teeth {selection!r} do not balance")
        entries.append(TeethEntry(slug, selection.strip()))
    return entries, problems


def check_teeth(entries: Sequence[TeethEntry], patch_names: Sequence[str]) -> list[str]:
    """Problems of ``entries`` against the series' patches: a patch without teeth, teeth for no patch."""
    slugs = {slug_of(name): name for name in patch_names}
    named = {entry.slug for entry in entries}
    problems = [
        f"[{entry.slug}] is no patch of the series (renamed? its slug is its file name without NNNN-)"
        for entry in entries
        if entry.slug not in slugs
    ]
    problems += [
        f"{name} has no teeth; name the regression tests that show its bug (a pytest -k expression)"
        for slug, name in slugs.items()
        if slug not in named
    ]
    return problems


def load_teeth(folder: Path, patch_names: Sequence[str]) -> dict[str, str]:
    """{patch file name: its tests' ``-k`` expression} from the folder's ``parts.toml`` ({} without one); raise
    ``BadInput`` naming the table of a malformed entry. A patch without teeth is left out (the lint names it)."""
    entries, problems = parse_teeth(read_parts(folder))
    if problems:
        raise BadInput(f"{folder / PARTS_FILE}: {problems[0]}; see scripts/export.sh lint")
    by_slug = {entry.slug: entry.selection for entry in entries}
    return {name: by_slug[slug_of(name)] for name in patch_names if slug_of(name) in by_slug}
