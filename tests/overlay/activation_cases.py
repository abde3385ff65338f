"""Activation cases, each run in its own process of the overlay venv; prints one JSON line of observations.

- ``explicit``: automatic activation off (``PATCHSET_OVERLAYS=0``); Trinity's trainer module, which took
  ``value_loss`` with ``from verl.workers.utils.losses import value_loss``, and a ``partial(value_loss, ...)`` exist
  before ``activate()``; a second ``activate()`` is a no-op; ``deactivate()`` restores upstream and ``activate()``
  again re-applies. The trainer's own ``VERLTrainer._update_actor`` is observed too: the ``force_group_size`` it
  hands the engine for DPO (2 with the overlay, none without).
- ``dump PATH``: build ``partial(value_loss, config=critic_cfg)``, a ``CriticConfig`` and a ``TrinityPolicyLoss``
  and pickle them to PATH. ``load PATH``: unpickle them and observe which behaviour they have, in a process whose
  overlays are on or off as the test chose.
"""

from __future__ import annotations

import functools
import json
import pickle
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # engine_harness, after the installed overlays
# the tests' helpers as `harness`: an installed sdist may bring a top-level `tests` package of its own
sys.path.append(str(Path(__file__).resolve().parents[1]))

from harness.sim import engine_gradient, grad_ratio, group_size_sent_by_trainer  # noqa: E402
from harness.trinity_configs import installed_actor_loss  # noqa: E402

from engine_harness.sim import Split, make_rollout_batch, use_cpu_unpadding  # noqa: E402
from engine_harness.trinity_configs import algorithm_config  # noqa: E402


def critic_observation(value_loss_fn) -> dict:
    """Gradient ratio K=4 vs K=1 through the engine steps, and how vf_loss is logged (vanilla: ~4 and float)."""
    batch = make_rollout_batch(32, seed=0, extra_fields=("values", "returns"))
    outputs = {"values": batch["values"] + 0.1}

    def loss_fn(model_output, data):
        return value_loss_fn(model_output=model_output, data=data)

    reference, _ = engine_gradient(loss_fn, batch, outputs, Split(1))
    gradient, metrics = engine_gradient(loss_fn, batch, outputs, Split(4))
    logged = metrics[0]["critic/vf_loss"]
    return {"ratio": grad_ratio(gradient, reference), "vf_loss_aggregation": str(getattr(logged, "aggregation", None))}


def actor_observation(loss_fn) -> dict:
    batch = make_rollout_batch(32, seed=1, extra_fields=("old_log_probs", "ref_log_prob", "advantages"))
    batch["old_log_probs"] = -batch["old_log_probs"].abs()
    batch["ref_log_prob"] = -batch["ref_log_prob"].abs()
    outputs = {"log_probs": batch["old_log_probs"] - 0.05, "entropy": batch["advantages"].abs()}
    reference, _ = engine_gradient(loss_fn, batch, outputs, Split(1))
    gradient, _ = engine_gradient(loss_fn, batch, outputs, Split(4))
    return {"ratio": grad_ratio(gradient, reference)}


def _critic_config(**extra):
    from verl.workers.config import CriticConfig

    return CriticConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, loss_agg_mode="token-mean", **extra)


def dpo_group_size(trainer_cls) -> int | None:
    """The ``force_group_size`` ``VERLTrainer._update_actor`` hands the engine for a DPO batch (None: not set)."""
    return group_size_sent_by_trainer(trainer_cls, "dpo", make_rollout_batch(8, seed=2), "none")


def explicit() -> dict:
    import trinity.trainer.verl.trainer as importer  # takes value_loss by name: from ... import value_loss
    from verl.workers.utils.losses import value_loss

    import trinity_overlay
    import verl_overlay

    made_before = functools.partial(value_loss, config=_critic_config())
    seen: dict = {"before": critic_observation(made_before)}
    seen["activate"] = [verl_overlay.activate(), trinity_overlay.activate()]
    seen["activate again"] = [verl_overlay.activate(), trinity_overlay.activate()]
    seen["partial made before"] = critic_observation(made_before)
    seen["name imported before"] = critic_observation(functools.partial(importer.value_loss, config=_critic_config()))
    seen["loss_scale_factor"] = _critic_config(loss_scale_factor=3).loss_scale_factor
    # the actor loss as Trinity's trainer installs it: the switch at its default (on with the overlay)
    seen["actor"] = actor_observation(installed_actor_loss(algorithm_config("grpo", "token-mean")))
    seen["dpo group size"] = dpo_group_size(importer.VERLTrainer)
    seen["deactivate"] = [verl_overlay.deactivate(), trinity_overlay.deactivate()]
    seen["deactivate again"] = [verl_overlay.deactivate(), trinity_overlay.deactivate()]
    seen["after deactivate"] = critic_observation(made_before)
    seen["actor after deactivate"] = actor_observation(installed_actor_loss(algorithm_config("grpo", "token-mean")))
    seen["dpo group size after deactivate"] = dpo_group_size(importer.VERLTrainer)
    try:
        _critic_config(loss_scale_factor=3)
        seen["field after deactivate"] = True
    except TypeError:
        seen["field after deactivate"] = False
    seen["reactivate"] = [verl_overlay.activate(), trinity_overlay.activate()]
    seen["after reactivate"] = critic_observation(made_before)
    return seen


def dump(path: str) -> dict:
    from verl.workers.utils.losses import value_loss

    extra = {"loss_scale_factor": 5} if _accepts_scale() else {}
    config = _critic_config(**extra)
    objects = {
        "partial": functools.partial(value_loss, config=config),
        "config": config,
        "policy_loss": installed_actor_loss(algorithm_config("grpo", "token-mean")),
    }
    Path(path).write_bytes(pickle.dumps(objects))
    return {"dumped": sorted(objects), "with_scale": bool(extra)}


def _accepts_scale() -> bool:
    try:
        _critic_config(loss_scale_factor=1)
        return True
    except TypeError:
        return False


def load(path: str) -> dict:
    objects = pickle.loads(Path(path).read_bytes())
    return {
        "critic": critic_observation(objects["partial"]),
        "actor": actor_observation(objects["policy_loss"]),
        "config loss_scale_factor": getattr(objects["config"], "loss_scale_factor", "missing"),
        "partial config is the config class": type(objects["partial"].keywords["config"]).__name__,
    }


def main(argv: list[str]) -> int:
    use_cpu_unpadding()
    case, *rest = argv
    result = {"explicit": explicit, "dump": dump, "load": load}[case](*rest)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
