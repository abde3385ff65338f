"""A fresh venv that sees the pinned test environment's packages (2.2 GB) through one ``.pth`` line, in under a
second (``venv --system-site-packages`` would expose the base interpreter's, not the venv's)."""

from __future__ import annotations

import subprocess
from pathlib import Path

# sorts before patchset_overlay.pth, so the locked packages are on sys.path when the overlay's line runs
DEPENDENCIES_PTH = "_patchset_locked_deps.pth"


def purelib(python: Path) -> Path:
    """The site-packages folder of the environment of ``python``."""
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip())


def linked_venv(base_python: Path, where: Path) -> tuple[Path, Path]:
    """Make a new venv at ``where`` (no pip) that sees ``base_python``'s packages; its python and site-packages."""
    subprocess.run([str(base_python), "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    site = purelib(python)
    (site / DEPENDENCIES_PTH).write_text(f"{purelib(base_python)}\n", encoding="utf-8")
    return python, site
