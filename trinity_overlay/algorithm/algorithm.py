"""Mirror of ``trinity.algorithm.algorithm``: `DPOAlgorithm.check_config` as patch 0006 leaves it.

The classmethod's function gets the patched code, so it runs in the upstream module's namespace (its ``logger``).
"""

from __future__ import annotations

from trinity.algorithm.algorithm import logger
from trinity.common.constants import SyncMethod


class DPOAlgorithm:
    """The patched members of ``DPOAlgorithm``; never instantiated itself."""

    @classmethod
    def check_config(cls, config) -> None:  # type: ignore[no-untyped-def]
        """Upstream's checks, then 0006: ``actor.shuffle`` refused (either layout, a built veRLConfig)."""
        if config.mode == "train":
            if (
                config.buffer.trainer_input.experience_buffer is None
                or not config.buffer.trainer_input.experience_buffer.path
            ):
                raise ValueError(
                    "`buffer.trainer_input.experience_buffer.path` is required when `algorithm.algorithm_type == dpo`"
                )
        elif config.mode in ["both", "explore"]:
            raise ValueError(f"DPO does not support `{config.mode}` mode")

        if config.synchronizer.sync_method != SyncMethod.CHECKPOINT:
            config.synchronizer.sync_method = SyncMethod.CHECKPOINT
            logger.warning(
                "DPO only supports checkpoint synchronization, set `synchronizer.sync_method` to `checkpoint`."
            )
        config.synchronizer.sync_interval = config.trainer.save_interval
        if config.algorithm.repeat_times != 2:
            config.algorithm.repeat_times = 2  # Fake repeat times
        if config.algorithm.kl_loss_fn in {"none", None}:
            config.algorithm.kl_loss_fn = "k2"
            logger.warning("DPO must use KL loss. Set `algorithm.kl_loss_fn` to `k2`")
        # the trainers keep each chosen/rejected pair whole, but a shuffle reorders rows first.
        # trainer_config is a mapping in either layout (veRL's engine reads both), or a veRLConfig
        # once the legacy config translation has built it (a config checked a second time)
        for path in ("actor_rollout_ref.actor", "actor"):
            section = config.trainer.trainer_config
            for key in (*path.split("."), "shuffle"):
                section = section.get(key) if isinstance(section, dict) else getattr(section, key, None)
            if section:
                raise ValueError(
                    "DPO reads consecutive rows as chosen/rejected pairs, which shuffling the rows "
                    f"would mix up: set `trainer.trainer_config.{path}.shuffle` to false"
                )
