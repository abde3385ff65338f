"""One writer at a time for each entry of a shared cache: a ``treelock`` in ``<cache>/.locks/<entry>/lock``. A run
that finds an entry held waits for it (up to ``$PATCHSET_CACHE_WAIT`` s) or ends at once (``TreeLocked``)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from patchset.plumbing import tempdirs, treelock
from patchset.plumbing.errors import BadInput, TreeLocked
from patchset.plumbing.ui import Console, display_path

LOCKS = ".locks"
WAIT_ENV = "PATCHSET_CACHE_WAIT"
DEFAULT_WAIT_S = 600.0
_POLL_S = 0.2


def this_command() -> str:
    """This process's command line, as the holder's record shows it (``python -m patchset ...`` for the CLI)."""
    main = Path(sys.argv[0]) if sys.argv else Path()
    if main.name == "__main__.py" and main.parent.name == "patchset":
        return "python -m patchset " + shlex.join(sys.argv[1:])
    return shlex.join(sys.argv) or f"python (pid {os.getpid()})"


def entry_for(kind: str, path: Path) -> str:
    """The entry name of the folder ``path`` (anywhere) for ``kind``: its name and a digest of where it is."""
    return f"{kind}-{path.name}-{hashlib.sha256(str(path).encode('utf-8', 'surrogateescape')).hexdigest()[:12]}"


def wait_limit(environ: Mapping[str, str]) -> float:
    """How long to wait for an entry: ``$PATCHSET_CACHE_WAIT`` seconds, default 600."""
    text = environ.get(WAIT_ENV, "").strip()
    try:
        return max(float(text), 0.0) if text else DEFAULT_WAIT_S
    except ValueError:
        raise BadInput(f"${WAIT_ENV} is {text!r}, not a number of seconds; unset it or give one, e.g. 600") from None


def _take(folder: Path, shown: str, console: Console, *, wait: bool, command: str, hint: str) -> treelock.Lock:
    deadline: float | None = None
    limit = 0.0
    while True:
        try:
            return treelock.acquire(folder, command)
        except treelock.Busy as busy:
            lock = display_path(busy.path)
            who = f"another run ({busy.holder})" if busy.holder else "another run"
            if not wait:
                raise TreeLocked(
                    f"{shown} is in use by {who}, which holds {lock}; nothing was changed. Next: wait for "
                    f"that run to end, then run again{hint}"
                ) from None
            if deadline is None:
                limit = wait_limit(os.environ)
                console.warn(
                    f"{shown} is being made by {who}; waiting for it to finish (up to {limit:.0f} s, "
                    f"${WAIT_ENV}), then using it"
                )
                deadline = time.monotonic() + limit
            elif time.monotonic() >= deadline:
                raise TreeLocked(
                    f"{shown} is still held by {who} after {limit:.0f} s of waiting ({lock}); nothing was "
                    f"changed. Next: wait for that run to end (or set ${WAIT_ENV} longer), then run again"
                ) from None
            time.sleep(_POLL_S)


@contextmanager
def hold(
    cache_root: Path,
    entry: str,
    shown: str,
    console: Console,
    *,
    wait: bool,
    sweep: Sequence[Path] = (),
    command: str | None = None,
    hint: str = "",
) -> Iterator[None]:
    """Hold the cache entry ``entry`` while the block runs, after sweeping ``sweep`` of what dead processes left."""
    made = [cache_root / LOCKS] + ([] if cache_root.exists() else [cache_root])
    try:
        lock: treelock.Lock | None = _take(
            cache_root / LOCKS / entry, shown, console, wait=wait, command=command or this_command(), hint=hint
        )
    except OSError as exc:
        console.warn(f"could not lock {shown} ({exc.strerror or exc}); using it without the lock")
        lock = None
    try:
        if lock is not None and lock.stale is not None:
            console.warn(f"{shown}: taking over from a run that is gone ({lock.stale})")
        for place in sweep:
            for path in tempdirs.sweep(place):
                console.step(f"Removed {display_path(path)}, left by a run that was killed")
        yield
    finally:
        if lock is not None:
            lock.release()
        for path in made:  # no lock folder stays, nor a cache folder made for nothing
            with contextlib.suppress(OSError):  # not empty, or another run's
                path.rmdir()
