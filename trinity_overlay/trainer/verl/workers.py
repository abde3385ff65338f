"""Mirror of ``trinity.trainer.verl.workers``: `TrinityActorRolloutRefWorker.set_trinity_config` as patch 0001 leaves
it: it takes ``trainer.fix_actor_microbatch_loss_scale`` and builds the actor loss with it.

The method is wrapped by veRL's ``register`` decorator; its code replaces that of the function the decorator wraps,
so it runs in the upstream module's namespace (its ``build_trinity_loss``, whose code the policy-loss piece replaces
in place).
"""

from __future__ import annotations

from trinity.trainer.verl.losses import build_trinity_loss

PATCHED_METHODS = ("set_trinity_config",)  # upstream's own, whose code is replaced


class TrinityActorRolloutRefWorker:
    """The patched members of ``TrinityActorRolloutRefWorker``; never instantiated itself."""

    def set_trinity_config(  # type: ignore[no-untyped-def]
        self,
        algo_config,
        rollout_engine_type: str,
        ray_namespace: str,
        fix_actor_microbatch_loss_scale: bool = False,
    ):
        """Set Trinity-specific runtime config on the worker.

        This is called by VERLTrainer after worker initialization to inject:
        - The pluggable policy loss, KL loss, and entropy loss from Trinity's algorithm registry
        - The Ray namespace used to locate Synchronizer and CheckpointMonitor actors
        - `trainer.fix_actor_microbatch_loss_scale`, which the policy loss reads
        """
        self._algo_config = algo_config
        self._ray_namespace = ray_namespace
        self._rollout_engine_type = rollout_engine_type
        if self.actor is not None:
            loss_fn = build_trinity_loss(algo_config, fix_actor_microbatch_loss_scale)
            self.actor.set_loss_fn(loss_fn)
