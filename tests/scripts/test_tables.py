"""README.md's patch table is made from the series and their ``parts.toml``, never by hand: the committed table is
the one they make, and a change of a declaration (or of a patch's header) shows as drift until it is written again."""

from __future__ import annotations

import shutil
from pathlib import Path

from patchset.series import tables

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_readmes_patch_table_is_the_one_the_declarations_make():
    assert not tables.drift(REPO_ROOT / "README.md", REPO_ROOT / "patches"), (
        "README.md's patch table is out of date: run python -m patchset.series.tables --write"
    )


def test_a_changed_declaration_drifts_until_written_again(tmp_path: Path):
    patches = shutil.copytree(REPO_ROOT / "patches", tmp_path / "patches")
    readme = shutil.copy(REPO_ROOT / "README.md", tmp_path / "README.md")
    parts = patches / "verl" / "parts.toml"
    parts.write_text(parts.read_text().replace('summary = "distillation loss"', 'summary = "the distillation loss"'))
    assert tables.drift(Path(readme), patches)
    tables.write(Path(readme), patches)
    assert not tables.drift(Path(readme), patches)
    assert "| 0.8.0 | the distillation loss | fixed in verl 0.9.0 (" in Path(readme).read_text()
