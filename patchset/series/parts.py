"""``parts.toml``, by slug so it survives renumbering: each fix's ``teeth`` (fail on upstream, pass on any correct
fix) and ``choices`` (test our form of the fix, which upstream may choose otherwise); `read_parts` reads it."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

from patchset.plumbing.errors import BadInput

PARTS_FILE = "parts.toml"


def slug_of(patch_name: str) -> str:
    """``0003-algo-normalize-x.patch`` -> ``algo-normalize-x``: the name without its number and extension."""
    stem = patch_name.removesuffix(".patch")
    number, dash, rest = stem.partition("-")
    return rest if dash and number.isdigit() else stem


def read_parts(folder: Path) -> dict[str, dict]:
    """The tables of the folder's ``parts.toml``, one a patch by its slug ({} without the file)."""
    path = folder / PARTS_FILE
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise BadInput(f"{path}: not valid TOML ({error}); see docs/maintaining.md, 'A fix as one unit'") from None


def without_overlay(folder: Path, patch_names: Sequence[str]) -> dict[str, str]:
    """{patch file name: why the overlays do not carry it}: its table's ``missing.overlay``, where it gives one."""
    tables = read_parts(folder)
    reasons = {name: tables.get(slug_of(name), {}).get("missing", {}).get("overlay") for name in patch_names}
    return {name: str(reason) for name, reason in reasons.items() if reason}


def parse_teeth(tables: Mapping[str, dict]) -> tuple[dict[str, str], list[str]]:
    """Every ``teeth`` of a ``parts.toml``'s tables ({slug: its tests' ``-k`` expression}), and their problems."""
    entries: dict[str, str] = {}
    problems: list[str] = []
    for slug, table in tables.items():
        if not isinstance(table, dict) or "teeth" not in table:
            continue
        selection = table["teeth"]
        if not isinstance(selection, str) or not selection.strip():
            problems.append(f"[{slug}] teeth names no tests; give a pytest -k expression of tests/regression")
            entries[slug] = ""  # a malformed entry still names its patch: one problem, not two
            continue
        if selection.count("(") != selection.count(")"):
            problems.append(f"[{slug}] the parentheses of teeth {selection!r} do not balance")
        entries[slug] = selection.strip()
    return entries, problems


def check_teeth(entries: Mapping[str, str], patch_names: Sequence[str]) -> list[str]:
    """Problems of ``entries`` against the series' patches: a patch without teeth, teeth for no patch."""
    slugs = {slug_of(name): name for name in patch_names}
    problems = [
        f"[{slug}] is no patch of the series (renamed? its slug is its file name without NNNN-)"
        for slug in entries
        if slug not in slugs
    ]
    problems += [
        f"{name} has no teeth; name the regression tests that show its bug (a pytest -k expression)"
        for slug, name in slugs.items()
        if slug not in entries
    ]
    return problems


def load_parts(folder: Path, patch_names: Sequence[str]) -> tuple[dict[str, str], dict[str, str]]:
    """The teeth and the choices of ``patch_names`` from the folder's ``parts.toml``, each {patch file name: its
    tests' ``-k`` expression}; a patch without teeth is left out (the lint names it)."""
    path = folder / PARTS_FILE
    tables = read_parts(folder)
    by_slug, problems = parse_teeth(tables)
    if problems:
        raise BadInput(f"{path}: {problems[0]}; see scripts/export.sh lint")
    choices: dict[str, str] = {}
    for name in patch_names:
        value = tables.get(slug_of(name), {}).get("choices")
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise BadInput(f"{path}: [{slug_of(name)}] choices must be a pytest -k expression, not {value!r}")
        choices[name] = value.strip()
    return {name: by_slug[slug_of(name)] for name in patch_names if slug_of(name) in by_slug}, choices
