"""The proof on your own GPUs: verl's real FSDP2 engine trains each fixed loss, vanilla against patched.

For every case (verl's critic ``value_loss``, verl's GRPO actor ``ppo_loss``, GMPO ``geo_mean``, verl's on-policy
distillation loss, Trinity-RFT's ``TrinityPolicyLoss``) and precision (fp32; bf16 mixed precision with fp32
reduction), each tree runs complete ``train_batch`` steps of verl 0.8's FSDP2 engine on the same mini-batch cut into
1, 2 and 4 micro-batches per rank (fixed size and by token budget) and records the grad_norm; the script prints it
relative to one micro-batch, a PASS/FAIL line per case and tree, and the step time patched / vanilla.

The model is a random Qwen2 built from a config in code (``--model tiny``: 2 layers; ``large``: 8 layers, hidden
1024, vocab 32000, 64 sequences of up to 980 tokens): nothing is downloaded. Each tree runs in a process of its own
(``scripts/gpuproof/side.py``), one rank per GPU (NCCL; FSDP over every GPU given, so data parallelism is covered;
``--sp N`` makes groups of N ranks that share their rows and split each sequence, verl's Ulysses), and every rank
checks that verl and Trinity came from the tree claimed. Without a GPU it runs on CPU, on gloo, in fp32. Usage and
exit codes: ``--help``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

SCRIPTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = SCRIPTS_DIR.parent
INSTALLED = "installed"
sys.path.insert(0, str(SCRIPTS_DIR))
if str(REPO_ROOT) not in sys.path:
    sys.path.append(str(REPO_ROOT))  # patchset (the pins); after the installed packages

from gpuproof.cases import CASES, MICRO_BATCHES, MODELS, PRECISIONS, SIDES, SPLIT_KINDS, Model  # noqa: E402
from gpuproof.report import step_time_lines, table, tolerance_note, verdict_lines  # noqa: E402
from gpuproof.trajectory import (  # noqa: E402
    CLIP_OFF,
    Run,
    TrajectoryVerdict,
    judge_trajectories,
    trajectory_table,
    trajectory_verdict_lines,
)
from gpuproof.verdict import Measurement, Verdict, judge  # noqa: E402

from engine_harness.adapt import ULYSSES_SDPA_ATTENTION as ULYSSES_SDPA  # noqa: E402  (imports no torch)
from patchset.plumbing.bounded import Limit, hang_report  # noqa: E402
from patchset.plumbing.errors import EXIT_TIMED_OUT  # noqa: E402
from patchset.upstreams.workspace import resolve_workspace  # noqa: E402

WORKSPACE = resolve_workspace(None, None, os.environ, REPO_ROOT)  # the pins, and $PATCHSET_CACHE or .cache
CACHE = WORKSPACE.cache.root
# the releases the proof is written for: the default verl and Trinity-RFT pins
PINS = {package: pin for package in ("verl", "trinity") if (pin := WORKSPACE.pins.default_for(package))}
DEFAULT_TREES = {
    (package, side): (WORKSPACE.cache.upstreams if side == "vanilla" else WORKSPACE.cache.patched) / pin.dirname
    for package, pin in PINS.items()
    for side in ("vanilla", "patched")
}
MARKERS = {"verl": Path("verl/version/version"), "trinity": Path("trinity/__init__.py")}


class BadInput(Exception):
    """A one-line message naming what is wrong and where; exit code 2."""


@dataclass(frozen=True)
class Source:
    """Where one side's package comes from: a tree (put first on the path) or the installed package."""

    package: str
    tree: Path | None  # None: the installed package

    def describe(self) -> str:
        return f"{self.package} from {self.tree}" if self.tree else f"{self.package} as installed"


def _source(package: str, side: str, value: str | None, explicit: bool) -> Source | None:
    """The source given for ``package`` on ``side``; None when the default tree is absent and it was not asked for."""
    if value == INSTALLED:
        return Source(package, None)
    tree = Path(value).expanduser().resolve() if value else DEFAULT_TREES[package, side]
    if not (tree / MARKERS[package]).is_file():
        if not explicit and package == "trinity":
            return None
        flag = f"--{'' if package == 'verl' else 'trinity-'}{side}"
        hint = f"no {MARKERS[package]} there" if value else "run scripts/apply.sh --no-test to make the pinned trees"
        raise BadInput(f"{flag} {tree}: not a {package} tree ({hint}); give a tree or '{INSTALLED}'")
    return Source(package, tree)


def _csv(value: str, allowed: Sequence[str], what: str) -> list[str]:
    items = [item.strip() for item in value.split(",") if item.strip()]
    unknown = [item for item in items if item not in allowed]
    if unknown or not items:
        raise BadInput(f"--{what} {value!r}: choose from {', '.join(allowed)}")
    return items


def _side_env(side: str, sources: Sequence[Source]) -> dict[str, str]:
    env = dict(os.environ)
    trees = [str(source.tree) for source in sources if source.tree is not None]
    inherited = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]  # "" would be the cwd
    env["PYTHONPATH"] = os.pathsep.join([*trees, str(SCRIPTS_DIR), *inherited])
    if side == "vanilla":
        env["PATCHSET_OVERLAYS"] = "0"  # this project's overlays, if installed here, must not fix the vanilla side
    return env


def _check_modules(side: str, sources: Sequence[Source], modules: dict[str, str]) -> list[str]:
    """Problems with where a rank's modules came from: every module under the tree claimed; an installed package's
    modules all from one package folder, outside any tree."""
    problems = []
    by_package = {source.package: source for source in sources}
    for name, file in modules.items():
        package = name.split(".", 1)[0]
        source = by_package.get(package)
        path = Path(file)
        if source is None:
            problems.append(f"{side}: {name} imported, but no {package} was given")
        elif source.tree is not None and not path.is_relative_to(source.tree):
            problems.append(f"{side}: {name} came from {path}, not from {source.tree}")
        elif source.tree is None:
            root = Path(modules[package]).parent.parent
            if not path.is_relative_to(root) or any(path.is_relative_to(tree) for tree in DEFAULT_TREES.values()):
                problems.append(f"{side}: {name} came from {path}, not from the installed {package} in {root}")
    return problems


@dataclass
class SideResult:
    """What one tree's ranks reported: rank 0's measurements and runs (``--steps``), its machine, and problems."""

    measurements: list[Measurement]
    runs: list[Run]
    environment: dict
    problems: list[str]
    hung: str = ""  # what hung, the limit and where its stacks are, when the run went past --timeout


def _measure(side: str, sources: Sequence[Source], spec: dict, workdir: Path, timeout: float) -> SideResult:
    """Run one tree's process and read what its ranks wrote."""
    spec_file, result_file, log_file = (workdir / f"{side}.{suffix}" for suffix in ("spec.json", "result.json", "log"))
    spec_file.write_text(json.dumps(spec))
    command = [sys.executable, "-m", "gpuproof.side", str(spec_file), str(result_file)]
    code: int | str
    with log_file.open("w") as log:
        # a session of its own, so that a timeout ends the ranks it started too
        process = subprocess.Popen(
            command, env=_side_env(side, sources), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            hung = hang_report(f"the {side} tree's run", Limit(timeout, "--timeout SECONDS"), process.pid, None)
            os.killpg(process.pid, signal.SIGKILL)  # what left the session's tree (a rank whose parent died) too
            process.wait()
            return SideResult([], [], {}, [hung], hung)
        except KeyboardInterrupt:
            os.killpg(process.pid, signal.SIGKILL)
            raise
    if code != 0 or not result_file.exists():
        tail = "".join(log_file.read_text(errors="replace").splitlines(keepends=True)[-30:])
        problem = f"{side}: the tree's process exited with code {code}; last lines of its output:\n{tail}"
        return SideResult([], [], {}, [problem])
    ranks = json.loads(result_file.read_text())["ranks"]
    problems = [f"{side}, rank {rank}:\n{result['error']}" for rank, result in enumerate(ranks) if "error" in result]
    for result in ranks:
        problems += _check_modules(side, sources, result.get("modules", {}))
    rows = [Measurement.from_dict(row) for row in ranks[0].get("measurements", [])]
    runs = [Run.from_dict(row) for row in ranks[0].get("trajectories", [])]
    return SideResult(rows, runs, ranks[0].get("environment", {}), problems)


def _device(requested: str, world_size: int | None) -> tuple[str, int]:
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise BadInput("--device cuda: torch sees no GPU here (torch.cuda.is_available() is False)")
    device = "cuda" if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()) else "cpu"
    available = torch.cuda.device_count() if device == "cuda" else 1
    if world_size is None:
        return device, available
    if world_size < 1 or (device == "cuda" and world_size > available):
        raise BadInput(f"--world-size {world_size}: {available} {'GPUs' if device == 'cuda' else 'or more'} here")
    return device, world_size


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/gpu_proof.py",
        description=__doc__.split("\n\n")[0] + " Measures the vanilla and the patched trees, each in its own process.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
            f"  python scripts/gpu_proof.py --vanilla ~/src/{PINS['verl'].dirname} --patched installed"
            " --cases critic,ppo\n"
            "  python scripts/gpu_proof.py --model large --precision bf16 --world-size 8\n"
            "  python scripts/gpu_proof.py --world-size 4 --sp 2 --cases critic,trinity    # Ulysses: 2 groups of 2\n"
            "  python scripts/gpu_proof.py --steps 20 --cases critic,geo_mean,trinity --plot runs.png\n\n"
            "exit codes: 0 every case as expected; 1 a case failed or a run broke; 2 bad input; "
            f"{EXIT_TIMED_OUT} a tree's run hung past --timeout (ended; its processes' stacks printed)"
        ),
    )
    parser.add_argument("--vanilla", "--verl-vanilla", help=f"vanilla verl {PINS['verl'].version} tree, or 'installed'")
    parser.add_argument("--patched", "--verl-patched", help="patched verl tree, or 'installed'")
    parser.add_argument("--trinity-vanilla", help=f"vanilla Trinity-RFT {PINS['trinity'].version} tree, or 'installed'")
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
    return parser


def _clips(value: str) -> list[float | None]:
    """``--clip``: each a positive max norm, or 'off' (None)."""
    clips: list[float | None] = []
    for item in (item.strip() for item in value.split(",") if item.strip()):
        try:
            clip = None if item == CLIP_OFF else float(item)
        except ValueError:
            clip = -1.0
        if clip is not None and not clip > 0:
            raise BadInput(f"--clip {value!r}: positive numbers or '{CLIP_OFF}'")
        clips.append(clip)
    if not clips:
        raise BadInput(f"--clip {value!r}: positive numbers or '{CLIP_OFF}'")
    return list(dict.fromkeys(clips))


def _sequence_parallel(sp: int, world_size: int | None, model: Model, attention: str | None) -> str:
    """Refuse a Ulysses size the ranks or the model cannot take (before any process starts); the attention to use."""
    if sp < 1:
        raise BadInput(f"--sp {sp}: at least 1")
    if world_size is not None and world_size % sp:
        raise BadInput(f"--sp {sp}: the world size {world_size} does not divide into groups of {sp} ranks")
    heads, kv_heads = model.shape.num_attention_heads, model.shape.num_key_value_heads
    if heads % sp or (kv_heads % sp and sp % kv_heads):
        raise BadInput(
            f"--sp {sp}: model {model.name} has {heads} attention heads and {kv_heads} key-value heads; Ulysses "
            f"needs sp to divide the heads, and to divide the key-value heads or be a multiple of them"
        )
    if sp > 1 and attention == "sdpa":
        raise BadInput(
            f"--attention sdpa with --sp {sp}: verl's Ulysses all-to-all runs only in the flash-attention entry "
            f"(each rank would attend within its own slice); use {ULYSSES_SDPA} (the default with --sp) or "
            "flash_attention_2"
        )
    return attention or (ULYSSES_SDPA if sp > 1 else "sdpa")


def _plan(args: argparse.Namespace) -> tuple[dict[str, list[Source]], list[str], list[str], list[int], list[str]]:
    sides = _csv(args.sides, SIDES, "sides")
    asked = _csv(args.cases, list(CASES), "cases") if args.cases else None
    sources: dict[str, list[Source]] = {}
    for side in sides:
        verl = _source("verl", side, getattr(args, side), explicit=True)
        trinity_value = getattr(args, f"trinity_{side}")
        explicit = trinity_value is not None or (asked is not None and "trinity" in asked)
        trinity = _source("trinity", side, trinity_value, explicit=explicit)
        sources[side] = [source for source in (verl, trinity) if source is not None]
    with_trinity = all(any(s.package == "trinity" for s in sources[side]) for side in sides)
    cases = [name for name in CASES if (asked is None or name in asked) and (with_trinity or name != "trinity")]
    try:
        counts = sorted({int(item) for item in args.micro_batches.split(",") if item.strip()})
    except ValueError:
        counts = []
    if not counts or counts[0] != 1 or len(counts) < 2:
        raise BadInput(f"--micro-batches {args.micro_batches!r}: positive integers, 1 and at least one more")
    splits = _csv(args.splits, SPLIT_KINDS, "splits")
    if args.precision is not None:
        _csv(args.precision, PRECISIONS, "precision")
    if args.repeats < 1:
        raise BadInput(f"--repeats {args.repeats}: at least 1")
    if args.steps < 1:
        raise BadInput(f"--steps {args.steps}: at least 1")
    if args.lr is not None and not args.lr > 0:
        raise BadInput(f"--lr {args.lr}: a positive learning rate")
    _clips(args.clip)
    _sequence_parallel(args.sp, args.world_size, MODELS[args.model], args.attention)
    if args.plot is not None and importlib.util.find_spec("matplotlib") is None:
        raise BadInput(f"--plot {args.plot}: matplotlib is not installed in this Python ({sys.executable})")
    return sources, cases, splits, counts, sides


def _trajectory_report(
    runs: dict[str, list[Run]], cases: Sequence[str], precisions: Sequence[str], spec: dict
) -> list[TrajectoryVerdict]:
    """Print the training runs' table and verdicts; return the verdicts."""
    every = [run for side_runs in runs.values() for run in side_runs]
    optimizer = next((run.optimizer for run in every if run.optimizer), "?")
    print(
        f"\ntraining runs: {spec['steps']} steps each, {optimizer}; distance of each run's final weights from K=1's,"
        " relative to how far K=1's moved"
    )
    print("\n".join(trajectory_table(runs, cases, precisions)))
    verdicts = [
        judge_trajectories(side, CASES[case], precision, clip, side_runs)
        for side, side_runs in runs.items()
        if side_runs
        for case in cases
        for precision in precisions
        for clip in spec["clips"]
    ]
    print("\n".join(trajectory_verdict_lines(verdicts)))
    return verdicts


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        sources, cases, splits, counts, sides = _plan(args)
        device, world_size = _device(args.device, args.world_size)
        attention = _sequence_parallel(args.sp, world_size, MODELS[args.model], args.attention)
        default_precisions = "fp32,bf16" if device == "cuda" else "fp32"
        precisions = _csv(args.precision or default_precisions, PRECISIONS, "precision")
    except BadInput as error:
        print(f"gpu_proof: {error}", file=sys.stderr)
        return 2
    if "trinity" not in cases and args.cases is None:
        print("* Trinity-RFT trees not found: the trinity case is left out (give --trinity-vanilla/--trinity-patched)")
    groups = f" (Ulysses sp {args.sp}: {world_size // args.sp} data-parallel group(s))" if args.sp > 1 else ""
    print(
        f"* {len(cases)} cases x {len(precisions)} precisions, {world_size} rank(s) on {device}{groups}, model "
        f"{args.model}, micro-batches {counts} ({', '.join(splits)})"
    )
    results: dict[str, list[Measurement]] = {}
    runs: dict[str, list[Run]] = {}
    environments: dict[str, dict] = {}
    problems: list[str] = []
    hung: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gpu-proof-") as workdir:
        spec = {
            "cases": cases,
            "precisions": precisions,
            "model": args.model,
            "model_path": str(Path(workdir) / "model"),
            "world_size": world_size,
            "sp": args.sp,
            "device": device,
            "attention": attention,
            "micro_batches": counts,
            "splits": splits,
            "repeats": args.repeats,
            "steps": args.steps,
            "clips": _clips(args.clip),
            "lr": args.lr,
            "timeout": args.timeout,  # the ranks' limit too: the side's process ends them past it
        }
        for side in sides:
            print(f"* {side}: {', '.join(source.describe() for source in sources[side])}", flush=True)
            measured = _measure(side, sources[side], spec, Path(workdir), args.timeout)
            results[side], runs[side], environments[side] = measured.measurements, measured.runs, measured.environment
            problems += measured.problems
            hung += [measured.hung] if measured.hung else []
    verdicts: list[Verdict] = [
        judge(side, CASES[case], precision, results[side])
        for side in sides
        if results[side]
        for case in cases
        for precision in precisions
    ]
    environment = next((env for env in environments.values() if env), {})
    if environment:
        print(
            f"* machine: {environment['device']} x{environment['world_size']} ({environment['backend']}), Python "
            f"{environment['python']}, torch {environment['torch']} (CUDA {environment['cuda']}), transformers "
            f"{environment['transformers']}, attention {environment['attention']}, unpadding: {environment['unpad']}; "
            f"step times: {environment['step_clock']} time"
        )
    if environment.get("standins"):
        print(f"* stand-ins from scripts/gpu_offline for: {', '.join(environment['standins'])} (offline machine)")
    print("\ngrad_norm relative to one micro-batch per rank (K=1: the grad_norm itself)")
    print("\n".join(table(results, cases, precisions)))
    print("\n" + tolerance_note(precisions))
    print("\n".join(verdict_lines(verdicts)))
    print("\n".join(step_time_lines(results, cases, precisions)))
    trajectory_verdicts = _trajectory_report(runs, cases, precisions, spec) if args.steps > 1 else []
    for problem in problems:
        print(f"FAIL  {problem}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "environment": environments,
                    "measurements": {side: [asdict(row) for row in rows] for side, rows in results.items()},
                    "verdicts": [asdict(verdict) for verdict in verdicts],
                    "runs": {side: [asdict(run) for run in side_runs] for side, side_runs in runs.items()},
                    "run_verdicts": [asdict(verdict) for verdict in trajectory_verdicts],
                },
                indent=1,
            )
        )
    machine = f"{environment.get('device', '?')} x{world_size}" if environment else f"{device} x{world_size}"
    if args.plot and args.steps > 1 and any(runs.values()):
        from gpuproof.trajectory_plot import draw_trajectories

        title = f"scripts/gpu_proof.py --steps {args.steps}, model {args.model}, {machine}"
        draw_trajectories(runs, cases, precisions, title, args.plot)
        print(f"* plot: {args.plot}")
    elif args.plot and any(results.values()):
        from gpuproof.plot import draw

        draw(results, cases, precisions, f"scripts/gpu_proof.py, model {args.model}, {machine}", args.plot)
        print(f"* plot: {args.plot}")
    judged = [*(v.passed for v in verdicts), *(v.passed for v in trajectory_verdicts if v.passed is not None)]
    expected = len(sides) * len(cases) * len(precisions)
    if args.steps > 1:
        expected += (
            sum(side == "patched" or clip is not None for side in sides for clip in spec["clips"])
            * len(cases)
            * len(precisions)
        )
    failed = judged.count(False)
    ok = not failed and not problems and len(judged) == expected
    print(f"\nresult: {len(judged) - failed} of {expected} as expected" + ("" if ok else ": FAILED"))
    if hung:
        print("\n".join(f"error: {line}" for line in hung), file=sys.stderr)
        return EXIT_TIMED_OUT
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
