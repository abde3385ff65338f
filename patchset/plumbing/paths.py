"""Where this checkout is: the one definition of the repository root that the tooling runs from."""

from __future__ import annotations

from pathlib import Path

# patchset/ is run from the checkout, never installed: its parent is the repository (patches/, tests/, .venv)
REPO_ROOT = Path(__file__).resolve().parents[2]
