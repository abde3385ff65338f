"""Mirror of ``trinity.common.config``: `TrainerConfig`'s default for ``fix_actor_microbatch_loss_scale`` as patch 0010
leaves it.

Only the default changes; the dataclass keeps every field as upstream declares it. The piece sets it where a
dataclass keeps a default: the field (read by ``dataclasses.fields`` and OmegaConf's structured configs), the class
attribute and the generated ``__init__``'s defaults.
"""

from __future__ import annotations

FIELD = "fix_actor_microbatch_loss_scale"
UPSTREAM_DEFAULT = False
DEFAULT = True  # this patchset's default: its users keep the normalization of the Trinity fixes
