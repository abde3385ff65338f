"""The test environment: a `.venv` built from the pinned lock, rebuilt when the lock changes."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
LOCK_FILE = REPO_ROOT / "requirements" / "lock.txt"
STAMP_NAME = ".patchset-lock-sha256"


class VenvError(RuntimeError):
    """The environment could not be built; the message says which step failed."""


def _lock_digest(lock_file: Path) -> str:
    return hashlib.sha256(lock_file.read_bytes()).hexdigest()


def venv_python(venv_dir: Path) -> Path:
    return venv_dir / "bin" / "python"


def _run(command: list[str], step: str) -> None:
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        tail = "\n".join(result.stdout.splitlines()[-20:])
        raise VenvError(f"{step} failed (exit {result.returncode}):\n{tail}")


def ensure_venv(venv_dir: Path | None = None, lock_file: Path = LOCK_FILE) -> Path:
    """Return the python of a venv that holds exactly the locked set, building it first if needed.

    The venv records the sha256 of the lock it was built from, written only once `pip check` has passed:
    a changed lock, or a build that was interrupted, rebuilds it from scratch, so a stale or half-made
    environment can never pass for the pinned one.
    """
    venv_dir = venv_dir or Path(os.environ.get("PATCHSET_VENV", REPO_ROOT / ".venv"))
    digest = _lock_digest(lock_file)
    stamp = venv_dir / STAMP_NAME
    if stamp.exists() and stamp.read_text().strip() == digest and venv_python(venv_dir).exists():
        return venv_python(venv_dir)

    print(f"* Building the test environment {venv_dir} from {lock_file.name} (a few minutes, once)", flush=True)
    shutil.rmtree(venv_dir, ignore_errors=True)
    _run([sys.executable, "-m", "venv", str(venv_dir)], "creating the venv")
    python = str(venv_python(venv_dir))
    _run([python, "-m", "pip", "install", "--quiet", "--no-deps", "-r", str(lock_file)], f"pip install -r {lock_file}")
    _run([python, "-m", "pip", "check"], "pip check")
    stamp.write_text(digest + "\n")
    print(f"* Test environment ready: {venv_dir}", flush=True)
    return venv_python(venv_dir)
