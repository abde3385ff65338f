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


def run_step(command: list[str], step: str) -> str:
    """Run one step of building an environment, returning its output; ``VenvError`` naming the step, with the tail of
    its output."""
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        tail = "\n".join(result.stdout.splitlines()[-20:])
        raise VenvError(f"{step} failed (exit {result.returncode}):\n{tail}")
    return result.stdout


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


# uv installs the lock in about 10 s where pip takes 80; it lives in the venv's folder, outside site-packages, which
# holds exactly the locked set
UV = "uv==0.13.10"
# pip's settings that say where packages come from, as uv's options: uv reads no pip configuration, and where pip
# finds the CPU build of torch in a local folder (find-links), uv must look there too, or fetch a CUDA build
UV_OPTIONS = {"find-links": "--find-links", "index-url": "--index-url", "extra-index-url": "--extra-index-url"}
PIP_PRECEDENCE = (":env:", "install", "global")  # PIP_* variables override the config files' sections


def pip_sources(python: str) -> list[str]:
    """``python``'s pip settings of ``UV_OPTIONS`` (from `pip config list`, each from the source pip would use), as uv
    options; uv then weighs every index as pip does."""
    listed = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    found: dict[str, dict[str, str]] = {}
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        section, _, name = key.rpartition(".")
        if name in UV_OPTIONS and section in PIP_PRECEDENCE:
            found.setdefault(name, {})[section] = value.strip("'\"")
    options = ["--index-strategy", "unsafe-best-match"]
    for name, by_section in found.items():
        value = next(by_section[section] for section in PIP_PRECEDENCE if section in by_section)
        options += [item for link in value.split() for item in (UV_OPTIONS[name], link)]
    return options


def _install_lock(python: str, venv_dir: Path) -> None:
    """Install the lock with uv, printing its summary lines (not one line per package)."""
    started = time.monotonic()
    tool = venv_dir / "uv"
    run_step([python, "-m", "pip", "install", "--quiet", "--target", str(tool), UV], f"installing {UV}")
    command = [str(tool / "bin" / "uv"), "pip", "install", "--python", python, "--no-deps", *pip_sources(python)]
    output = run_step([*command, "-r", str(LOCK_FILE)], f"uv pip install -r {LOCK_FILE}")
    for line in output.splitlines():
        if line.strip() and not line.startswith((" + ", " - ")):
            print(f"  uv: {line.strip()}", flush=True)
    print(f"  installed in {time.monotonic() - started:.0f} s", flush=True)


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
    _install_lock(python, venv_dir)
    _byte_compile(python)
    run_step([python, "-m", "pip", "check"], "pip check")
    stamp.write_text(digest + "\n")
    print(f"* Test environment ready: {venv_dir}", flush=True)
    return venv_python
