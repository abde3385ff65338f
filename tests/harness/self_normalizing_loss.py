"""A policy loss that normalizes itself over the global mini-batch, declared as Trinity-RFT's PR #616 (M2PO; open
when read) declares one (``_runtime_keys = {"batch_num_tokens", "dp_size"}``, as its M2PO loss does), for the
regression and parity tests. Registered in the Trinity tree under test only while a test needs it: the registry is
checked elsewhere."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

LOSS_NAME = "self_normalizing_test_loss"


def self_normalizing_loss_class() -> type:
    """A PPO-style token mean over the global mini-batch from the engine's batch info (within the batch without
    it), which records the batch info it received on every call in ``received``."""
    from trinity.algorithm.policy_loss_fn.policy_loss_fn import PolicyLossFn
    from trinity.algorithm.utils import masked_mean

    class SelfNormalizingLossFn(PolicyLossFn):
        _runtime_keys = {"batch_num_tokens", "dp_size"}
        received: list[tuple[object, object]] = []

        def __init__(self, backend: str = "verl", loss_agg_mode: str = "token-mean") -> None:
            super().__init__(backend=backend)
            self.loss_agg_mode = loss_agg_mode

        def __call__(  # type: ignore[override]
            self,
            logprob: torch.Tensor,
            old_logprob: torch.Tensor,
            action_mask: torch.Tensor,
            advantages: torch.Tensor,
            batch_num_tokens: int | None = None,
            dp_size: int | None = None,
            **kwargs,
        ) -> tuple[torch.Tensor, dict]:
            type(self).received.append((batch_num_tokens, dp_size))
            pg_losses = -advantages * torch.exp(logprob - old_logprob)
            if batch_num_tokens is None:
                return masked_mean(pg_losses, action_mask), {}
            return (pg_losses * action_mask).sum() / batch_num_tokens * (dp_size or 1), {}

        @classmethod
        def default_args(cls) -> dict:
            return {"loss_agg_mode": "token-mean"}

    return SelfNormalizingLossFn


@contextmanager
def registered() -> Iterator[type]:
    """The loss class, registered in Trinity's POLICY_LOSS_FN as ``LOSS_NAME`` until the block ends."""
    from trinity.algorithm import POLICY_LOSS_FN

    cls = self_normalizing_loss_class()
    POLICY_LOSS_FN.register_module(LOSS_NAME, cls, force=True)
    try:
        yield cls
    finally:
        POLICY_LOSS_FN.modules.pop(LOSS_NAME, None)


def algorithm_config(terms: bool):
    """An AlgorithmConfig with the loss, token-mean, and the k2 KL and entropy terms when ``terms``."""
    from trinity.common.config import AlgorithmConfig

    return AlgorithmConfig(
        policy_loss_fn=LOSS_NAME,
        policy_loss_fn_args={"loss_agg_mode": "token-mean"},
        kl_loss_fn="k2" if terms else "none",
        kl_loss_fn_args={"kl_coef": 0.05} if terms else {},
        entropy_loss_fn="default" if terms else "none",
        entropy_loss_fn_args={"entropy_coef": 0.01 if terms else 0.0},
        loss_agg_mode="token-mean",
    )
