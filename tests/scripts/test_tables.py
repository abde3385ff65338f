"""README.md's patch table and docs/loss-audit.md's table are made from the series' ``parts.toml``, never by hand:
the committed tables are the ones they make, and a change of a declaration (or of a patch's header) shows as drift
until they are written again."""

from __future__ import annotations

import shutil
from pathlib import Path

from patchset.series import tables

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_tables_are_the_ones_the_declarations_make():
    assert tables.drifted(REPO_ROOT, REPO_ROOT / "patches") == [], "run python -m patchset export tables --write"


def test_a_changed_declaration_drifts_until_written_again(tmp_path: Path):
    patches = shutil.copytree(REPO_ROOT / "patches", tmp_path / "patches")
    (tmp_path / "docs").mkdir()
    for relative in ("README.md", "docs/loss-audit.md"):
        shutil.copy(REPO_ROOT / relative, tmp_path / relative)
    parts = patches / "verl" / "parts.toml"
    text = parts.read_text().replace('summary = "distillation loss"', 'summary = "the distillation loss"')
    parts.write_text(text.replace('audit = ["`value_loss`"]', 'audit = ["`value_loss`", "`sft_loss`"]'))
    assert tables.drifted(tmp_path, patches) == [tmp_path / "README.md", tmp_path / "docs/loss-audit.md"]
    tables.write(tmp_path, patches)
    assert tables.drifted(tmp_path, patches) == []
    assert "| 0.8.0 | the distillation loss | fixed in verl 0.9.0 (" in (tmp_path / "README.md").read_text()
    assert "| `sft_loss` (SFT trainer) | yes | unchanged: verl 0001 |" in (tmp_path / "docs/loss-audit.md").read_text()
