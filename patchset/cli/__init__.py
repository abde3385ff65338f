"""The command line, ``python -m patchset <command>``: one subcommand per user task.

``apply`` and ``fetch`` are parsed here; ``series``, ``export-pr`` and ``wheels`` hand the rest of the line to
their own parsers, so each keeps its ``--help`` and exit codes. ``scripts/*.sh`` are thin wrappers over these.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

# command -> the module whose ``main(argv)`` parses the rest of the line
DELEGATED = {
    "series": ("patchset.cli.maintain", "check out, refresh, export and lint the series (scripts/export.sh)"),
    "export-pr": ("patchset.export.pr_export", "one upstream branch per concern, gated (scripts/export-pr.sh)"),
    "wheels": ("patchset.wheels.build", "build patched wheels, or print an installed one's manifest"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``python -m patchset`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:
        return int(importlib.import_module(DELEGATED[argv[0]][0]).main(argv[1:]))
    from patchset.cli.apply import main as apply_main

    return apply_main(argv)
