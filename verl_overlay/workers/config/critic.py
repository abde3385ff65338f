"""Mirror of ``verl.workers.config.critic``: the ``CriticConfig.loss_scale_factor`` field (patch 0001).

Added to the upstream dataclass (and its subclasses) in place, right after ``loss_agg_mode`` as the patch puts it,
so configs built from Hydra, made earlier or unpickled are all of the one class that has the field.
"""

from __future__ import annotations

from typing import Optional

FIELD_NAME = "loss_scale_factor"
FIELD_TYPE = Optional[int]  # noqa: UP045 - the annotation the patched upstream field has
FIELD_DEFAULT = None
FIELD_AFTER = "loss_agg_mode"
FIELD_DOC = (
    "        loss_scale_factor (Optional[int]): Scale factor for 'seq-mean-token-sum-norm' loss aggregation mode.\n"
    "            If None, uses response_length. Set to a constant to ensure consistent normalization.\n"
)
