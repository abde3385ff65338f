"""SIGINT, SIGTERM and SIGHUP while a command runs: turned into one exception, held back while the tree changes.

``handled()`` installs handlers for the duration of a command. A signal outside a critical section raises
``Interrupted`` at once (a ``KeyboardInterrupt``, so that no ``except Exception`` swallows it), which unwinds into
the same rollback as any failure. Inside ``Guard.critical()`` (one ``git apply``, one rollback) the signal is only
recorded; ``Guard.check()`` raises it as soon as the step is over, so a patch is never cut off half-written and
a rollback is never cut short. The git children run in their own session (see ``gitops.run_git``), so a Ctrl-C at
the terminal reaches this process only.
"""

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
        self.outcome = "nothing was changed"

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


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
