"""Scratch folders named with the id of the process that made them (``prefix``), so that the next run can remove those
of a process that is gone, killed where no ``finally`` runs (``sweep``)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

_NAME = re.compile(r"\.?patchset-[a-z]+-(\d+)-")


def prefix(kind: str, *, hidden: bool = False) -> str:
    """The name prefix of a scratch folder of ``kind`` made by this process (``hidden``: with a leading dot)."""
    return f"{'.' if hidden else ''}patchset-{kind}-{os.getpid()}-"


def alive(pid: int) -> bool:
    """True when a process ``pid`` exists (one of another user's counts: it may not be signalled, but it is there)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep(folder: Path | None = None) -> list[Path]:
    """Remove and return the scratch entries in ``folder`` (default: the temp folder) of processes that are gone."""
    where = Path(folder or tempfile.gettempdir())
    removed = []
    try:
        entries = list(where.iterdir())
    except OSError:
        return []
    for path in entries:
        match = _NAME.match(path.name)
        if match is None or int(match.group(1)) == os.getpid() or alive(int(match.group(1))):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return removed
