"""One run at a time per folder: ``<folder>/lock`` held with ``flock``, which the kernel frees however its holder ends.

The file records the holder (pid, start, command) for a second run to name. A file found free with a record in it was
left by a killed run: it is taken over (``Lock.stale``). Releasing removes the file, and the folder when empty."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

LOCK = "lock"


@dataclass(frozen=True)
class Holder:
    """Who holds (or held) a lock: the process id, when it started (local time, ISO 8601) and its command."""

    pid: int
    started: str
    command: str

    def __str__(self) -> str:
        return f"pid {self.pid}, started {self.started}: {self.command}"


class Busy(Exception):
    """The lock is held by a live process; ``holder`` is its record (None when it has not written it yet)."""

    def __init__(self, path: Path, holder: Holder | None) -> None:
        super().__init__(f"{path} is held by {holder or 'another process'}")
        self.path, self.holder = path, holder


def _holder(text: str) -> Holder | None:
    try:
        data = json.loads(text)
        return Holder(int(data["pid"]), str(data["started"]), str(data["command"]))
    except (ValueError, KeyError, TypeError):
        return None


def _read(fd: int) -> str:
    return os.pread(fd, 65536, 0).decode("utf-8", "replace")


@dataclass
class Lock:
    """A lock this process holds, until ``release()``; ``stale``: the record of the killed run it was taken from."""

    path: Path
    stale: Holder | None
    _fd: int

    def release(self) -> None:
        """Remove the lock file, then let go of it (a waiter on the old file sees it gone), then the folder if empty."""
        if self._fd < 0:
            return
        self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = -1
        with contextlib.suppress(OSError):  # not empty: another run's lock, or what the caller keeps there
            self.path.parent.rmdir()


def busy(folder: Path) -> Busy | None:
    """Whether a live process holds the lock in ``folder``, without taking it or making anything: a shared flock that
    an exclusive holder refuses, let go at once. For a caller that must read the tree before it may lock it."""
    try:
        fd = os.open(folder / LOCK, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # no lock file: nobody holds it
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return Busy(folder / LOCK, _holder(_read(fd)))
    finally:
        os.close(fd)  # closing lets go of a shared lock taken above
    return None


def acquire(folder: Path, command: str) -> Lock:
    """Take the lock in ``folder`` (made if need be) for ``command``; raise ``Busy`` when a live process holds it,
    ``OSError`` when it cannot be made (a read-only git directory)."""
    path = folder / LOCK
    for _ in range(100):  # each retry: the holder let go between our open and our flock, or removed the folder
        try:
            folder.mkdir(parents=True, exist_ok=True)  # parents: another run may have just removed an empty .locks
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = None
            for _ in range(20):  # the holder writes its record right after taking the lock
                if (holder := _holder(_read(fd))) is not None:
                    break
                time.sleep(0.05)
            os.close(fd)
            raise Busy(path, holder) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.fstat(fd).st_ino == path.stat().st_ino
        except FileNotFoundError:
            same = False
        if not same:  # released (and removed) after we opened it: take the new one
            os.close(fd)
            continue
        stale = _holder(_read(fd))
        started = datetime.now().astimezone().isoformat(timespec="seconds")
        record = json.dumps({"pid": os.getpid(), "started": started, "command": command})
        os.ftruncate(fd, 0)
        os.pwrite(fd, record.encode("utf-8") + b"\n", 0)
        return Lock(path, stale, fd)
    raise OSError(f"could not take the lock {path}: it kept changing under this process")
