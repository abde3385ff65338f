"""The switch-default piece (patch 0010, carried): ``trainer.fix_actor_microbatch_loss_scale`` unset by default and
resolved by Trinity's `TrainerConfigValidator` to on for veRL's trainers, off for Tinker (upstream's default there), so
that the policy-loss piece's normalization is what a veRL run gets unless its config sets the switch off, and a
Tinker run keeps upstream's scale; an explicit value is kept everywhere.

On verl's engine path only: beside verl < 0.8 Trinity trains through its legacy actors, which this overlay does not
mirror (0008), and there the switch would turn on upstream's own token-mean rule instead; the piece stays off there
and says so. A config that skipped the validator (the switch still unset) is refused by `VERLTrainer.prepare` (the
policy-loss piece's mirror of it). The Tinker trainer's rules: docs/fixes.md, "The switch".
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from types import ModuleType

from patchset_overlay.source import UpstreamSource
from patchset_overlay.spec import Piece, Target
from trinity_overlay.pieces.dpo_pairs_and_steps import beside_legacy_verl

CONFIG = "trinity.common.config"
CONFIG_VALIDATOR = "trinity.common.config_validator"


def upstream_has_default_on(source: UpstreamSource) -> str | None:
    """Trinity's `TrainerConfig` already leaves the switch unset, or already turns it on."""
    segment = source.segment(CONFIG, "TrainerConfig")
    if "fix_actor_microbatch_loss_scale: Optional[bool] = None" in segment:
        return "already leaves trainer.fix_actor_microbatch_loss_scale unset by default"
    if "fix_actor_microbatch_loss_scale: bool = True" in segment:
        return "already defaults trainer.fix_actor_microbatch_loss_scale to True"
    return None


def install_default(module: ModuleType, undo: list[Callable[[], None]]) -> None:
    """The dataclass default of `TrainerConfig.fix_actor_microbatch_loss_scale`, unset: its field (default and
    annotation), class attribute and ``__init__`` default, each only where it holds upstream's default (else nothing
    is changed)."""
    from patchset_overlay.replace import ReplaceError
    from trinity_overlay.common import config

    cls = module.TrainerConfig
    field = cls.__dataclass_fields__[config.FIELD]
    init = cls.__init__
    parameter = inspect.signature(init).parameters[config.FIELD]
    if field.default is not config.UPSTREAM_DEFAULT or parameter.default is not config.UPSTREAM_DEFAULT:
        raise ReplaceError(f"{module.__name__}.TrainerConfig.{config.FIELD} does not default to upstream's False")
    if cls.__annotations__.get(config.FIELD) != config.UPSTREAM_ANNOTATION:
        raise ReplaceError(f"{module.__name__}.TrainerConfig.{config.FIELD} is not annotated as upstream's bool")
    if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
        saved_kwdefaults = dict(init.__kwdefaults__)
        init.__kwdefaults__ = {**saved_kwdefaults, config.FIELD: config.DEFAULT}
        restore_init = lambda: setattr(init, "__kwdefaults__", saved_kwdefaults)  # noqa: E731
    else:
        saved_defaults = init.__defaults__
        # __defaults__ holds the defaults of the last positional parameters, in order
        names = [p.name for p in inspect.signature(init).parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
        index = names[len(names) - len(saved_defaults) :].index(config.FIELD)
        defaults = list(saved_defaults)
        defaults[index] = config.DEFAULT
        init.__defaults__ = tuple(defaults)
        restore_init = lambda: setattr(init, "__defaults__", saved_defaults)  # noqa: E731
    saved_type = field.type
    field.default = config.DEFAULT
    field.type = config.ANNOTATION
    cls.__annotations__[config.FIELD] = config.ANNOTATION
    had_attribute = config.FIELD in vars(cls)
    setattr(cls, config.FIELD, config.DEFAULT)

    def restore() -> None:
        restore_init()
        field.default = config.UPSTREAM_DEFAULT
        field.type = saved_type
        cls.__annotations__[config.FIELD] = config.UPSTREAM_ANNOTATION
        if had_attribute:
            setattr(cls, config.FIELD, config.UPSTREAM_DEFAULT)

    undo.append(restore)


def install_resolution(module: ModuleType, undo: list[Callable[[], None]]) -> None:
    """`TrainerConfigValidator.validate` resolves an unset switch first, as the patched method does, then runs
    upstream's own."""
    from patchset_overlay.replace import set_class_attributes
    from trinity_overlay.common.config_validator import resolve_loss_scale_switch

    upstream_validate = module.TrainerConfigValidator.validate

    @functools.wraps(upstream_validate)
    def validate(self, config) -> None:  # type: ignore[no-untyped-def]
        resolve_loss_scale_switch(config)
        upstream_validate(self, config)

    undo.append(set_class_attributes(module.TrainerConfigValidator, {"validate": validate}))


PIECE = Piece(
    name="loss-scale-switch-default",
    patches=("0010-config-loss-scale-switch-on-by-default",),
    targets=(Target(CONFIG, "TrainerConfig"), Target(CONFIG_VALIDATOR, "TrainerConfigValidator")),
    installers={CONFIG: install_default, CONFIG_VALIDATOR: install_resolution},
    upstream_has_fix=upstream_has_default_on,
    unfit=beside_legacy_verl,
)
