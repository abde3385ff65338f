"""verl's on-policy distillation loss fed the way verl 0.8's engine does, one worker per data-parallel rank.

`distillation_ppo_loss` keeps state between calls: verl stores the global batch info used for aggregation in
``ActorConfig.global_batch_info`` (and copies it into ``DistillationLossConfig.global_batch_info``), dicts that
live as long as the worker's config. So each simulated rank gets its own `Worker`, built the way a fresh actor
worker is, and a case says what that worker did before the measured mini-batch:

- ``first call``: nothing; the measured mini-batch is the first the worker trains on. `measure_first_calls`
  runs these in a spawned process (see test_distillation_first_call.py), so nothing of an earlier test is around;
- ``second mini-batch``: one mini-batch of `FIRST_BATCH_SIZE` sequences (other token and sequence counts).

The model is a leaf tensor standing in for the student's per-token log-probs (`harness.sim`); the teacher's
log-probs come with the batch, laid out as verl's trainer attaches them (`teacher_logprobs`, `teacher_ids`: one
entry per position of the padded sequence, top-1 for the single-sample estimators).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from harness.sim import engine_gradient
from tensordict import TensorDict

from engine_harness import LOSS_AGG_MODES
from engine_harness.sim import PROMPT_LEN, RESPONSE_LEN, Split, make_rollout_batch, use_cpu_unpadding
from engine_harness.sim import actor_config as engine_actor_config

# branch: (use_policy_gradient, loss_mode): the estimators verl recommends for each branch, and the top-k loss
BRANCHES = {
    "supervised-k3": (False, "k3"),
    "supervised-topk": (False, "forward_kl_topk"),
    "policy-gradient-k1": (True, "k1"),
}
# the policy-gradient branch with GMPO as its policy loss (verl 0003), measured by test_distillation_geo_mean.py only:
# {branch: policy_loss_mode}. DistillationLossConfig refuses any policy_loss_mode but "vanilla" (verl 0.8.0, 0.9.1), so
# the worker's config is built with the default and the mode set afterwards, as a release that lifts the check would
GEO_MEAN_BRANCH = "policy-gradient-k1-geo-mean"
POLICY_LOSS_MODES = {GEO_MEAN_BRANCH: "geo_mean"}
BRANCHES[GEO_MEAN_BRANCH] = (True, "k1")
SCENARIOS = ("first call", "second mini-batch")
BATCH_SIZE = 96  # the measured mini-batch; divisible by every dp_size x K below
FIRST_BATCH_SIZE = 48  # the mini-batch a "second mini-batch" worker trained on before
SPLITS = [(1, Split(k)) for k in (2, 4)] + [(1, Split(k, dynamic=True)) for k in (2, 4)]
SPLITS += [(2, Split(2)), (2, Split(2, dynamic=True))]
MODULES = ("verl", "verl.trainer.distillation.losses", "verl.workers.utils.losses")


@dataclass(frozen=True)
class Case:
    """One measurement: the loss settings, the split of the mini-batch, and what each worker did before it."""

    scenario: str
    branch: str
    use_task_rewards: bool
    loss_agg_mode: str
    dp_size: int
    split: Split

    def __str__(self) -> str:
        rewards = "task-rewards" if self.use_task_rewards else "no-task-rewards"
        return f"{self.scenario} {self.branch} {rewards} {self.loss_agg_mode} dp{self.dp_size} {self.split}"


def all_cases(scenario: str) -> list[Case]:
    return [
        Case(scenario, branch, use_task_rewards, mode, dp_size, split)
        for branch in BRANCHES
        if branch not in POLICY_LOSS_MODES
        for use_task_rewards in (False, True)
        for mode in LOSS_AGG_MODES
        for dp_size, split in SPLITS
    ]


def make_configs(branch: str, use_task_rewards: bool, loss_agg_mode: str):
    """The actor and distillation configs of a fresh worker (`BRANCHES` says which branch and loss)."""
    from verl.workers.config import DistillationConfig, DistillationLossConfig

    actor_config = engine_actor_config(loss_agg_mode)
    policy_gradient, loss_mode = BRANCHES[branch]
    loss_config = DistillationLossConfig(
        loss_mode=loss_mode,
        use_policy_gradient=policy_gradient,
        use_task_rewards=use_task_rewards,
    )
    if branch in POLICY_LOSS_MODES:
        object.__setattr__(loss_config, "policy_loss_mode", POLICY_LOSS_MODES[branch])
    return actor_config, DistillationConfig(distillation_loss=loss_config)


class Worker:
    """One rank's actor worker: its own configs, and the rows of the first micro-batch of each mini-batch."""

    def __init__(self, branch: str, use_task_rewards: bool, loss_agg_mode: str) -> None:
        self.actor_config, self.distillation_config = make_configs(branch, use_task_rewards, loss_agg_mode)
        self.first_rows: list[torch.Tensor] = []
        self._mini_batch_started = False

    def start_mini_batch(self) -> None:
        self._mini_batch_started = True

    def __call__(self, model_output: dict, data: TensorDict) -> tuple[torch.Tensor, dict]:
        from verl.trainer.distillation.losses import distillation_ppo_loss

        if self._mini_batch_started:
            self.first_rows.append(data["row_id"].clone())
            self._mini_batch_started = False
        return distillation_ppo_loss(self.actor_config, self.distillation_config, model_output=model_output, data=data)


def distillation_batch(batch_size: int, seed: int) -> tuple[TensorDict, dict[str, torch.Tensor]]:
    """A rollout mini-batch with old log-probs, advantages and the teacher's log-probs, and the model outputs: the
    student's log-probs, and what the top-k loss's logits processor returns (the per-token forward KL and the
    top-k masses). The old log-probs are the student's up to small noise (on-policy), so the PPO clip leaves most
    tokens in."""
    batch = make_rollout_batch(batch_size, seed=seed, extra_fields=("advantages",))
    generator = torch.Generator().manual_seed(seed + 1000)
    shape = (batch_size, RESPONSE_LEN)
    student = -torch.rand(shape, generator=generator) * 2
    batch["old_log_probs"] = student + 0.05 * torch.randn(shape, generator=generator)
    teacher = -torch.rand(shape, generator=generator) * 2
    # the teacher's log-prob of response token t sits at the position before it, as the model's own output does
    padded = torch.zeros(batch_size, PROMPT_LEN + RESPONSE_LEN, 1)
    padded[:, PROMPT_LEN - 1 : PROMPT_LEN - 1 + RESPONSE_LEN, 0] = teacher
    batch["teacher_logprobs"] = padded
    batch["teacher_ids"] = torch.zeros(padded.shape, dtype=torch.long)
    outputs = {"log_probs": student, "distillation_losses": torch.rand(shape, generator=generator)}
    outputs.update(
        student_mass=torch.rand(shape, generator=generator), teacher_mass=torch.rand(shape, generator=generator)
    )
    return batch, outputs


def _gradient(workers: Sequence[Worker], batch: TensorDict, outputs: dict, dp_size: int, split: Split):
    for worker in workers:
        worker.start_mini_batch()
    gradient, _ = engine_gradient(list(workers), batch, outputs, split, dp_size=dp_size)
    return gradient.view(len(batch), -1)  # a row: its gradient with respect to every model output


@dataclass
class Measurement:
    """The gradient of the measured mini-batch, the one-micro-batch reference, and what vanilla's defect depends
    on: the rows of each rank's first micro-batch, and the token and sequence counts of the earlier mini-batch."""

    case: str
    gradient: torch.Tensor
    reference: torch.Tensor
    response_mask: torch.Tensor
    first_rows: list[torch.Tensor]
    previous_tokens: int | None
    previous_sequences: int | None


@functools.cache
def _reference(branch: str, use_task_rewards: bool, loss_agg_mode: str) -> torch.Tensor:
    """The reference of every case with these loss settings (it does not depend on the split): one micro-batch
    holding the whole mini-batch on one rank, a fresh worker's first call. Computed once per process."""
    batch, outputs = distillation_batch(BATCH_SIZE, seed=0)
    return _gradient([Worker(branch, use_task_rewards, loss_agg_mode)], batch, outputs, 1, Split(1))


def measure(case: Case) -> Measurement:
    """Run ``case``: the reference is one micro-batch holding the whole mini-batch on one rank, computed by a
    fresh worker (its first call; with one micro-batch on one rank vanilla gets that right too)."""
    batch, outputs = distillation_batch(BATCH_SIZE, seed=0)
    settings = (case.branch, case.use_task_rewards, case.loss_agg_mode)
    reference = _reference(*settings).clone()
    workers = [Worker(*settings) for _ in range(case.dp_size)]
    previous_tokens = previous_sequences = None
    if case.scenario == "second mini-batch":
        first_batch, first_outputs = distillation_batch(FIRST_BATCH_SIZE, seed=1)
        _gradient(workers, first_batch, first_outputs, case.dp_size, case.split)
        previous_tokens, previous_sequences = int(first_batch["response_mask"].sum()), FIRST_BATCH_SIZE
    gradient = _gradient(workers, batch, outputs, case.dp_size, case.split)
    return Measurement(
        case=str(case),
        gradient=gradient,
        reference=reference,
        response_mask=batch["response_mask"].bool(),
        first_rows=[worker.first_rows[-1] for worker in workers],
        previous_tokens=previous_tokens,
        previous_sequences=previous_sequences,
    )


def module_files() -> dict[str, str]:
    import importlib

    return {name: str(importlib.import_module(name).__file__) for name in MODULES}


def measure_first_calls(cases: Sequence[Case]) -> tuple[dict[str, str], list[Measurement]]:
    """Entry point of the spawned process: the modules it imported, and a measurement per case, each by fresh
    workers whose first call is the measured mini-batch."""
    use_cpu_unpadding()
    measurements = [measure(case) for case in cases]
    return module_files(), measurements
