"""``--steps N``: training runs of N optimizer steps per case, tree, precision and clipping; how a rank makes them
(torch is imported only there, inside the functions) and how the main process judges them.

Every run of an engine starts from the weights and the (empty) optimizer state it had when built (`EngineStart`) and
trains N steps with verl's AdamW on the same pool of mini-batches of different lengths, cycled. The runs of one case
differ only in how each mini-batch is cut per rank: ``fixed`` K = 1, the reference; ``shuffled`` K = 1, each rank's
rows in another order, whose distance from the reference is the floor that reassociation alone makes over N steps,
measured; ``fixed`` K = 2, 4; ``dynamic`` K <= 2, <= 4, one token budget for the run set by its longest mini-batch,
so K changes from step to step as in training. Distances are summed over every rank's shards: the whole model's.

Verdict. Patched: every run within ``FLOOR_FACTOR`` times the shuffled floor of the reference (at least
``MIN_BOUND``). Vanilla with clipping: some run beyond that bound. Vanilla without clipping is reported, not judged:
Adam divides each update by the gradient's running magnitude, which cancels a constant factor K.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine_harness.data import DATA_SEED, ragged_global_batch, token_budget
from patchset.proof.cases import Case, Expect, expectation
from patchset.proof.verdict import one_step_judges

if TYPE_CHECKING:
    import torch
    from tensordict import TensorDict

FLOOR_FACTOR = 10.0
MIN_BOUND = {"fp32": 1e-6, "bf16": 1e-3}
REFERENCE = ("fixed", 1)
SHUFFLED = ("shuffled", 1)
CLIP_OFF = "off"
# each pooled mini-batch's longest prompt and response, as a share of the model preset's: a token budget set for the
# longest makes fewer micro-batches for the others, so a dynamic split's K changes from step to step
POOL_SHARES = (1.0, 0.4, 0.7, 0.25)
SHUFFLE_SEED = 7


def clip_label(clip: float | None) -> str:
    """How tables name a clipping setting: the max norm, or "off"."""
    return CLIP_OFF if clip is None else f"{clip:g}"


@dataclass(frozen=True)
class Step:
    """One optimizer step of a run, as rank 0 saw it."""

    loss: float  # the sum of the micro-batch losses the engine backpropagated (what the run optimizes)
    grad_norm: float  # before clipping, as `optimizer_step` returns it
    made: int  # micro-batches the engine made on this rank


@dataclass(frozen=True)
class Run:
    """One trajectory: a case trained N steps with one split, clipping setting and precision."""

    case: str
    precision: str
    clip: float | None  # None: off
    split: str  # "fixed", "shuffled" or "dynamic"
    micro_batches: int  # asked for: per rank for "fixed"; the most, on the longest mini-batch, for "dynamic"
    steps: tuple[Step, ...]
    distance: float  # ||w - w_ref|| / ||w_ref - w_0||, 0 for the reference itself
    optimizer: str = ""  # the optimizer the engine built, as the rank read it

    @property
    def key(self) -> tuple[str, int]:
        return (self.split, self.micro_batches)

    @property
    def clipped_share(self) -> float | None:
        """The share of steps whose pre-clip grad_norm was above the clip (None with clipping off)."""
        if self.clip is None:
            return None
        return sum(step.grad_norm > self.clip for step in self.steps) / len(self.steps)

    @classmethod
    def from_dict(cls, row: Mapping) -> Run:
        return cls(**{**row, "steps": tuple(Step(**step) for step in row["steps"])})


@dataclass(frozen=True)
class TrajectoryVerdict:
    side: str
    case: str
    precision: str
    clip: float | None
    passed: bool | None  # None: reported, not judged (vanilla without clipping)
    detail: str


def runs_of(runs: Iterable[Run], case: str, precision: str, clip: float | None) -> dict[tuple[str, int], Run]:
    return {run.key: run for run in runs if (run.case, run.precision, run.clip) == (case, precision, clip)}


def _k_range(run: Run) -> str:
    made = sorted({step.made for step in run.steps})
    return f"{made[0]}" if len(made) == 1 else f"{made[0]}-{made[-1]}"


def run_judges(side: str, case: Case, precision: str, clip: float | None) -> bool:
    """Whether a training run can show what ``side`` should: not vanilla without clipping (Adam cancels much of a
    constant factor), nor where one step cannot (`one_step_judges`): in bf16 the shuffled floor over a run (1.6 % to
    6.6 % of the run's travel on the tiny model) is about what another choice of tokens or mean moves it."""
    return side == "patched" or (clip is not None and one_step_judges(side, case, precision))


def judge_trajectories(
    side: str, case: Case, precision: str, clip: float | None, every: Sequence[Run]
) -> TrajectoryVerdict:
    """Whether ``side``'s runs of ``case`` end where that tree should (see the module's docstring)."""
    runs = runs_of(every, case.name, precision, clip)

    def verdict(passed: bool | None, detail: str) -> TrajectoryVerdict:
        return TrajectoryVerdict(side, case.name, precision, clip, passed, detail)

    compared = {key: run for key, run in runs.items() if key not in (REFERENCE, SHUFFLED)}
    if REFERENCE not in runs or SHUFFLED not in runs or not compared:
        return verdict(False, "missing runs: the reference, the shuffled floor and one split are needed")
    limit = max(FLOOR_FACTOR * runs[SHUFFLED].distance, MIN_BOUND[precision])  # what reassociation alone makes
    wrong = [
        f"{run.split} K={run.micro_batches} made {_k_range(run)}"
        for run in runs.values()
        if (run.split != "dynamic" and any(step.made != run.micro_batches for step in run.steps))
        or any(step.made > run.micro_batches for step in run.steps)
    ]
    if wrong:
        return verdict(False, "the engine did not make the micro-batches asked for: " + ", ".join(wrong))
    if any(not math.isfinite(run.distance) for run in runs.values()):
        return verdict(False, "a run's weights are not finite")
    worst_key, worst = max(((key, run.distance) for key, run in compared.items()), key=lambda item: item[1])
    shown = f"largest distance from K=1 {worst:.1e} ({worst_key[0]} K={worst_key[1]}), bound {limit:.1e}"
    expect = expectation(side, case)
    if expect is Expect.INVARIANT:
        return verdict(worst <= limit, f"same trajectory at every split: {shown}")
    beyond = worst > limit
    if clip is None:
        return verdict(None, f"reported, not judged (no clipping: Adam cancels much of a constant factor): {shown}")
    if not run_judges(side, case, precision, clip):
        return verdict(None, f"reported, not judged (bf16's floor over a run is about another choice's): {shown}")
    return verdict(beyond, f"{'shows' if beyond else 'does not show'} the bug over the run: {shown}")


def columns(keys: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    order = {"fixed": 0, "shuffled": 1, "dynamic": 2}
    return sorted({key for key in keys if key != REFERENCE}, key=lambda key: (order[key[0]], key[1]))


def split_label(key: tuple[str, int]) -> str:
    """How tables and figures name a run's split."""
    split, count = key
    return {"fixed": f"K={count}", "shuffled": "K=1 shuffled", "dynamic": f"dynamic K<={count}"}[split]


def _shards(engine: Any) -> list[torch.Tensor]:
    """This rank's shard of every parameter (FSDP2 keeps DTensors), as the live tensors."""
    return [param.to_local() if hasattr(param, "to_local") else param for param in engine.module.parameters()]


def weights(engine: Any) -> list[torch.Tensor]:
    """A copy of this rank's weight shards."""
    return [shard.detach().clone() for shard in _shards(engine)]


@dataclass
class EngineStart:
    """The weights and optimizer state an engine had before its first step, to start every run from."""

    weights: list[Any]
    optimizer_state: dict

    @classmethod
    def of(cls, engine: Any) -> EngineStart:
        return cls(weights(engine), engine.optimizer.state_dict())

    def restore(self, engine: Any) -> None:
        import torch

        with torch.no_grad():
            for shard, saved in zip(_shards(engine), self.weights, strict=True):
                shard.copy_(saved)
        # the state before any step is empty: loading it drops AdamW's moments and step counts
        engine.optimizer.load_state_dict(self.optimizer_state)


def relative_distance(end: Sequence[Any], reference: Sequence[Any], start: Sequence[Any]) -> float:
    """||end - reference|| / ||reference - start|| over the whole model (every rank's shards): how far a run ended
    from the reference run, relative to how far the reference moved."""
    import torch
    import torch.distributed as dist

    def squared(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
        return sum(float((x.double() - y.double()).pow(2).sum()) for x, y in zip(a, b, strict=True))

    sums = torch.tensor([squared(end, reference), squared(reference, start)], dtype=torch.float64)
    if dist.is_initialized():
        dist.all_reduce(sums)
    return math.sqrt(sums[0] / sums[1]) if sums[1] > 0 else math.inf


def mini_batch_pool(vocab: int, sequences: int, prompt_len: int, response_len: int) -> list[TensorDict]:
    """One mini-batch per share of `POOL_SHARES`, each with its own seed, its sequences up to that share of the
    preset's lengths."""
    lengths = [(max(1, round(prompt_len * share)), max(1, round(response_len * share))) for share in POOL_SHARES]
    return [ragged_global_batch(vocab, sequences, *pair, seed=DATA_SEED + index) for index, pair in enumerate(lengths)]


def pool_budget(pool: Sequence[TensorDict], world_size: int, micro_batches: int) -> int:
    """One token budget for a whole run: the longest mini-batch of the pool makes ``micro_batches`` per rank."""
    return max(token_budget(batch, world_size, micro_batches) for batch in pool)


def shuffled_rows(batch: TensorDict, world_size: int) -> TensorDict:
    """The mini-batch with each rank's rows in another order: the same arithmetic, summed in another order."""
    import torch

    rows = len(batch) // world_size
    generator = torch.Generator().manual_seed(SHUFFLE_SEED)
    order = torch.cat([rank * rows + torch.randperm(rows, generator=generator) for rank in range(world_size)])
    return batch[order]
