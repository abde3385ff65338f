"""Mirror of ``trinity.algorithm.policy_loss_fn.policy_loss_fn``: what patches 0003 and 0004 add to `PolicyLossFn`,
and `PolicyLossFnMeta.__new__` as 0003 leaves it (the runtime keys upstream's default branch has).

Set on the upstream classes themselves, so every registered loss (and any loss a user derives) inherits them; the
metaclass's ``__new__`` applies to the loss classes made after the overlay is on (Trinity's own losses declare no
runtime keys, so those made before lose nothing).
"""

from __future__ import annotations

import inspect
from abc import ABCMeta
from typing import Any


class PolicyLossFnMeta:
    """The patched member of ``PolicyLossFnMeta``; never used as a metaclass itself."""

    def __new__(cls, name: str, bases: tuple, dct: dict) -> Any:  # type: ignore[misc]
        """0003: parameters named in the class's ``_runtime_keys`` (e.g. the engine's ``batch_num_tokens`` and
        ``dp_size``) are not selected from the batch; the trainer passes them, and the wrapper lets them through.
        Otherwise upstream's own: ``ABCMeta.__new__`` is named because this runs as upstream's metaclass method."""
        signature = inspect.signature(dct["__call__"])
        runtime_keys = set(dct.get("_runtime_keys", ()))
        param_names = [
            key for key in signature.parameters.keys() if key not in cls.ignore_keys and key not in runtime_keys
        ]
        dct["_select_keys"] = param_names

        def select_keys(self):  # type: ignore[no-untyped-def]
            """Returns parameter keys mapped to the specific training framework's naming convention."""
            keys = [self.mapper.from_trinity(key) for key in self._select_keys]
            return keys

        def decorator(func):  # type: ignore[no-untyped-def]
            def wrapper(self, *args, **kwargs):  # type: ignore[no-untyped-def]
                """Filters and converts parameter names according to the training framework's convention."""
                new_kwargs = {}
                for key, value in kwargs.items():
                    key = self.mapper.to_trinity(key)
                    if key == "logprob" or key in self._select_keys or key in runtime_keys:  # remove unused keys
                        new_kwargs[key] = value
                return func(self, *args, **new_kwargs)

            return wrapper

        dct["select_keys"] = property(select_keys)
        dct["__call__"] = decorator(dct["__call__"])
        return ABCMeta.__new__(cls, name, bases, dct)  # type: ignore[arg-type]


class PolicyLossFn:
    """The added members of ``PolicyLossFn``; never instantiated itself."""

    # 0004: consecutive rows the loss compares with each other (e.g. a DPO pair), which a trainer must keep in one
    # micro-batch, in their order
    group_size: int = 1

    @property
    def loss_aggregation(self) -> str | None:
        """0003: how the loss aggregates a batch, so that a trainer can weight each micro-batch.

        veRL's engine sums the losses of the micro-batches of a mini-batch, so each one must be weighted by its
        share of the mini-batch, and that share depends on what the loss averages over. One of the
        `aggregate_loss` modes ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
        "seq-mean-token-sum-norm"), "pair-mean" (a mean over chosen/rejected pairs), "micro-batch-weighted"
        (the loss weights each micro-batch itself, for the legacy trainer) or "self-normalized": the loss takes the
        engine's `batch_num_tokens` and `dp_size` as runtime keys (`_runtime_keys`) and returns its share of the
        global mini-batch itself, so it must not be weighted again. Losses with a `loss_agg_mode` use it; None
        means that the loss does not say.
        """
        if {"batch_num_tokens", "dp_size"} <= set(getattr(self, "_runtime_keys", ())):
            return "self-normalized"
        return getattr(self, "loss_agg_mode", None)
