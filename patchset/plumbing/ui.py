"""Progress and warning output in the user's words."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Console:
    """Progress (``* ...``) and summaries to stdout, warnings to stderr, looked up at each call (pytest's capsys)."""

    quiet: bool = False

    def step(self, message: str) -> None:
        """One progress line, ``* message``; suppressed by --quiet."""
        if not self.quiet:
            print(f"* {message}", file=sys.stdout, flush=True)

    def summary(self, message: str) -> None:
        """A result line; shown even with --quiet."""
        print(message, file=sys.stdout, flush=True)

    def warn(self, message: str) -> None:
        print(f"warning: {message}", file=sys.stderr, flush=True)


def display_path(path: Path) -> str:
    """``path`` relative to the current directory when it lies below it, else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve())) or "."
    except ValueError:
        return str(path)
