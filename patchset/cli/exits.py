"""One place that turns the tooling's errors into one ``error: ...`` line and the documented exit status.

An error nobody foresaw (a bug, a full disk) says what failed and where, with its own status, ``EXIT_INTERNAL``, so
that it is never taken for "the tests failed"; ``PATCHSET_TRACEBACK=1`` shows the traceback instead."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable, Mapping

from patchset.plumbing import gitops, signals
from patchset.plumbing.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_LOCKED, PatchsetError

EXIT_INTERRUPTED = 130  # Ctrl-C outside the main thread, where no signal handler is installed
TRACEBACK_ENV = "PATCHSET_TRACEBACK"
# lines of every command's exit codes in --help: a pinned checkout waited for too long, and an internal error
CACHE_WAIT_HELP = f"""\
  {EXIT_LOCKED}  another run kept a pinned release in the cache busy past $PATCHSET_CACHE_WAIT seconds (default 600;
     the message names it, its pid and command); nothing was changed
"""
INTERNAL_HELP = f"""\
  {EXIT_INTERNAL}  internal error, a bug or a failing system (a full disk): one line says what failed and where
     ({TRACEBACK_ENV}=1 shows the traceback); please report it
"""
_PROJECT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _where(exc: BaseException) -> str:
    """``function (file:line)`` of the innermost frame of this project's code that the error went through."""
    frames = traceback.extract_tb(exc.__traceback__)  # never empty: it holds the frame that caught the error
    ours = [frame for frame in frames if os.path.abspath(frame.filename).startswith(_PROJECT + os.sep)] or frames
    frame = ours[-1]
    return f"{frame.name} ({os.path.relpath(os.path.abspath(frame.filename), _PROJECT)}:{frame.lineno})"


def run_reporting_errors(
    call: Callable[[], int],
    *,
    interrupted: str | Callable[[], str | None] | None = None,
    other_errors: Mapping[type[Exception], int] | None = None,
) -> int:
    """Return ``call()``, or print its error on one line and return its exit status. ``interrupted``: what an
    interruption left behind (None: what the rollback reported; "": nothing), or a callable giving it."""
    extra = other_errors if other_errors is not None else {}
    try:
        return call()
    except (PatchsetError, gitops.GitError, *extra) as exc:  # a PatchsetError carries its own status
        print(f"error: {exc}", file=sys.stderr)
        if isinstance(exc, PatchsetError):
            return exc.exit_code
        codes = {gitops.GitError: EXIT_BAD_INPUT, **extra}
        return next(code for kind, code in codes.items() if isinstance(exc, kind))
    except KeyboardInterrupt as exc:  # every tree being changed was restored before this arrives here
        if isinstance(exc, signals.Interrupted):
            what, status, outcome = f"interrupted by {exc.name}", exc.exit_code, exc.outcome
        else:
            what, status, outcome = "interrupted", EXIT_INTERRUPTED, "every tree being changed was restored"
        if (said := interrupted() if callable(interrupted) else interrupted) is not None:
            outcome = said
        print(f"error: {what}{'; ' + outcome if outcome else ''}", file=sys.stderr)
        return status
    except Exception as exc:  # nobody foresaw it: one line says what failed and where (and the traceback, if asked)
        if os.environ.get(TRACEBACK_ENV):
            traceback.print_exception(exc)
        detail = " ".join(str(exc).split())[:500] or "(no message)"  # one line, whatever the error carried
        print(
            f"error: internal error in {_where(exc)}: {type(exc).__name__}: {detail}. A bug or a failing system, not a "
            f"test result; please report it with the command line ({TRACEBACK_ENV}=1 shows the traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
