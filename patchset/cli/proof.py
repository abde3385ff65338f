"""Command line: ``python -m patchset proof`` (``scripts/gpu_proof.py``); the work is `patchset.proof.prove`."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

from patchset.cli.startup import Run, add_parser
from patchset.plumbing.errors import EXIT_TIMED_OUT, BadInput, needs_module
from patchset.plumbing.signals import Guard
from patchset.plumbing.ui import Console
from patchset.proof.cases import CASES, MICRO_BATCHES, MODELS, PRECISIONS, SIDES, SPLIT_KINDS, Settings
from patchset.proof.prove import ULYSSES_SDPA, Request, choices, clip_values, prove, sequence_parallel
from patchset.proof.trajectory import CLIP_OFF
from patchset.proof.trees import DefaultTrees, Source, source


def _request(args: argparse.Namespace, defaults: DefaultTrees) -> Request:
    """The parsed line as a `Request`; ``BadInput`` names the first flag whose value cannot be used."""
    sides = choices(args.sides, SIDES, "sides")
    named = choices(args.cases, list(CASES), "cases") if args.cases else None
    sources: dict[str, list[Source]] = {}
    for side in sides:
        verl = source("verl", side, getattr(args, side), explicit=True, defaults=defaults)
        trinity_value = getattr(args, f"trinity_{side}")
        explicit = trinity_value is not None or (named is not None and "trinity" in named)
        trinity = source("trinity", side, trinity_value, explicit=explicit, defaults=defaults)
        sources[side] = [found for found in (verl, trinity) if found is not None]
    with_trinity = all(any(s.package == "trinity" for s in sources[side]) for side in sides)
    cases = [name for name in CASES if (named is None or name in named) and (with_trinity or name != "trinity")]
    try:
        counts = sorted({int(item) for item in args.micro_batches.split(",") if item.strip()})
    except ValueError:
        counts = []
    if not counts or counts[0] != 1 or len(counts) < 2:
        raise BadInput(f"--micro-batches {args.micro_batches!r}: positive integers, 1 and at least one more")
    splits = choices(args.splits, SPLIT_KINDS, "splits")
    precisions = choices(args.precision, PRECISIONS, "precision") if args.precision is not None else []
    for flag, value in (("--repeats", args.repeats), ("--steps", args.steps)):
        if value < 1:
            raise BadInput(f"{flag} {value}: at least 1")
    if args.lr is not None and not args.lr > 0:
        raise BadInput(f"--lr {args.lr}: a positive learning rate")
    clips = clip_values(args.clip)
    sequence_parallel(args.sp, args.world_size, MODELS[args.model], args.attention)
    if args.plot is not None and importlib.util.find_spec("matplotlib") is None:
        raise BadInput(f"--plot {args.plot}: matplotlib is not installed in this Python ({sys.executable})")
    settings = Settings(
        cases=tuple(cases),
        precisions=tuple(precisions),
        model=args.model,
        model_path=Path(),
        world_size=args.world_size or 0,
        device=args.device,
        attention=args.attention or "",
        micro_batches=tuple(counts),
        splits=tuple(splits),
        repeats=args.repeats,
        steps=args.steps,
        clips=clips,
        lr=args.lr,
        sp=args.sp,
        timeout=args.timeout,  # the ranks' limit too: the side's process ends them past it
    )
    trinity_left_out = "trinity" not in cases and args.cases is None
    return Request(sources, trinity_left_out, settings, args.json, args.plot)


def register(commands: argparse._SubParsersAction, name: str, help: str) -> Run:
    defaults = DefaultTrees.from_workspace(os.environ)
    pins = defaults.pins
    parser = add_parser(
        commands,
        name,
        help,
        prog="scripts/gpu_proof.py",
        description="The proof on your own GPUs: verl's real FSDP2 engine trains each fixed loss, vanilla against "
        "patched. Measures the vanilla and the patched trees, each in its own process.",
        epilog=(
            "cases:\n"
            + "".join(f"  {case.name:<13} {case.title}\n" for case in CASES.values())
            + "\nmodels (random Qwen2 built in code, nothing downloaded):\n"
            + "".join(
                f"  {m.name:<6} {m.shape.num_hidden_layers} layers, hidden {m.shape.hidden_size}, "
                f"vocab {m.shape.vocab_size}, {m.sequences} sequences of up to {m.prompt_len + m.response_len} tokens\n"
                for m in MODELS.values()
            )
            + "\nexpected: on the patched tree every case's grad_norm is the same at every split (fp32 within 1e-4,\n"
            "bf16 within 2**-8 = 3.9e-3 of one micro-batch's); on the vanilla tree critic, geo_mean and trinity\n"
            "grow about K times with K micro-batches, distillation differs, ppo does not change (already right).\n"
            "A tree is a source checkout (put first on the path) or 'installed' (the packages this python imports).\n"
            "Trees default to the ones scripts/apply.sh --no-test makes under $PATCHSET_CACHE (.cache).\n\n"
            "training runs (--steps N, N > 1): each case trains N AdamW steps (verl's optimizer, its defaults\n"
            "but --lr) from the same start on the same pool of mini-batches of different lengths, once per split:\n"
            "K=1 (the reference), K=1 with each rank's rows shuffled (the floor reassociation alone makes), fixed K\n"
            "and dynamic K (one token budget for the run, so K changes from step to step), with each --clip.\n"
            "Printed: each run's final distance from K=1 relative to how far K=1 moved, the share of clipped steps,\n"
            "PASS/FAIL: patched within 10x the shuffled floor; vanilla, with clipping, beyond it (without: reported\n"
            "only). --repeats does not apply: every step of a run is timed.\n\n"
            "examples:\n"
            "  scripts/apply.sh --no-test && python scripts/gpu_proof.py              # every GPU, fp32 and bf16\n"
            f"  python scripts/gpu_proof.py --vanilla ~/src/{pins['verl'].dirname} --patched installed"
            " --cases critic,ppo\n"
            "  python scripts/gpu_proof.py --model large --precision bf16 --world-size 8\n"
            "  python scripts/gpu_proof.py --world-size 4 --sp 2 --cases critic,trinity    # Ulysses: 2 groups of 2\n"
            "  python scripts/gpu_proof.py --steps 20 --cases critic,geo_mean,trinity --plot runs.png\n\n"
            "exit codes: 0 every case as expected; 1 a case failed or a run broke; 2 bad input; "
            f"{EXIT_TIMED_OUT} a tree's run hung past --timeout (ended; its processes' stacks printed)"
        ),
    )
    parser.add_argument("--vanilla", "--verl-vanilla", help=f"vanilla verl {pins['verl'].version} tree, or 'installed'")
    parser.add_argument("--patched", "--verl-patched", help="patched verl tree, or 'installed'")
    parser.add_argument("--trinity-vanilla", help=f"vanilla Trinity-RFT {pins['trinity'].version} tree, or 'installed'")
    parser.add_argument("--trinity-patched", help="patched Trinity-RFT tree, or 'installed'")
    parser.add_argument("--sides", default="vanilla,patched", help="trees to measure (default %(default)s)")
    parser.add_argument(
        "--cases", help=f"comma-separated, from {','.join(CASES)} (default: all; trinity when its trees are there)"
    )
    parser.add_argument("--precision", help="fp32, bf16 or both (default: fp32,bf16 on GPU, fp32 on CPU)")
    parser.add_argument("--model", default="tiny", choices=sorted(MODELS), help="model preset (default %(default)s)")
    parser.add_argument(
        "--micro-batches", default=",".join(map(str, MICRO_BATCHES)), help="per rank, with 1 (default %(default)s)"
    )
    parser.add_argument("--splits", default=",".join(SPLIT_KINDS), help="fixed, dynamic or both (default %(default)s)")
    parser.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"), help="default: cuda if seen")
    parser.add_argument("--world-size", type=int, help="ranks (default: every GPU torch sees; 1 on CPU)")
    parser.add_argument(
        "--sp",
        type=int,
        default=1,
        help="Ulysses sequence-parallel size (verl's ulysses_sequence_parallel_size): the ranks form world-size / SP "
        "data-parallel groups of SP ranks that share their rows and split each sequence; the world size must divide "
        "by it, and the model's attention heads too (default %(default)s)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed steps per split (default %(default)s)")
    parser.add_argument(
        "--attention",
        help=f"the model's attn_implementation (default: sdpa; with --sp above 1, {ULYSSES_SDPA}: verl's Ulysses "
        "all-to-all around a pure-torch varlen kernel; flash_attention_2 runs in bf16 only)",
    )
    parser.add_argument(
        "--timeout", type=float, default=3600, help="seconds one tree's run may take (default %(default)s)"
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=1,
        help="optimizer steps per run; above 1, each split trains that many steps (see 'training runs' below) "
        "(default %(default)s: the single-step proof)",
    )
    parser.add_argument(
        "--clip", default=f"1.0,{CLIP_OFF}", help="with --steps: clip_grad values, or 'off' (default %(default)s)"
    )
    parser.add_argument(
        "--lr", type=float, help="with --steps: the learning rate (default: verl's FSDPOptimizerConfig default)"
    )
    parser.add_argument("--json", type=Path, help="also write every measurement and the machine to this file")
    parser.add_argument(
        "--plot",
        type=Path,
        help="also draw grad_norm / K=1's against K to this PNG (matplotlib); with --steps, loss and grad_norm "
        "per step",
    )

    def run(args: argparse.Namespace, console: Console, guard: Guard) -> int:
        request = _request(args, defaults)
        needs_module("torch", "the proof")
        return prove(request, defaults)

    return Run(run, interrupted="")
