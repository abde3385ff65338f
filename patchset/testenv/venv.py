"""The test environment: a `.venv` built from the pinned lock, rebuilt when the lock changes."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from patchset.plumbing.paths import REPO_ROOT

LOCK_FILE = REPO_ROOT / "requirements" / "lock.txt"
STAMP_NAME = ".patchset-lock-sha256"
# sorts before patchset_overlay.pth, so the locked packages are on sys.path when the overlay's line runs
DEPENDENCIES_PTH = "_patchset_locked_deps.pth"


class VenvError(RuntimeError):
    """The environment could not be built; the message says which step failed."""


def run_step(command: list[str], step: str) -> None:
    """Run one step of building an environment; ``VenvError`` naming the step, with the tail of its output."""
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        tail = "\n".join(result.stdout.splitlines()[-20:])
        raise VenvError(f"{step} failed (exit {result.returncode}):\n{tail}")


def purelib(python: Path) -> Path:
    """The site-packages folder of the environment of ``python``."""
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip())


def linked_venv(base_python: Path, where: Path) -> tuple[Path, Path]:
    """Make a new venv at ``where`` (no pip) that sees ``base_python``'s packages (2.2 GB) through one ``.pth`` line,
    in under a second (``venv --system-site-packages`` would expose the base interpreter's, not the venv's); its
    python and site-packages."""
    subprocess.run([str(base_python), "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    site = purelib(python)
    (site / DEPENDENCIES_PTH).write_text(f"{purelib(base_python)}\n", encoding="utf-8")
    return python, site


def _install_showing_progress(python: str, every: int = 20) -> None:
    """pip install the lock, printing a line every ``every`` packages it collects and when it starts installing,
    instead of minutes of silence; on failure, the tail of its output is in the error."""
    # pip byte-compiles on one core; `_byte_compile` does it on all of them. Compiled it must be: where
    # PYTHONDONTWRITEBYTECODE is set (as on these machines) every process would compile torch again on import
    command = [python, "-m", "pip", "install", "--no-deps", "--no-compile", "--progress-bar", "off"]
    command += ["-r", str(LOCK_FILE)]
    total = sum(1 for line in LOCK_FILE.read_text(encoding="utf-8").splitlines() if "==" in line.split("#", 1)[0])
    started = time.monotonic()
    lines: list[str] = []
    collected = 0
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as child:
        assert child.stdout is not None
        for line in child.stdout:
            lines.append(line.rstrip())
            if line.startswith(("Collecting ", "Processing ")):
                collected += 1
                if collected % every == 0 or collected == total:
                    print(
                        f"  pip: {collected}/{total} packages fetched ({time.monotonic() - started:.0f} s)", flush=True
                    )
            elif line.startswith("Installing collected packages"):
                count = len(line.partition(":")[2].split(","))
                print(f"  pip: installing {count} packages ({time.monotonic() - started:.0f} s)", flush=True)
    if child.returncode != 0:
        tail = "\n".join(lines[-20:])
        raise VenvError(f"pip install -r {LOCK_FILE} failed (exit {child.returncode}):\n{tail}")
    print(f"  pip: done in {time.monotonic() - started:.0f} s", flush=True)


# the packages' own test suites (pandas/tests, sympy's, numpy's, torch.testing._internal): 13 % of the venv's sources,
# never imported here; left to compile on import, should anything import them
NOT_COMPILED = r"[/\\](tests?|testing[/\\]_internal)[/\\]"


def _byte_compile(python: str) -> None:
    """Byte-compile the venv's site-packages on every core, but for the packages' own test suites
    (``NOT_COMPILED``). Files that do not compile are left as pip leaves them (some packages ship deliberately
    invalid sources), so the exit status is not checked."""
    started = time.monotonic()
    print("  byte-compiling the installed packages on every core", flush=True)
    subprocess.run(
        [python, "-m", "compileall", "-q", "-j", "0", "-x", NOT_COMPILED, str(purelib(Path(python)))],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    print(f"  compiled in {time.monotonic() - started:.0f} s", flush=True)


def ensure_venv() -> Path:
    """The python of a venv that holds exactly the locked set, built first if needed. The venv records the sha256 of
    the lock it was built from, written only once `pip check` has passed: a changed lock, or a build that was
    interrupted, rebuilds it from scratch, so a stale or half-made environment can never pass for the pinned one."""
    venv_dir = Path(os.environ.get("PATCHSET_VENV", REPO_ROOT / ".venv"))
    digest = hashlib.sha256(LOCK_FILE.read_bytes()).hexdigest()
    stamp, venv_python = venv_dir / STAMP_NAME, venv_dir / "bin" / "python"
    if stamp.exists() and stamp.read_text().strip() == digest and venv_python.exists():
        return venv_python

    print(f"* Building the test environment {venv_dir} from {LOCK_FILE.name} (a few minutes, once)", flush=True)
    shutil.rmtree(venv_dir, ignore_errors=True)
    run_step([sys.executable, "-m", "venv", str(venv_dir)], "creating the venv")
    python = str(venv_python)
    _install_showing_progress(python)
    _byte_compile(python)
    run_step([python, "-m", "pip", "check"], "pip check")
    stamp.write_text(digest + "\n")
    print(f"* Test environment ready: {venv_dir}", flush=True)
    return venv_python
