"""What a series' ``parts.toml`` declares of each fix that the tooling acts on: its ``choices`` (its ``teeth``:
`patchset.series.teeth`).

A fix's regression tests are of two kinds. Its teeth (``teeth``) show the bug: they fail on the unpatched upstream
and pass on any correct fix. Its ``choices`` pin how this series fixed it (geo_mean's mean over every row outside the
engine, say), which upstream may fairly choose otherwise. When a patch is retired by behaviour (upstream fixed the bug
its own way: its teeth pass on the tree as shipped), its choice tests judge upstream's form by ours, so the
regression run that ends ``apply`` leaves them out and says so. The rest of ``parts.toml`` (the parts of a fix that
tests/scripts/test_fix_completeness.py checks: ``audit``, ``harness``, ``parity``, ``guard``, the reasons of
``[<slug>.missing]``) is read there, through `read_parts`, the one reader of the file.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from pathlib import Path

from patchset.plumbing.errors import BadInput

PARTS_FILE = "parts.toml"


def slug_of(patch_name: str) -> str:
    """``0003-algo-normalize-x.patch`` -> ``algo-normalize-x``: the name without its number and extension."""
    stem = patch_name.removesuffix(".patch")
    number, dash, rest = stem.partition("-")
    return rest if dash and number.isdigit() else stem


def read_parts(folder: Path) -> dict[str, dict]:
    """The tables of the folder's ``parts.toml``, one a patch by its slug ({} without the file); ``BadInput`` naming
    the file when it is not valid TOML."""
    path = folder / PARTS_FILE
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise BadInput(f"{path}: not valid TOML ({error}); see docs/maintaining.md, 'A fix as one unit'") from None


def load_choices(folder: Path, patch_names: Sequence[str]) -> dict[str, str]:
    """{patch file name: the ``-k`` expression of its choice tests}, for the patches whose table in the folder's
    ``parts.toml`` has ``choices`` ({} without the file); ``BadInput`` naming the file when it is not valid TOML or a
    ``choices`` is not a non-empty string."""
    path = folder / PARTS_FILE
    tables = read_parts(folder)
    choices: dict[str, str] = {}
    for name in patch_names:
        value = tables.get(slug_of(name), {}).get("choices")
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise BadInput(f"{path}: [{slug_of(name)}] choices must be a pytest -k expression, not {value!r}")
        choices[name] = value.strip()
    return choices


def without_overlay(folder: Path, patch_names: Sequence[str]) -> dict[str, str]:
    """{patch file name: why the overlays do not carry it}, for the patches whose table in the folder's ``parts.toml``
    gives a reason for a missing ``overlay`` (verl-0.7.0's, a release the overlay does not support; every patch of the
    verl and verl-0.7 series has its piece)."""
    tables = read_parts(folder)
    reasons = {name: tables.get(slug_of(name), {}).get("missing", {}).get("overlay") for name in patch_names}
    return {name: str(reason) for name, reason in reasons.items() if reason}
