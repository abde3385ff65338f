"""The proof's run: the checked `Request` of ``python -m patchset proof``, each tree measured in a process of its own
(`launch`), the verdicts and the report. What it measures and why: docs/gpu-proof.md; usage: ``--help``."""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from engine_harness.adapt import ULYSSES_SDPA_ATTENTION as ULYSSES_SDPA  # imports no torch
from patchset.plumbing.errors import EXIT_TIMED_OUT, BadInput
from patchset.proof import plots
from patchset.proof.cases import CASES, MODELS, Model, Settings
from patchset.proof.launch import SideResult, measure
from patchset.proof.report import (
    step_time_lines,
    table,
    tolerance_note,
    trajectory_table,
    trajectory_verdict_lines,
    verdict_lines,
)
from patchset.proof.trajectory import CLIP_OFF, Run, TrajectoryVerdict, judge_trajectories, run_judges
from patchset.proof.trees import DefaultTrees, Source
from patchset.proof.verdict import Verdict, judge, one_step_judges


def choices(value: str, allowed: Sequence[str], what: str) -> list[str]:
    items = [item.strip() for item in value.split(",") if item.strip()]
    unknown = [item for item in items if item not in allowed]
    if unknown or not items:
        raise BadInput(f"--{what} {value!r}: choose from {', '.join(allowed)}")
    return items


def device_and_ranks(requested: str, world_size: int | None) -> tuple[str, int]:
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


def clip_values(value: str) -> tuple[float | None, ...]:
    """``--clip``: each a positive max norm, or 'off' (None)."""
    items = [item.strip() for item in value.split(",") if item.strip()]
    try:
        clips = [None if item == CLIP_OFF else float(item) for item in items]
    except ValueError:
        clips = []
    if not clips or any(clip is not None and not clip > 0 for clip in clips):
        raise BadInput(f"--clip {value!r}: positive numbers or '{CLIP_OFF}'")
    return tuple(dict.fromkeys(clips))


def sequence_parallel(sp: int, world_size: int | None, model: Model, attention: str | None) -> str:
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


@dataclass(frozen=True)
class Request:
    """What the command line asks for, checked: the trees of each side, and the run to make on them (its `Settings`
    with the device, the ranks, the attention and the precisions left to `settings_of`: "auto", 0, "" and ())."""

    sources: Mapping[str, list[Source]]  # side -> where its verl (and Trinity-RFT) come from
    trinity_left_out: bool  # the trinity case dropped because its default trees are absent (no --cases given)
    asked: Settings
    json: Path | None
    plot: Path | None


def settings_of(asked: Settings, model_path: Path) -> Settings:
    """The run's `Settings`: those ``asked``, with the device, the ranks, the attention and the precisions settled."""
    device, world_size = device_and_ranks(asked.device, asked.world_size or None)
    attention = sequence_parallel(asked.sp, world_size, MODELS[asked.model], asked.attention or None)
    precisions = asked.precisions or (("fp32", "bf16") if device == "cuda" else ("fp32",))
    return replace(
        asked, model_path=model_path, world_size=world_size, device=device, attention=attention, precisions=precisions
    )


def _trajectory_report(runs: dict[str, list[Run]], settings: Settings) -> list[TrajectoryVerdict]:
    """Print the training runs' table and verdicts; return the verdicts."""
    cases, precisions = settings.cases, settings.precisions
    every = [run for side_runs in runs.values() for run in side_runs]
    optimizer = next((run.optimizer for run in every if run.optimizer), "?")
    print(
        f"\ntraining runs: {settings.steps} steps each, {optimizer}; distance of each run's final weights from K=1's,"
        " relative to how far K=1's moved"
    )
    print("\n".join(trajectory_table(runs, cases, precisions)))
    verdicts = [
        judge_trajectories(side, CASES[case], precision, clip, side_runs)
        for side, side_runs in runs.items()
        if side_runs
        for case in cases
        for precision in precisions
        for clip in settings.clips
    ]
    print("\n".join(trajectory_verdict_lines(verdicts)))
    return verdicts


def prove(request: Request, defaults: DefaultTrees) -> int:
    """Measure each side of ``request``, print the report; the exit status (0 every case as expected)."""
    with tempfile.TemporaryDirectory(prefix="gpu-proof-") as workdir:
        settings = settings_of(request.asked, Path(workdir) / "model")
        cases, precisions, world_size = settings.cases, settings.precisions, settings.world_size
        if request.trinity_left_out:
            print(
                "* Trinity-RFT trees not found: the trinity case is left out (give --trinity-vanilla/--trinity-patched)"
            )
        groups = (
            f" (Ulysses sp {settings.sp}: {world_size // settings.sp} data-parallel group(s))"
            if settings.sp > 1
            else ""
        )
        print(
            f"* {len(cases)} cases x {len(precisions)} precisions, {world_size} rank(s) on {settings.device}{groups}, "
            f"model {settings.model}, micro-batches {list(settings.micro_batches)} ({', '.join(settings.splits)})"
        )
        measured: dict[str, SideResult] = {}
        for side, sources in request.sources.items():
            print(f"* {side}: {', '.join(found.describe() for found in sources)}", flush=True)
            measured[side] = measure(side, sources, settings, Path(workdir), defaults)
    sides = list(request.sources)
    results = {side: measured[side].measurements for side in sides}
    runs = {side: measured[side].runs for side in sides}
    environments = {side: measured[side].environment for side in sides}
    problems = [problem for side in sides for problem in measured[side].problems]
    hung = [measured[side].hung for side in sides if measured[side].hung]
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
    trajectory_verdicts = _trajectory_report(runs, settings) if settings.steps > 1 else []
    for problem in problems:
        print(f"FAIL  {problem}")
    if request.json:
        written = {
            "environment": environments,
            "measurements": {side: [asdict(row) for row in rows] for side, rows in results.items()},
            "verdicts": [asdict(verdict) for verdict in verdicts],
            "runs": {side: [asdict(run) for run in side_runs] for side, side_runs in runs.items()},
            "run_verdicts": [asdict(verdict) for verdict in trajectory_verdicts],
        }
        request.json.write_text(json.dumps(written, indent=1))
    machine = f"{environment.get('device', '?')} x{world_size}" if environment else f"{settings.device} x{world_size}"
    if request.plot and settings.steps > 1 and any(runs.values()):
        title = f"scripts/gpu_proof.py --steps {settings.steps}, model {settings.model}, {machine}"
        plots.draw_trajectories(runs, cases, precisions, title, request.plot)
        print(f"* plot: {request.plot}")
    elif request.plot and any(results.values()):
        title = f"scripts/gpu_proof.py, model {settings.model}, {machine}"
        plots.draw(results, cases, precisions, title, request.plot)
        print(f"* plot: {request.plot}")
    judged = [v.passed for v in (*verdicts, *trajectory_verdicts) if v.passed is not None]
    expected = sum(one_step_judges(side, CASES[case], p) for side in sides for case in cases for p in precisions)
    if settings.steps > 1:
        expected += sum(
            run_judges(side, CASES[case], p, clip)
            for side in sides
            for clip in settings.clips
            for case in cases
            for p in precisions
        )
    failed = judged.count(False)
    ok = not failed and not problems and len(judged) == expected
    print(f"\nresult: {len(judged) - failed} of {expected} as expected" + ("" if ok else ": FAILED"))
    if hung:
        print("\n".join(f"error: {line}" for line in hung), file=sys.stderr)
        return EXIT_TIMED_OUT
    return 0 if ok else 1
