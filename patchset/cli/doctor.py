"""Command line: ``python -m patchset doctor [--json] -- python3 -m verl.trainer.main_ppo k=v ...``, or ``doctor
[--json] [--cluster NODES,GPUS] TRINITY.yaml`` (``scripts/doctor.sh``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import textwrap
from pathlib import Path

from patchset.cli.options import workspace_from
from patchset.cli.startup import Run, add_parser
from patchset.doctor.assess import CRITIC, assess, assess_verl, imported, notes
from patchset.doctor.compose import compose, compose_trinity, read_launch
from patchset.plumbing import signals
from patchset.plumbing.errors import EXIT_BAD_INPUT, EXIT_DOES_NOT_COMPOSE, EXIT_INTERNAL, EXIT_OK, EXIT_SPLIT_DEPENDENT
from patchset.plumbing.ui import Console
from patchset.proof.report import aligned

EXIT_CODES = f"""\
exit status:
  {EXIT_OK}  no loss of the run depends on the split, or each that does is fixed in this environment
  {EXIT_BAD_INPUT}  bad input: usage; not a verl trainer launch; a Trinity YAML with no cluster and no --cluster;
     verl, trinity or what composes their config not importable by this Python
  {EXIT_SPLIT_DEPENDENT}  the run still depends on the split: a loss it uses is not fixed here, or not covered by
     the fix at these settings (the table's NOT FIXED / NOT COVERED rows)
  {EXIT_DOES_NOT_COMPOSE}  the config does not compose: the trainer's own error (Hydra's, Trinity's), in one line
  {EXIT_INTERNAL}  internal error, a bug: please report it
"""

COLUMNS = ("loss", "patch", "effect of the split at these settings", "fix here")


def _cluster(text: str) -> tuple[int, int]:
    nodes, _, gpus = text.partition(",")
    if not (nodes.isdigit() and gpus.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r}: give NODES,GPUS (e.g. 1,8)")
    return int(nodes), int(gpus)


def cmd_doctor(args: argparse.Namespace, console: Console, guard: signals.Guard) -> int:
    """``doctor``: compose the run's config, assess each loss it uses, print the table (or JSON)."""
    workspace = workspace_from(args)
    patches_dir = workspace.patches_dir
    line = [word for word in args.launch if word != "--"]
    if len(line) == 1 and line[0].endswith((".yaml", ".yml")):
        verl, trinity = (imported(key, workspace.pins) for key in ("verl", "trinity"))
        config, said = compose_trinity(Path(line[0]), args.cluster)
        rows = assess(config, trinity, patches_dir) + assess(config, verl, patches_dir, (CRITIC,))
        head = {"verl": verl.version, "trinity": trinity.version, "config": str(Path(line[0]))}
    else:
        launch, verl = read_launch(line), imported("verl", workspace.pins)
        config = compose(launch, verl.root)
        head = {"verl": verl.version, "entry_point": launch.module, "config": launch.config_name}
        rows, said = assess_verl(config, launch.module, patches_dir, verl), notes(config)
    depends = any(row.uncovered for row in rows)
    if args.json:
        losses = [dataclasses.asdict(row) for row in rows]
        print(json.dumps(dict(head, losses=losses, notes=said, depends_on_split=depends), indent=1))
    else:
        print("; ".join(f"{key} {value}" for key, value in head.items()))
        cells = [COLUMNS] + [(row.loss, row.patch or "-", row.effect, row.fix) for row in rows]
        print("\n".join(text.rstrip() for text in aligned(cells)))  # one line a loss, each column padded
        for note in said:
            print(f"note: {note}")
    return EXIT_SPLIT_DEPENDENT if depends else EXIT_OK


def register(commands: argparse._SubParsersAction, name: str, help: str) -> Run:
    description = textwrap.dedent(
        """\
        Is my run affected? Give the verl launch line after '--', or a Trinity-RFT YAML: doctor composes the
        config as the trainer does (Hydra; Trinity's load_config and validators), from the packages this Python
        imports, starts nothing (no Ray), and says for each loss the run uses whether it depends on the
        micro-batch split, by how much at these settings, and whether the fix acts here (a patched tree or
        wheel, by content; the overlay; or upstream). The series is the one that targets the imported release
        (verl 0.7.1: verl-0.7, whose legacy workers it tells apart; Trinity beside it: the legacy path)."""
    )
    doctor = add_parser(commands, name, help, description=description, epilog=EXIT_CODES)
    doctor.add_argument("--json", action="store_true", help="one JSON object, for CI")
    doctor.add_argument(
        "--cluster", metavar="NODES,GPUS", type=_cluster, help="a Trinity YAML's cluster, where it sets none"
    )
    doctor.add_argument("--patches-dir", help="folder holding the series folders (default: the repository's patches/)")
    doctor.add_argument(
        "launch",
        nargs=argparse.REMAINDER,
        help="the verl launch line (python3 -m verl.trainer.main_ppo ...), or a Trinity YAML",
    )
    return Run(cmd_doctor, handle_signals=False)
