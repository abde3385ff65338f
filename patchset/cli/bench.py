"""Command line: ``python -m patchset bench``, what the fix costs; the work is `patchset.bench`."""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

from patchset.bench import loss_call
from patchset.cli.startup import Run
from patchset.plumbing.errors import EXIT_TESTS_FAILED, BadInput, needs_module
from patchset.plumbing.signals import Guard
from patchset.plumbing.ui import Console
from patchset.proof.cases import SIDES
from patchset.proof.trees import DefaultTrees


def _startup(overlay_python: Path) -> None:
    from patchset.bench import startup

    if not overlay_python.exists():
        raise BadInput(f"no python at {overlay_python}")
    print("* overlay start-up cost (median wall time of a fresh process):")
    print(startup.report(startup.measure(overlay_python)), flush=True)


def _run(args: argparse.Namespace, console: Console, guard: Guard) -> int:
    if args.startup is not None:
        _startup(args.startup)
        return 0
    needs_module("torch", "the benchmark")
    if args.overlay_python is not None:
        _startup(args.overlay_python)
    if args.pre_pass:
        from patchset.bench import pre_pass

        return pre_pass.run(args.verl_patched, args.blocks, args.json)
    timing = loss_call.Timing(args.blocks, args.calls_per_block, args.warmup)
    vanilla, patched = ({key: getattr(args, f"{key}_{side}") for key in ("verl", "trinity")} for side in SIDES)
    met = loss_call.run(vanilla, patched, timing, args.json)
    return 1 if args.strict and not met else 0


def register(commands: argparse._SubParsersAction, name: str, help: str) -> Run:
    parser = commands.add_parser(
        name,
        help=help,
        description="Compare one loss call of the patched and the vanilla trees: time (median over many calls, "
        "several micro-batch shapes, every loss_agg_mode) and device-to-host synchronisations, for verl's critic "
        "value_loss and Trinity's TrinityPolicyLoss, and one KL-Cov, Clip-Cov and bypass IS batch mean mini-batch "
        "(selection, loss calls). Each tree pair runs in its own child process.",
        epilog="Targets: loss-call time ratio <= 1.02, zero synchronisations added; overlays' start-up at most +10 ms "
        "over no .pth. Exit code 0 (with --strict: 1 when a target is missed); 1 a child process failed; 2 on bad "
        "input.",
    )
    trees = DefaultTrees.from_workspace(os.environ).trees  # the pins, and $PATCHSET_CACHE or .cache
    for side in ("patched", "vanilla"):
        for key, label in (("verl", "verl"), ("trinity", "Trinity-RFT")):
            tree_help = f"{side} {label} tree (default %(default)s)"
            parser.add_argument(f"--{key}-{side}", type=Path, default=trees.get((key, side)), help=tree_help)
    default = loss_call.Timing()
    parser.add_argument(
        "--blocks", type=int, default=default.blocks, help="alternating blocks per case and tree (default %(default)s)"
    )
    parser.add_argument(
        "--calls-per-block",
        type=int,
        default=default.calls_per_block,
        help="timed calls per block (default %(default)s)",
    )
    parser.add_argument(
        "--warmup", type=int, default=default.warmup, help="untimed calls per case and tree first (default %(default)s)"
    )
    parser.add_argument("--json", type=Path, help="also write the measurements to this file")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument(
        "--pre-pass",
        action="store_true",
        help="measure instead the no-grad forward the patched worker runs before a later update (verl 0004, 0005: "
        "KL-Cov, Clip-Cov, bypass IS batch mean) against the training step it precedes, on verl's FSDP2 engine with "
        "the patched verl tree (tiny and small random models, 16 sequences, 1 and 4 micro-batches; --blocks "
        "alternating calls of each)",
    )
    parser.add_argument(
        "--overlay-python",
        type=Path,
        help="also measure the overlays' start-up cost with this python of an overlay venv (see --startup)",
    )
    parser.add_argument(
        "--startup",
        type=Path,
        metavar="OVERLAY_PYTHON",
        help="measure instead what the overlays cost at interpreter start and at the first verl import, with this "
        "python of a venv with this project pip-installed: the overlay venv as installed, the same with "
        "PATCHSET_OVERLAYS=0, and a venv without patchset_overlay.pth over the same packages, taking turns; the "
        "median wall time of a fresh process of each",
    )
    return Run(_run, interrupted="", other_errors={subprocess.CalledProcessError: EXIT_TESTS_FAILED})
