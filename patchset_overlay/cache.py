"""Where derived files are written for readers that need a file: Hydra (the critic YAML), tracebacks and ``show``.

Nothing found on disk is trusted: the folder must be this user's alone (0700), and a file is used only once compared
with the text derived in memory. Where no such folder can be had, the caller gets None. ``PATCHSET_OVERLAY_CACHE``
names the folder (default: ``$XDG_CACHE_HOME/patchset_overlay``, else ``~/.cache/patchset_overlay``).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

ENV_CACHE = "PATCHSET_OVERLAY_CACHE"


def cache_root() -> Path | None:
    """The cache folder, made 0700 if missing; None where it is not this user's alone or cannot be made."""
    configured = os.environ.get(ENV_CACHE)
    if configured:
        root = Path(configured)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = Path(base) / "patchset_overlay"
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = root.stat()
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    return root if os.access(root, os.W_OK) else None


def folder_for(text_key: str, root: Path | None) -> Path | None:
    """The folder of one derived set (named by ``text_key``, a digest of its contents) in ``root``, or None."""
    if root is None:
        return None
    folder = root / hashlib.sha256(text_key.encode("utf-8")).hexdigest()[:24]
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None
    return folder


def verified(path: Path, text: str) -> bool:
    """Make ``path`` hold exactly ``text``: kept when it does, written again (atomically) when it does not; False when
    it cannot be written."""
    try:
        if path.is_file() and not path.is_symlink() and path.read_text(encoding="utf-8") == text:
            return True
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
        return True
    except OSError:
        return False


def private_folder() -> Path:
    """A folder of this process alone (0700), removed at exit: where a derived file goes when no cache can be had."""
    folder = Path(tempfile.mkdtemp(prefix="patchset_overlay-"))
    atexit.register(shutil.rmtree, folder, True)
    return folder
