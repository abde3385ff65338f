"""Mirror of ``verl.workers.config.actor``: the ``ActorConfig.policy_loss_inputs`` field (patch 0004; 0005 uses it too).

Added to the upstream dataclass (and its subclasses: FSDP, Megatron, ...) in place, right after ``global_batch_info``
as the patch puts it, so configs built from Hydra, made earlier or unpickled are all of the one class that has the
field. Like ``global_batch_info``, ``ppo_loss`` fills it per call: each micro-batch's rows of KL-Cov's / Clip-Cov's
mask and of bypass mode's IS mean, which the engine worker computed over the whole mini-batch (None where absent).
"""

from __future__ import annotations

import dataclasses

FIELD_NAME = "policy_loss_inputs"
FIELD_TYPE = dict
FIELD_AFTER = "global_batch_info"


def field_default() -> dataclasses.Field:
    """A fresh ``field(default_factory=dict)`` for each install (dataclasses takes the Field object over)."""
    return dataclasses.field(default_factory=dict)
