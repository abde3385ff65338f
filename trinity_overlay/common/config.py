"""Mirror of ``trinity.common.config``: `TrainerConfig`'s ``fix_actor_microbatch_loss_scale`` as patch 0010 leaves it.

The field becomes optional with no value (unset); Trinity's `TrainerConfigValidator` resolves it by trainer type
(``trinity_overlay/common/config_validator.py``). The piece sets it where a dataclass keeps a default: the field
(read by ``dataclasses.fields`` and OmegaConf's structured configs, with its annotation, which OmegaConf checks the
default against), the class attribute and the generated ``__init__``'s defaults.
"""

from __future__ import annotations

FIELD = "fix_actor_microbatch_loss_scale"
UPSTREAM_DEFAULT = False
UPSTREAM_ANNOTATION = "bool"
DEFAULT = None  # unset: the validator turns it on for veRL's trainers, off for Tinker (upstream's default there)
ANNOTATION = "Optional[bool]"  # a string, as the module's ``from __future__ import annotations`` keeps it
