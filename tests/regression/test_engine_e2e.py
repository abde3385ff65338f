"""End to end through verl's real training engine: the logged grad_norm must not depend on the split.

Invariant on the patched trees: verl 0.8.0's `FSDPEngineWithValueHead` training the critic with
`value_loss`, and its `FSDPEngineWithLMHead` training the actor with Trinity-RFT's `TrinityPolicyLoss`
(after Trinity's own `patch_verl_engine()`), each run complete `train_batch` steps (FSDP2, fp32,
torch.distributed on gloo) on a tiny random Qwen2 (2 layers, hidden 64, built from a config in code); with
``use_dynamic_bsz`` token budgets that make 1, 2 and 4 micro-batches per rank, for every ``loss_agg_mode``,
at world size 1 and 2 (processes of a fork server) over the same 24-sequence mini-batch, the pre-clip grad_norm
that `optimizer_step` returns is the same for every split and both world sizes (relative difference
< 1e-5). The learning rate is 0, so every step sees the same weights. Gradient norms, not weights, are
compared: AdamW's first step moves each weight by about lr x sign(grad), which hides a scale error.

The same holds for verl's on-policy distillation loss (`distillation_ppo_loss`, supervised k3, task rewards off,
the teacher's log-probs given with the batch: no teacher model runs) on `FSDPEngineWithLMHead`, each step a fresh
worker's first call (fresh configs). Vanilla: the first micro-batch of each rank is normalized by its own tokens
or sequences with ``dp_size`` 1, so with 2 or 4 micro-batches per rank the grad_norm is another (measured 1.54 to
2.30 times one micro-batch's, either world size); with one micro-batch on each of two ranks only token-mean differs
(1.014: the ranks hold different token counts), the sequence means of two equal-size ranks averaging right.

On the vanilla trees the same steps show the defect, relative to one micro-batch on one rank: the
grad_norm grows with the number of micro-batches per rank (about K, exactly K where the engine's
balanced split gives every micro-batch the same number of sequences). Pinned exception, measured: vanilla
Trinity's ``seq-mean-token-sum-norm`` is a plain masked sum divided by the fixed padded response length,
so summing the micro-batch losses is already right on one rank (ratio 1 for any K); on two ranks FSDP's
gradient averaging halves it (ratio 1/world size), which the patch's ``dp_size`` weight undoes.

Ulysses sequence parallelism (verl 0.8.0, the critic and the actor, one ``loss_agg_mode`` for each engine value a loss
reads: token-mean, seq-mean-token-mean, seq-mean-token-sum-norm): ``ulysses_sequence_parallel_size`` 2 at dp 1
(2 ranks) and at dp 2 (4 ranks), 1 and 4 micro-batches per rank, each rank of a data-parallel group holding its
group's rows, the token budget per rank the group's over sp (the engine cuts by budget x sp). The grad_norm of each
equals one micro-batch on one rank without sp (relative difference < 1e-5; measured 1e-7): the engine's ``dp_size``
is the world size over sp and its ``batch_num_tokens`` is all-reduced over the data-parallel group, so neither
counts an sp copy, and `Gather.backward`'s x sp cancels FSDP's average over the whole world. Vanilla: the same
factors as without sp, with the data-parallel size in place of the world size. The teeth run (vanilla,
PATCHSET_SAMPLE=shapes) runs sp 2 at dp 1, the cheapest shape that shows the error; a run on patched trees sp 2 at dp
2, the shape where sp and data parallelism meet (at dp 1 the data-parallel group is one rank: dp 2 proves all dp 1
does), sampled or not: its tests are not sampled either, since every world runs whatever is collected.

Adaptations for a CPU-only machine, none of them on the loss path (both losses, the engine's micro-batch
loop, backward, the gradient reduction and `optimizer_step` run unchanged from the trees under test):

1. `left_right_2_no_padding` unpads through flash_attn (CUDA only): verl's unpad helpers are pointed at
   the pure-torch functions verl ships in `verl.utils.npu_flash_attn_utils` (`engine_harness.sim.use_cpu_unpadding`).
2. The model config overrides ``attn_implementation`` to ``sdpa`` (verl defaults to flash_attention_2).
3. verl's `verl.utils.model.load_valuehead_model` hard-codes flash_attention_2: it is replaced by the
   same `AutoModelForTokenClassification.from_pretrained` call with the config's attention (sdpa).
4. Trinity's `_build_module` (installed by `patch_verl_engine`) calls
   `torch.cuda.get_device_capability(0)`: while the actor engine is built it reports (0, 0), so every
   rank loads the weights itself (Trinity's non-Hopper path).
5. `EngineRegistry` has no CPU entry: the engine classes are built directly, and `train_batch` is called
   on the engine with the non-tensor fields verl's `TrainingWorker` and trainer would attach
   (``use_dynamic_bsz``, ``max_token_len_per_gpu``, ``global_batch_size``, ``temperature``, ...).
6. Engine settings a CPU run needs: strategy fsdp2 (FSDP1 refuses CPU), fp32 parameters and reduction
   (no bf16 mixed precision), ``use_torch_compile`` off, the process group on gloo with a file rendezvous.
7. The critic's value head is not in the tiny checkpoint: its initialization is seeded, so both world
   sizes train the same model; the checkpoint has no tokenizer (``load_tokenizer=False``).
8. Once the engine is built, `gc.freeze()`: the engine's ``to()`` calls ``gc.collect()`` twice a step, and
   on this CPU walking every object torch, transformers and verl keep alive was half of each step.
9. verl 0.7.1 only (its critic; it has no distillation): the FSDP2 wrap policy names ``Qwen2DecoderLayer`` (0.7.1's
   ``apply_fsdp2`` indexes transformers 5's set of ``_no_split_modules``); the critic checkpoint's config declares
   what a critic checkpoint does (``Qwen2ForTokenClassification``, one label, no classifier dropout: 0.7.1 builds the
   critic from the checkpoint's architecture, where 0.8.0 sets these itself); ``forward_step``'s hard-coded bf16
   autocast is a no-op, so the forward runs in fp32 as on 0.8.0 (with it, each micro-batch composition rounds
   differently: ratios off 1 by up to 3e-4). Measured on 0.7.1: vanilla x2.000 / x3.992 token-mean and x2 / x4 the
   sequence means at K = 2 / 4 on one rank; patched 1.000000 for every split and both world sizes.

10. Sequence parallelism only: verl's Ulysses attention (`_ulysses_flash_attention_forward`, its all-to-all and
    position-id gather) runs only inside transformers' flash-attention entry, and calls flash_attn's varlen kernel
    (CUDA only). The model names an attention (`engine_harness.adapt.ULYSSES_SDPA_ATTENTION`) that routes to that
    entry, and the kernel verl's function calls is causal sdpa over each packed sequence
    (`engine_harness.adapt.ulysses_sdpa_attention`). Only the first rank of each Ulysses group reports a grad_norm.

The engine, loss and Trinity patch modules are checked to come from the trees under test in every
rank. With ``baseline_dir`` set, every measurement is written to ``e2e-<expect>.jsonl`` there
(`python -m patchset plot` draws them), those with sequence parallelism to ``e2e-sp-<expect>.jsonl``.
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import SAMPLE_VARIABLE
from engine_e2e_worker import COMPONENTS, DISTILLATION, LOSS_AGG_MODES, MICRO_BATCHES, Shape, run_world

from engine_harness.adapt import ULYSSES_SDPA_ATTENTION

WORLD_SIZES = (1, 2)
# Ulysses sequence parallelism, verl 0.8.0's engine only (the target; 0.7.1 runs its critic without it): sp 2 at dp 1
# (2 ranks: the teeth run) or at dp 2 (4 ranks: the fix run), the critic and Trinity's actor, each rank through verl's
# Ulysses attention
SP_SHAPES = (Shape(2, 2, ULYSSES_SDPA_ATTENTION), Shape(4, 2, ULYSSES_SDPA_ATTENTION))
SP_VERL_VERSIONS = ("0.8.0",)
SP_COMPONENTS = ("critic", "actor")
# one mode for each engine value a loss reads: batch_num_tokens; global_batch_size and dp_size; dp_size alone
# (seq-mean-token-sum reads what seq-mean-token-mean reads)
SP_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
# The CPU adaptations below are written for verl 0.8.0's engine, and hold for 0.7.1's (its critic, configured as a
# critic checkpoint declares itself, see engine_e2e_worker; 0.7.x has no distillation). verl 0.9.x's FSDP engine is
# CUDA-only on this path: building the model calls log_gpu_memory_usage, which asks torch.cuda.mem_get_info
# unconditionally.
E2E_VERL_VERSIONS = ("0.7.1", "0.8.0")
RTOL = 1e-5
BUG_RATIO_TOLERANCE = 0.15
SUITE_DIR = Path(__file__).resolve().parent

Key = tuple[str, str, int, int]  # component, mode, world size (dp size under sp), micro-batches per rank


def sp_micro_batch_counts() -> tuple[int, ...]:
    """The splits the sequence-parallel shapes run: one micro-batch and the most (a split in between shows nothing the
    shapes without sp do not)."""
    return (MICRO_BATCHES[0], MICRO_BATCHES[-1])


def _teeth(expect: str) -> bool:
    """The teeth run: vanilla trees, sampled (PATCHSET_SAMPLE=shapes, see conftest)."""
    return expect == "bug" and os.environ.get(SAMPLE_VARIABLE) == "shapes"


def sp_shapes(expect: str) -> tuple[Shape, ...]:
    """The sequence-parallel shape a run measures: in the teeth run sp 2 at dp 1, the cheapest that shows the vanilla
    trees' error (2 ranks instead of 4); otherwise sp 2 at dp 2, where the engine's ``dp_size`` (the world over sp)
    and the all-reduce of ``batch_num_tokens`` over the data-parallel group are more than one rank: every term dp 1
    checks, and those it cannot."""
    return SP_SHAPES[:1] if _teeth(expect) else SP_SHAPES[1:]


def micro_batch_counts(expect: str) -> tuple[int, ...]:
    """The splits the engines run: every one, or in the teeth run one micro-batch and the most, which is where the
    vanilla trees' error is largest."""
    if _teeth(expect):
        return (MICRO_BATCHES[0], MICRO_BATCHES[-1])
    return MICRO_BATCHES


@pytest.fixture(scope="module")
def trees(request: pytest.FixtureRequest, verl_tree: Path, verl_version: str) -> dict[str, Path]:
    """The trees under test; without a Trinity tree only the critic runs (the actor tests skip)."""
    if verl_version.split("+", 1)[0] not in E2E_VERL_VERSIONS:  # 0.8.0+patchset.N: a patched 0.8.0 wheel
        pytest.skip(
            f"the CPU engine harness is written for verl {', '.join(E2E_VERL_VERSIONS)}; verl {verl_version}'s FSDP "
            f"engine calls torch.cuda.mem_get_info while building the model (log_gpu_memory_usage), so it cannot "
            f"run on CPU here (the loss itself is tested by test_critic_value_loss.py)"
        )
    try:
        return {"verl": verl_tree, "trinity": request.getfixturevalue("trinity_tree")}
    except pytest.skip.Exception:
        return {"verl": verl_tree}


@pytest.fixture(scope="module")
def e2e_runs(
    expect: str, trees: dict[str, Path], verl_version: str, baseline_dir: Path | None
) -> dict[Shape, list[dict]]:
    """Every rank's result for each shape: one process group per shape runs the whole matrix, all at once (each in
    its own temporary folder and rendezvous; together they take two thirds of the time one after the other). The
    sequence-parallel shapes run on verl 0.8.0 only: the critic and the actor, `SP_MODES`."""
    components = _components(trees)
    sys_path = [str(SUITE_DIR), *(str(tree) for tree in trees.values()), *sys.path]
    plans = {Shape(ws): (components, LOSS_AGG_MODES, micro_batch_counts(expect)) for ws in WORLD_SIZES}
    if verl_version.split("+", 1)[0] in SP_VERL_VERSIONS:
        sp_plan = (tuple(c for c in components if c in SP_COMPONENTS), SP_MODES, sp_micro_batch_counts())
        plans |= {shape: sp_plan for shape in sp_shapes(expect)}
    with ThreadPoolExecutor(max_workers=len(plans)) as pool:
        started = {
            shape: pool.submit(run_world, shape.world_size, sys_path, parts, counts, shape, modes)
            for shape, (parts, modes, counts) in plans.items()
        }
        runs = {shape: future.result() for shape, future in started.items()}
    failed = [
        f"{shape}, rank {rank}:\n{result['error']}"
        for shape, results in runs.items()
        for rank, result in enumerate(results)
        if "error" in result
    ]
    assert not failed, "engine run failed\n" + "\n".join(failed)
    if baseline_dir is not None:
        baseline_dir.mkdir(parents=True, exist_ok=True)
        for name, shapes in (
            (f"e2e-{expect}", [Shape(ws) for ws in WORLD_SIZES]),
            (f"e2e-sp-{expect}", sp_shapes(expect)),
        ):
            with (baseline_dir / f"{name}.jsonl").open("w") as stream:
                for shape in (shape for shape in shapes if shape in runs):
                    for row in runs[shape][0]["measurements"]:
                        stream.write(json.dumps(row) + "\n")
    return runs


@pytest.fixture(scope="module")
def grad_norms(expect: str, e2e_runs: dict[Shape, list[dict]], trees: dict[str, Path]) -> dict[Key, float]:
    """grad_norm per (component, mode, world size, micro-batches), as rank 0 logged it, without sequence parallelism."""
    norms: dict[Key, float] = {}
    for shape, results in e2e_runs.items():
        if shape.sequence_parallel > 1:
            continue
        for row in results[0]["measurements"]:
            norms[row["component"], row["mode"], row["world_size"], row["micro_batches"]] = row["grad_norm"]
    components = _components(trees)
    counts = micro_batch_counts(expect)
    expected = {(c, m, ws, k) for c in components for m in LOSS_AGG_MODES for ws in WORLD_SIZES for k in counts}
    assert set(norms) == expected, f"missing measurements: {sorted(expected - set(norms))}"
    return norms


@pytest.fixture(scope="module")
def sp_grad_norms(e2e_runs: dict[Shape, list[dict]]) -> dict[Key, float]:
    """grad_norm per (component, mode, dp size, micro-batches) of the sequence-parallel shapes, as rank 0 (the first
    rank of its Ulysses group; the others report none) logged it."""
    norms: dict[Key, float] = {}
    for shape, results in e2e_runs.items():
        if shape.sequence_parallel == 1:
            continue
        for row in results[0]["measurements"]:
            norms[row["component"], row["mode"], shape.data_parallel, row["micro_batches"]] = row["grad_norm"]
    if not norms:
        pytest.skip(f"sequence parallelism runs on verl {', '.join(SP_VERL_VERSIONS)}'s engine only")
    return norms


def _components(trees: dict[str, Path]) -> tuple[str, ...]:
    """What runs: the critic and verl's distillation loss, then (with a Trinity tree) Trinity's actor, last because
    Trinity's engine patch stays in place once applied."""
    distillation = (DISTILLATION,) if (trees["verl"] / "verl" / "trainer" / "distillation").is_dir() else ()  # >= 0.8
    return ("critic", *distillation, "actor") if "trinity" in trees else ("critic", *distillation)


def _require(trees: dict[str, Path], component: str) -> None:
    if component == "actor" and "trinity" not in trees:
        pytest.skip("no Trinity-RFT tree under test (PATCHSET_TRINITY_TREE): the actor does not run")


def vanilla_ratio(component: str, mode: str, dp_size: int, micro_batches: int) -> float:
    """grad_norm the vanilla trees give relative to one micro-batch on one rank (see the module docstring), with
    ``dp_size`` data-parallel groups (the world size without sequence parallelism)."""
    if component == "actor" and mode == "seq-mean-token-sum-norm":
        return 1.0 / dp_size
    return float(micro_batches)


def _check(expect: str, value: float, reference: float, bug_ratio: float, what: str) -> None:
    ratio = value / reference
    if expect == "fixed":
        assert abs(ratio - 1.0) < RTOL, f"{what}: grad_norm {value!r} vs {reference!r} (ratio {ratio:.8f})"
    else:
        assert ratio == pytest.approx(bug_ratio, rel=BUG_RATIO_TOLERANCE), (
            f"{what}: vanilla ratio {ratio:.4f}, expected about {bug_ratio}"
        )


def test_engine_and_losses_imported_from_the_trees_under_test(e2e_runs, trees: dict[str, Path]):
    import verl.workers.engine.fsdp.transformer_impl

    assert Path(verl.workers.engine.fsdp.transformer_impl.__file__).resolve().is_relative_to(trees["verl"])
    for shape, results in e2e_runs.items():
        for rank, result in enumerate(results):
            assert "verl.workers.engine.fsdp.transformer_impl" in result["modules"]
            for module_name, module_file in result["modules"].items():
                tree = trees[module_name.split(".", 1)[0]]
                assert Path(module_file).is_relative_to(tree), (
                    f"{shape}, rank {rank}: {module_name} came from {module_file}, not {tree}"
                )


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("component", COMPONENTS)
def test_engine_grad_norm_invariant_to_micro_batch_count(expect, trees, grad_norms, component, mode, world_size):
    _require(trees, component)
    reference = grad_norms[component, mode, world_size, 1]
    for micro_batches in micro_batch_counts(expect)[1:]:
        bug_ratio = vanilla_ratio(component, mode, world_size, micro_batches) / vanilla_ratio(
            component, mode, world_size, 1
        )
        value = grad_norms[component, mode, world_size, micro_batches]
        _check(expect, value, reference, bug_ratio, f"{component} {mode} ws{world_size} K={micro_batches}")


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("component", COMPONENTS)
def test_engine_grad_norm_on_two_ranks_equals_one_rank(expect, trees, grad_norms, component, mode):
    _require(trees, component)
    reference = grad_norms[component, mode, 1, 1]
    for micro_batches in micro_batch_counts(expect):
        value = grad_norms[component, mode, 2, micro_batches]
        bug_ratio = vanilla_ratio(component, mode, 2, micro_batches)
        _check(expect, value, reference, bug_ratio, f"{component} {mode} ws2 K={micro_batches} vs ws1 K=1")


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_engine_distillation_grad_norm_invariant_to_split_and_ranks(expect, grad_norms, mode, verl_distillation_tree):
    """verl's distillation_ppo_loss (supervised k3, task rewards off), each step a fresh worker's first call: the
    grad_norm of every split and both world sizes equals one micro-batch on one rank. Vanilla: its first micro-batch
    is normalized by its own tokens or sequences (dp_size 1), so every split into 2 or 4 micro-batches differs."""
    reference = grad_norms[DISTILLATION, mode, 1, 1]
    for world_size in WORLD_SIZES:
        for micro_batches in micro_batch_counts(expect):
            if (world_size, micro_batches) == (1, 1):
                continue
            value = grad_norms[DISTILLATION, mode, world_size, micro_batches]
            what = f"distillation {mode} ws{world_size} K={micro_batches}: grad_norm {value!r} vs {reference!r}"
            if expect == "fixed":
                assert abs(value / reference - 1.0) < RTOL, what
            elif micro_batches > 1:
                assert abs(value / reference - 1.0) > 0.1, what + " (vanilla unexpectedly invariant)"


@pytest.mark.parametrize("mode", SP_MODES)
@pytest.mark.parametrize("component", SP_COMPONENTS)
def test_engine_grad_norm_under_sequence_parallelism_equals_one_rank(
    expect, trees, grad_norms, sp_grad_norms, component, mode
):
    """Ulysses sp 2 at dp 2 (4 gloo ranks; the teeth run: at dp 1, 2 ranks; verl's all-to-all, `Gather` and FSDP's
    average over the world): every split's grad_norm equals one micro-batch on one rank without sp. The engine's
    ``dp_size`` is the world over sp, and ``batch_num_tokens`` is summed over its data-parallel group, so each counts
    every row once; `Gather.backward` multiplies by sp what FSDP then divides by the world. Vanilla: x K, as without
    sp (Trinity's seq-mean-token-sum-norm 1/dp)."""
    _require(trees, component)
    reference = grad_norms[component, mode, 1, 1]
    for shape in sp_shapes(expect):
        for micro_batches in sp_micro_batch_counts():
            value = sp_grad_norms[component, mode, shape.data_parallel, micro_batches]
            bug_ratio = vanilla_ratio(component, mode, shape.data_parallel, micro_batches)
            what = f"{component} {mode} {shape} K={micro_batches} vs ws1 K=1"
            _check(expect, value, reference, bug_ratio, what)
