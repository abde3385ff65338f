"""Trinity-RFT's Tinker trainer reads ``trainer.fix_actor_microbatch_loss_scale`` too: what the carried default does.

``TinkerTrainerWrapper`` (``trinity/trainer/tinker/tinker_trainer.py``) computes each datum's loss (a token mean
for ``token-mean``) and, with the switch off, averages them over the data of the batch (``loss_scale = 1 /
len(logprobs)``); with the switch on and ``token-mean`` it sums them (``loss_scale = 1``). No patch of the series
changes that module. The carried patch 0010 leaves the switch unset in `TrainerConfig` and has Trinity's
`TrainerConfigValidator` turn it on for the veRL trainer only, so a Tinker run keeps upstream's default. Measured on
the real module (the Tinker SDK, absent here, stubbed; it is only imported) with the switch a Tinker config gets
from the validator when it sets none, on a token-mean GRPO batch of ``N`` data with a k2 KL term and an entropy term:

- both trees (upstream's default, off): the loss is the mean of the data's losses, and so is its gradient;
- both trees, switch set true (kept by the validator): upstream's switch-on rule, their sum, ``N`` times the mean.

Both rules are pinned with the switch set explicitly, so the test fails if the module's rules change as well as if
Tinker's default does (as it did when 0010 turned the dataclass default on for every trainer). Other aggregations
ignore the switch there: the mean, whatever the default.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from engine_harness.trinity_configs import algorithm_config

DATA = 6
RESPONSE_LEN = 5


class _StubModule(types.ModuleType):
    """A module whose every attribute is a placeholder class: enough for annotations and imports."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})


@pytest.fixture(scope="module")
def tinker_trainer(trinity_tree: Path):
    """Trinity's real ``trinity.trainer.tinker.tinker_trainer``; the Tinker SDK stubbed where it is not installed."""
    stubbed = []
    if importlib.util.find_spec("tinker") is None:
        for name in ("tinker", "tinker.types"):
            sys.modules[name] = _StubModule(name)
            stubbed.append(name)
        sys.modules["tinker"].types = sys.modules["tinker.types"]
    try:
        from trinity.trainer.tinker import tinker_trainer

        yield tinker_trainer
    finally:
        for name in stubbed:
            sys.modules.pop(name, None)


def _wrapper(tinker_trainer, loss_agg_mode: str, switch: bool | None):
    """A ``TinkerTrainerWrapper`` with its real ``_init_algorithm``, its trainer config (``trainer_type: tinker``)
    through Trinity's real `TrainerConfigValidator`: the switch it gives a config that sets none (None), or the given
    one, which it must keep. Nothing else of ``__init__`` (the Synchronizer actor) is needed by the loss."""
    from trinity.common.config import Config
    from trinity.common.config_validator import TrainerConfigValidator

    config = Config(mode="train")
    config.trainer.trainer_type = "tinker"
    if switch is not None:
        config.trainer.fix_actor_microbatch_loss_scale = switch
    TrainerConfigValidator().validate(config)
    if switch is not None:
        assert config.trainer.fix_actor_microbatch_loss_scale is switch
    wrapper = tinker_trainer.TinkerTrainerWrapper.__new__(tinker_trainer.TinkerTrainerWrapper)
    wrapper.config = SimpleNamespace(algorithm=algorithm_config("grpo", loss_agg_mode), trainer=config.trainer)
    wrapper.logger = logging.getLogger("tinker_trainer")
    wrapper._init_algorithm()
    return wrapper


def _batch(seed: int = 0):
    """Per-datum model inputs as ``to_tinker_input`` gives them (ragged responses), and each datum's log-probs
    over its whole sequence, as the Tinker client hands them to the loss."""
    generator = torch.Generator().manual_seed(seed)
    inputs, logprobs = [], []
    for _ in range(DATA):
        length = int(torch.randint(2, RESPONSE_LEN + 1, (1,), generator=generator))
        old = -torch.rand(length, generator=generator)
        inputs.append(
            {
                "action_mask": torch.rand(length, generator=generator) > 0.2,
                "advantages": torch.randn(length, generator=generator),
                "old_logprob": old,
                "ref_logprob": -torch.rand(length, generator=generator),
            }
        )
        prompt = -torch.rand(3, generator=generator)
        logprobs.append(torch.cat([prompt, old + 0.1 * torch.randn(length, generator=generator)]))
    return inputs, logprobs


def _loss(wrapper, inputs, logprobs):
    wrapper.model_inputs_list = inputs
    leaves = [logprob.clone().requires_grad_(True) for logprob in logprobs]
    loss, _ = wrapper._loss_func([None] * len(leaves), leaves)
    return loss, torch.cat(torch.autograd.grad(loss, leaves))


def test_tinker_token_mean_default_is_upstreams(expect, tinker_trainer):
    inputs, logprobs = _batch()
    loss_on, grad_on = _loss(_wrapper(tinker_trainer, "token-mean", True), inputs, logprobs)
    loss_off, grad_off = _loss(_wrapper(tinker_trainer, "token-mean", False), inputs, logprobs)
    loss_default, grad_default = _loss(_wrapper(tinker_trainer, "token-mean", None), inputs, logprobs)

    # upstream's two rules: on, the sum of the data's losses; off, their mean
    torch.testing.assert_close(loss_on, loss_off * DATA)
    torch.testing.assert_close(grad_on, grad_off * DATA)
    # Tinker's default is upstream's (off) on both trees
    torch.testing.assert_close(loss_default, loss_off, rtol=0, atol=0)
    torch.testing.assert_close(grad_default, grad_off, rtol=0, atol=0)


def test_tinker_other_aggregations_ignore_the_switch(expect, tinker_trainer):
    """The same on both trees: the Tinker trainer reads the switch for token-mean only."""
    inputs, logprobs = _batch(seed=1)
    loss_on, _ = _loss(_wrapper(tinker_trainer, "seq-mean-token-mean", True), inputs, logprobs)
    loss_off, _ = _loss(_wrapper(tinker_trainer, "seq-mean-token-mean", False), inputs, logprobs)
    torch.testing.assert_close(loss_on, loss_off, rtol=0, atol=0)
