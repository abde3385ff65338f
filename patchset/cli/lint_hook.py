"""Command line: ``python -m patchset lint-hook UPSTREAM ID [FILES...]``, one lint hook of this project's own.

pre-commit runs it, in the tree under test, for each hook of an upstream's lint gates that is a check written here
(``patchset.upstreams.lint_hooks``: the config export-pr generates names this command line); it prints one line per
problem found in FILES.
"""

from __future__ import annotations

import argparse

from patchset.cli.exits import INTERNAL_HELP
from patchset.cli.startup import Run, add_parser
from patchset.plumbing import signals
from patchset.plumbing.errors import EXIT_BAD_INPUT, EXIT_OK, BadInput
from patchset.plumbing.ui import Console
from patchset.upstreams.lint_hooks import Check
from patchset.upstreams.registry import UPSTREAMS

EXIT_PROBLEMS = 1
EXIT_CODES = f"""\
exit status:
  {EXIT_OK}  every file passes the check
  {EXIT_PROBLEMS}  a file does not: one line each names the file and what is wrong
  {EXIT_BAD_INPUT}  usage: an upstream or hook that is not one of this project's own checks
{INTERNAL_HELP}"""


def register(commands: argparse._SubParsersAction, name: str, help: str) -> Run:
    checks: dict[str, dict[str, Check]] = {}  # {upstream: {hook id: its check}}, for the hooks written here
    for key, upstream in UPSTREAMS.items():
        if own := {hook.id: hook.check for hook in upstream.lint_hooks if hook.check is not None}:
            checks[key] = own
    description = __doc__.split("\n\n", 1)[1] if __doc__ else None
    parser = add_parser(commands, name, help, description=description, epilog=EXIT_CODES)
    ids = sorted({hook_id for hooks in checks.values() for hook_id in hooks})
    parser.add_argument("upstream", choices=tuple(checks), help="whose lint gates the hook is one of")
    parser.add_argument("hook", metavar="ID", help=f"the hook's id: {', '.join(ids)}")
    parser.add_argument("files", metavar="FILES", nargs="*", help="the files to check, relative to the tree")

    def run(args: argparse.Namespace, console: Console, guard: signals.Guard) -> int:
        own = checks[args.upstream]
        if args.hook not in own:
            known = ", ".join(own)
            raise BadInput(f"argument ID: {args.upstream} has no hook {args.hook!r} of its own (choose from {known})")
        problems = own[args.hook](args.files)
        for problem in problems:
            print(problem)
        return EXIT_PROBLEMS if problems else EXIT_OK

    return Run(run, handle_signals=False, interrupted="")
