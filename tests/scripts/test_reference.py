"""docs/troubleshooting.md's exit codes are made from each command's own ``--help``, never by hand: the committed
ones are the ones the commands give, and a change of a command's exit codes shows as drift until written again."""

from __future__ import annotations

import shutil
from pathlib import Path

from patchset.cli import apply, reference

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_exit_codes_are_the_ones_the_commands_give():
    assert not reference.drifted(REPO_ROOT), "run python -m patchset reference --write"


def test_a_changed_exit_code_drifts_until_written_again(tmp_path: Path, monkeypatch):
    (tmp_path / "docs").mkdir()
    shutil.copy(REPO_ROOT / reference.DOC, tmp_path / reference.DOC)
    changed = apply.EXIT_CODES.replace("the regression tests failed", "the regression tests did not pass")
    monkeypatch.setattr(reference, "COMMANDS", (("scripts/apply.sh", changed), *reference.COMMANDS[1:]))
    assert reference.drifted(tmp_path)
    reference.write(tmp_path)
    assert not reference.drifted(tmp_path)
    assert "1  the regression tests did not pass" in (tmp_path / reference.DOC).read_text()
