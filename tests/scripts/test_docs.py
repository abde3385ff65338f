"""The documents a user or an upstream maintainer reads name no path of the machine they were written on."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# a user's or a development machine's own folders; example commands write relative paths or ~/src/...
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|home|Users|root|mnt|srv)/[\w.-]+")


def _documents() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md", "*.patch", "*.txt"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [REPO_ROOT / name for name in listed if (REPO_ROOT / name).is_file()]


def test_no_document_names_a_machine_path() -> None:
    documents = _documents()
    assert any(path.name == "README.md" for path in documents), "the documents were not found"
    found = [
        f"{path.relative_to(REPO_ROOT)}:{number}: {match.group(0)}"
        for path in documents
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1)
        for match in MACHINE_PATH.finditer(line)
    ]
    assert not found, "machine paths in documents:\n" + "\n".join(found)


def test_the_machine_path_pattern_finds_one() -> None:
    assert MACHINE_PATH.search("see /work/main/docs/fixes.md")
    assert not MACHINE_PATH.search("scripts/apply.sh ~/src/verl and .cache/upstreams/verl-0.8.0")
