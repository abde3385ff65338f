"""Command line: ``python -m patchset doctor [--json] -- python3 -m verl.trainer.main_ppo k=v ...``
(``scripts/doctor.sh``)."""

from __future__ import annotations

import argparse
import json
import textwrap

from patchset.cli.options import workspace_from
from patchset.cli.startup import Run
from patchset.doctor.assess import Row, as_json, assess, release
from patchset.doctor.compose import EXIT_DOES_NOT_COMPOSE, compose, read_launch, verl_root
from patchset.plumbing import signals
from patchset.plumbing.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_OK
from patchset.plumbing.ui import Console

EXIT_SPLIT_DEPENDENT = 6

EXIT_CODES = f"""\
exit status:
  {EXIT_OK}  no loss of the run depends on the split, or each that does is fixed in this environment
  {EXIT_BAD_INPUT}  bad input: usage; not a verl trainer launch; verl not importable by this Python
  {EXIT_SPLIT_DEPENDENT}  the run still depends on the split: a loss it uses is not fixed here, or not covered by
     the fix at these settings (the table's NOT FIXED / NOT COVERED rows)
  {EXIT_DOES_NOT_COMPOSE}  the config does not compose: the trainer's own (Hydra's) error, in one line
  {EXIT_INTERNAL}  internal error, a bug: please report it
"""

COLUMNS = ("loss", "patch", "effect of the split at these settings", "fix here")


def table(rows: list[Row]) -> str:
    """One line a loss, each column padded to its widest cell."""
    cells = [COLUMNS] + [(row.loss, row.patch or "-", row.effect, row.fix) for row in rows]
    widths = [max(len(line[column]) for line in cells) for column in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in cells
    )


def cmd_doctor(args: argparse.Namespace, console: Console, guard: signals.Guard) -> int:
    """``doctor``: compose the launch's config, assess each loss it uses, print the table (or JSON)."""
    workspace = workspace_from(args)
    launch = read_launch(args.launch)
    root = verl_root()
    config = compose(launch, root)
    rows, notes = assess(config, launch.config_name, workspace.patches_dir, root)
    head = {"verl": release(root), "verl_root": str(root), "entry_point": launch.module, "config": launch.config_name}
    if args.json:
        print(json.dumps(as_json(rows, notes, head), indent=1))
    else:
        print(f"verl {head['verl']} at {root}; {launch.module} ({launch.config_name})")
        print(table(rows))
        for note in notes:
            print(f"note: {note}")
    return EXIT_SPLIT_DEPENDENT if any(row.uncovered for row in rows) else EXIT_OK


def register(commands: argparse._SubParsersAction, name: str, help: str) -> Run:
    """Add ``doctor``'s parser to the top-level ``commands``."""
    doctor = commands.add_parser(
        name,
        help=help,
        description=textwrap.dedent(
            """\
            Is my run affected? Give the launch line after '--': doctor composes its config with Hydra, from the
            verl this Python imports, starts nothing, and says for each loss the run uses whether it depends on
            the micro-batch split, by how much at these settings, and whether the fix acts here (a patched tree
            or wheel, by content; the overlay; or upstream)."""
        ),
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    doctor.add_argument("--json", action="store_true", help="one JSON object, for CI")
    doctor.add_argument("--patches-dir", help="folder holding the series folders (default: the repository's patches/)")
    doctor.add_argument(
        "launch", nargs=argparse.REMAINDER, help="the launch line: python3 -m verl.trainer.main_ppo ..."
    )
    return Run(cmd_doctor, handle_signals=False)
