"""SIGINT, SIGTERM and SIGHUP while a command runs: one exception (``Interrupted``), held back inside
``Guard.critical()`` so that a patch or a rollback is never cut off half-way."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


class Interrupted(KeyboardInterrupt):
    """A signal ended the command; ``outcome`` says what happened to the trees (set by whoever rolled back)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name
        self.exit_code = 128 + signum
        self.outcome = "nothing was changed"


class Guard:
    """Where signals may interrupt: anywhere but inside ``critical()``; there they wait for ``check()``."""

    def __init__(self) -> None:
        self._depth = 0
        self.received: int | None = None

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
        if self._depth == 0:
            raise Interrupted(signum)

    @contextmanager
    def critical(self) -> Iterator[None]:
        """A section that a signal must not cut short; nests."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1

    def check(self) -> None:
        """Raise ``Interrupted`` for a signal held back by a critical section that has ended."""
        if self.received is not None and self._depth == 0:
            raise Interrupted(self.received)


@contextmanager
def handled() -> Iterator[Guard]:
    """A ``Guard`` with its handlers installed (main thread only; elsewhere signals keep their handlers)."""
    guard = Guard()
    if threading.current_thread() is not threading.main_thread():
        yield guard
        return
    previous = {signum: signal.signal(signum, guard.handle) for signum in SIGNALS}
    try:
        yield guard
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
