"""One place that turns the tooling's errors into the one-line ``error: ...`` and the documented exit status,
so that every command (apply, maintain, export-pr, build-wheels) reports a failure the same way."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping

from patchset.plumbing import gitops, signals
from patchset.plumbing.errors import EXIT_BAD_INPUT, PatchsetError

EXIT_INTERRUPTED = 130  # Ctrl-C outside the main thread, where no signal handler is installed


def run_reporting_errors(
    call: Callable[[], int],
    *,
    interrupted: str | None = None,
    other_errors: Mapping[type[Exception], int] | None = None,
) -> int:
    """Return ``call()``, or print its error on one line and return that error's exit status.

    ``interrupted`` says what an interruption left behind (default: what the rollback reported, ``outcome``; an
    empty string: nothing is said); ``other_errors`` maps further exception types to their exit status."""
    extra = dict(other_errors or {})
    try:
        return call()
    except PatchsetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except gitops.GitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except signals.Interrupted as exc:  # every tree being changed was restored before this arrives here
        outcome = exc.outcome if interrupted is None else interrupted
        print(f"error: interrupted by {exc.name}{'; ' + outcome if outcome else ''}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        outcome = "every tree being changed was restored" if interrupted is None else interrupted
        print(f"error: interrupted{'; ' + outcome if outcome else ''}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except tuple(extra) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return next(code for kind, code in extra.items() if isinstance(exc, kind))
