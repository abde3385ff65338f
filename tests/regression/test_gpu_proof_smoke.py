"""The GPU proof's CPU smoke run, so that `scripts/gpu_proof.py` does not rot.

Invariant: the script's own side runner (`patchset.proof.side`, one gloo rank, fp32, its tiny Qwen2), given
the tree under test, trains verl's critic through verl 0.8.0's real FSDP2 engine with 1 and 2 micro-batches (fixed and
token-budget splits), imports the engine and the loss from that tree, and the script's own verdict says what the
tree should show: patched, the grad_norm is the same at every split; vanilla, it doubles. The same measurement judged
as the other tree fails, so the verdict tells the trees apart. The same side also trains a short run of it
(``--steps 3``, AdamW, clip_grad 1.0): patched, every split ends within reassociation's floor of one micro-batch's
weights; vanilla, beyond it; the other view fails again. One case only: the test command's budget is tight, and the
engine end-to-end module proves every loss mode on the same engine.

The side runs in a child of the fork server (`patchset.plumbing.children`): never a fork of this test process, whose
OpenMP pool the child would inherit without its threads.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchset.plumbing.children import run_children
from patchset.proof.cases import CASES, Settings
from patchset.proof.trajectory import Run, judge_trajectories
from patchset.proof.verdict import Measurement, judge

# the engine the script's CPU path is written for (test_engine_e2e also runs verl 0.7.1's, with adaptations the
# script, made to run on GPUs, does not carry)
GPU_PROOF_VERL_VERSIONS = ("0.8.0",)

SIDE = {"fixed": "patched", "bug": "vanilla"}
SIDE_DEADLINE_S = 300  # the side takes about 15 s of CPU
SIDE_PRELOAD = ("torch", "transformers", "verl.workers.engine.fsdp")  # what the fork server imports once
SMOKE_STEPS = 3  # a short training run (`--steps`): the same runs and verdict as the figures in docs/evidence/
SMOKE_CLIP = 1.0  # verl's default clip_grad


def _run_side(settings: Settings, result_file: str) -> None:
    from patchset.proof.side import run_side

    Path(result_file).write_text(json.dumps(run_side(settings)))


def test_gpu_proof_critic_verdicts_match_the_tree_under_test(expect, verl_tree, verl_version, tmp_path):
    if verl_version.split("+", 1)[0] not in GPU_PROOF_VERL_VERSIONS:
        pytest.skip(f"the script's CPU path runs verl {', '.join(GPU_PROOF_VERL_VERSIONS)}'s engine")
    settings = Settings(
        cases=("critic",),
        precisions=("fp32",),
        model="smoke",
        model_path=tmp_path / "model",
        world_size=1,
        device="cpu",
        attention="sdpa",
        micro_batches=(1, 2),
        splits=("fixed", "dynamic"),
        repeats=1,
        steps=SMOKE_STEPS,
        clips=(SMOKE_CLIP,),
    )
    result_file = tmp_path / "result.json"
    (code,) = run_children(
        _run_side, [(settings, str(result_file))], SIDE_DEADLINE_S, "the GPU proof's side", SIDE_PRELOAD
    )
    assert result_file.exists(), f"the side process exited with code {code} and no result"
    (rank,) = json.loads(result_file.read_text())["ranks"]
    assert "error" not in rank, rank["error"]
    for module_name, module_file in rank["modules"].items():
        assert Path(module_file).is_relative_to(verl_tree), f"{module_name} came from {module_file}, not {verl_tree}"
    rows = [Measurement.from_dict(row) for row in rank["measurements"]]
    assert {(row.split, row.micro_batches) for row in rows} == {("fixed", 1), ("fixed", 2), ("dynamic", 2)}

    side = SIDE[expect]
    verdict = judge(side, CASES["critic"], "fp32", rows)
    assert verdict.passed, f"{side}: {verdict.detail}"
    (other,) = set(SIDE.values()) - {side}
    assert not judge(other, CASES["critic"], "fp32", rows).passed, f"judged as {other}, {verdict.detail} passed too"

    runs = [Run.from_dict(row) for row in rank["trajectories"]]
    assert {(run.split, run.micro_batches) for run in runs} == {
        ("fixed", 1),
        ("shuffled", 1),
        ("fixed", 2),
        ("dynamic", 2),
    }
    assert all(len(run.steps) == SMOKE_STEPS for run in runs)
    trained = judge_trajectories(side, CASES["critic"], "fp32", SMOKE_CLIP, runs)
    assert trained.passed, f"{side}, over {SMOKE_STEPS} steps: {trained.detail}"
    other_view = judge_trajectories(other, CASES["critic"], "fp32", SMOKE_CLIP, runs)
    assert not other_view.passed, f"judged as {other}, {trained.detail} passed too"
