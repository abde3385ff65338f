"""Parity cases for every policy loss Trinity registers, as Trinity's own trainer hands them to verl's engine.

For each loss in ``POLICY_LOSS_FN`` (read from the registry, so a loss added upstream is covered without a change
here): `TrinityPolicyLoss` as Trinity's trainer installs it (``trainer.fix_actor_microbatch_loss_scale`` at its
default: on where the overlay or the series is), with and without its k2 KL and entropy terms, through the engine
steps with the ``force_group_size`` that Trinity's real ``VERLTrainer._update_actor`` asks for, over the splits of
`parity_cases.py`, and outside the engine with the switch off; the start-up warnings `TrinityPolicyLoss` logs for
it; and the rows of each micro-batch verl makes from a DPO batch (whole pairs, chosen first, where the fix is on).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest import mock

from harness.sim import _engine_micro_batches, group_size_sent_by_trainer
from harness.trinity_configs import MIX_LOSSES, installed_actor_loss, policy_loss_fn_args

from engine_harness.sim import Split, actor_inputs

NUM_EXPERT = 8  # MIX/MIX_CHORD: the last rows are expert data


def registered_policy_losses() -> list[str]:
    from trinity.algorithm import POLICY_LOSS_FN

    return sorted({*POLICY_LOSS_FN._default_mapping, *POLICY_LOSS_FN.modules})


def _config(name: str, batch_size: int, dp_size: int, terms: bool, **overrides: Any):
    from trinity.common.config import AlgorithmConfig

    args = policy_loss_fn_args(name, "token-mean", batch_size, dp_size, NUM_EXPERT)
    args.update(overrides)
    return AlgorithmConfig(
        policy_loss_fn=name,
        policy_loss_fn_args=args,
        kl_loss_fn="k2" if terms else "none",
        kl_loss_fn_args={"kl_coef": 0.05} if terms else {},
        entropy_loss_fn=("mix" if name in MIX_LOSSES else "default") if terms else "none",
        entropy_loss_fn_args={"entropy_coef": 0.01 if terms else 0.0},
        loss_agg_mode="token-mean",
    )


def start_up_warnings(config) -> list[str]:  # type: ignore[no-untyped-def]
    """What `TrinityPolicyLoss` logs as warnings when it is built for ``config``."""
    from trinity.trainer.verl import losses

    with mock.patch.object(losses, "get_logger", create=True) as get_logger:
        installed_actor_loss(config)
    return [call.args[0] for call in get_logger.return_value.warning.call_args_list]


def trainer_group_size(policy_loss_fn: str, batch_size: int) -> int | None:
    """The ``force_group_size`` Trinity's real `VERLTrainer._update_actor` hands to the engine (None: not set)."""
    from trinity.trainer.verl.trainer import VERLTrainer

    batch, _ = actor_inputs(batch_size, seed=3, noise_seed=13, num_expert=NUM_EXPERT)
    return group_size_sent_by_trainer(VERLTrainer, policy_loss_fn, batch, "default")


def every_policy_loss_cases(run: Callable[..., dict[str, Any]], splits: list, batch_size: int) -> dict[str, Any]:
    """Every registered loss through ``run`` (parity_cases' recorder: losses, gradient, metrics), its start-up
    warnings, the trainer's grouping for it, and the DPO micro-batch rows."""
    batch, outputs = actor_inputs(batch_size, seed=3, noise_seed=13, num_expert=NUM_EXPERT)
    cases: dict[str, Any] = {}
    for name in registered_policy_losses():
        group_size = trainer_group_size(name, batch_size)
        cases[f"trainer force_group_size {name}"] = group_size
        cases[f"start-up warnings {name}"] = start_up_warnings(_config(name, batch_size, 1, True))
        for variant, overrides in {"": {}, **_variants(name)}.items():
            for terms in (True, False):
                label = f"loss {name}{variant} {'pg+entropy+kl' if terms else 'pg-only'}"
                for dp_size, split in splits:
                    loss_fn = installed_actor_loss(_config(name, batch_size, dp_size, terms, **overrides))
                    cases[f"{label} dp{dp_size} {split}"] = run(loss_fn, batch, outputs, dp_size, split, group_size)
                loss_fn = installed_actor_loss(_config(name, batch_size, 1, terms, **overrides), False)
                cases[f"{label} outside-engine"] = run(loss_fn, batch, outputs, 1, Split(2), group_size, False)
    for split in (Split(2, dynamic=True), Split(3, dynamic=True)):
        micro_batches = _engine_micro_batches(batch, split, {}, trainer_group_size("dpo", batch_size) or 1)
        cases[f"dpo micro-batch rows {split}"] = [micro_batch["row_id"].tolist() for micro_batch in micro_batches]
    return cases


def _variants(name: str) -> dict[str, dict[str, Any]]:
    """Settings where a loss aggregates otherwise than by the algorithm's token-mean."""
    if name == "rec":
        return {" gspo-one-side": {"clip_mode": "gspo-one-side"}}
    if name == "gspo":
        return {" seq-mean-token-mean": {"loss_agg_mode": "seq-mean-token-mean"}}
    return {}
