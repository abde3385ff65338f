"""Errors that end a command, each carrying the exit code the CLI returns for it."""

from __future__ import annotations

EXIT_OK = 0
EXIT_TESTS_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_DOES_NOT_APPLY = 3
EXIT_LOCKED = 4
EXIT_EARLIER_SERIES = 5  # the tree holds an earlier series of this patchset: --upgrade takes it out
EXIT_SPLIT_DEPENDENT = 6  # doctor: the run still depends on the micro-batch split
EXIT_DOES_NOT_COMPOSE = 7  # doctor: the run's config does not compose (the trainer would stop)
EXIT_INTERNAL = 70  # an unexpected error: a bug, or the system failing (sysexits' EX_SOFTWARE); never 1
EXIT_TIMED_OUT = 124  # a run that went past its time limit and was ended (as timeout(1) exits)


class PatchsetError(Exception):
    """An error to report as one ``error: ...`` line; ``exit_code`` is what the command returns."""

    exit_code = EXIT_BAD_INPUT


class BadInput(PatchsetError):
    """Bad input: usage, not a verl/Trinity-RFT tree, unknown version, dirty tree, bad series or patch, fetch."""


class DoesNotApply(PatchsetError):
    """A patch does not apply (the tree was left as it was, unless the message says otherwise)."""

    exit_code = EXIT_DOES_NOT_APPLY


class TreeLocked(PatchsetError):
    """Another run holds a tree of this one (nothing was changed)."""

    exit_code = EXIT_LOCKED


class TimedOut(PatchsetError):
    """A run went past its time limit and was ended; the message names what hung, the limit and how to raise it."""

    exit_code = EXIT_TIMED_OUT


class EarlierSeries(PatchsetError):
    """A tree holds an earlier series of this patchset (nothing was changed); ``--upgrade`` replaces it."""

    exit_code = EXIT_EARLIER_SERIES


class ChildFailed(PatchsetError):
    """A process the command started failed: the message names it and ends with what it printed."""

    exit_code = EXIT_TESTS_FAILED


def needs_module(name: str, command: str) -> None:
    """Refuse, as bad input, a ``command`` that needs ``name`` where this Python cannot import it."""
    import importlib.util
    import sys

    if importlib.util.find_spec(name) is None:
        raise BadInput(
            f"{command} needs {name}, which this Python ({sys.executable}) cannot import: run it with the test "
            "environment's python (.venv/bin/python, made by scripts/test.sh)"
        )


class DoesNotCompose(PatchsetError):
    """The run's config does not compose: the trainer's own (Hydra's, Trinity's) error, in one line."""

    exit_code = EXIT_DOES_NOT_COMPOSE
