"""The one error these commands add to `patchset.plumbing.errors` (whose ``BadInput`` they raise for bad input)."""

from __future__ import annotations

import subprocess

from patchset.plumbing.errors import EXIT_TESTS_FAILED, PatchsetError


class ChildFailed(PatchsetError):
    """A process the command started failed: the message names it and ends with what it printed; exit code 1."""

    exit_code = EXIT_TESTS_FAILED


# for `patchset.cli.startup.run_command`: a command run with ``check=True`` that failed is the same failure
CHILD_ERRORS = {subprocess.CalledProcessError: EXIT_TESTS_FAILED}
