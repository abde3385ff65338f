"""A DPO config is checked the way Trinity checks it, in every layout and twice; an unpaired DPO batch is refused.

Trinity checks a config by running its validators (``trinity.common.config_validator.validators``, in order: the
algorithm's own ``check_config``, then the trainer's config translation, which beside verl < 0.8 builds
``trainer.trainer_config`` into a ``veRLConfig`` dataclass); a config may be checked more than once. Here they run as
``Config.check_and_update`` runs them, but for ``BufferConfigValidator``, whose readers import SQLAlchemy's asyncio
support (greenlet, absent from the test environment) and which checks only the buffer's storage. Trinity's defaults
stay as they are (``use_dynamic_bsz`` true). Invariants on the patched tree:

- the DPO loss given a batch that is not whole chosen/rejected pairs raises a ValueError naming its rows and pairs
  (vanilla: one logit for the whole batch, silently);
- ``actor.shuffle: true`` is refused in either layout of ``trainer.trainer_config`` (``actor_rollout_ref.actor`` and
  the flat ``actor`` that verl's engine path reads too), and on a config the first check has built into a
  ``veRLConfig``; a config without it passes two checks (vanilla: shuffle accepted, so pairs get mixed);
- on verl's engine, a ``buffer.train_batch_size`` that would give a GPU part of a pair (or of a fixed micro-batch of
  pairs) is refused at configuration time in Trinity's terms, and a fixed micro-batch size gets a warning that each
  micro-batch holds twice the rows (vanilla: accepted silently; verl asserts at the first update);
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from harness.trinity_configs import FLAT, GPUS, NESTED, check, dpo_config, layout


def check_twice(config) -> list[str]:
    return check(config) + check(config)


def test_dpo_batch_of_unpaired_rows_is_refused(expect, trinity_tree: Path):
    from trinity.algorithm import POLICY_LOSS_FN

    loss_fn = POLICY_LOSS_FN.get("dpo")(backend="verl", beta=0.1)
    generator = torch.Generator().manual_seed(0)
    rows = {name: -torch.rand(5, 6, generator=generator) for name in ("logprob", "ref_logprob")}
    if expect == "bug":
        loss, _ = loss_fn(**rows, action_mask=torch.ones(5, 6, dtype=torch.bool))
        assert torch.isfinite(loss), "upstream's single-logit DPO takes any batch"
        return
    with pytest.raises(ValueError, match="5 rows: 2 pairs and one row without its pair"):
        loss_fn(**rows, action_mask=torch.ones(5, 6, dtype=torch.bool))


@pytest.mark.parametrize("path", [NESTED, FLAT])
def test_engine_shuffle_refused_in_either_layout(expect, tmp_path: Path, trinity_tree: Path, path: str):
    config = dpo_config(tmp_path, layout(path, shuffle=True))
    if expect == "bug":
        check_twice(config)  # accepted: verl's mini-batch iterator then shuffles the rows, pairs mixed
        return
    with pytest.raises(ValueError, match=rf"set `trainer\.trainer_config\.{path}\.shuffle` to false"):
        check(config)


@pytest.mark.parametrize("path", [NESTED, FLAT])
def test_legacy_shuffle_refused_on_the_built_config_too(expect, tmp_path: Path, trinity_legacy_tree: Path, path: str):
    config = dpo_config(tmp_path, layout(path, shuffle=False))
    check_twice(config)  # the first check builds the trainer config into a veRLConfig; the second reads that
    built = config.trainer.trainer_config
    assert type(built).__name__ == "veRLConfig", type(built)
    built.actor_rollout_ref.actor.shuffle = True
    if expect == "bug":
        check(config)
        return
    with pytest.raises(ValueError, match=r"set `trainer\.trainer_config\.actor_rollout_ref\.actor\.shuffle`"):
        check(config)


@pytest.mark.parametrize(
    ("trainer_config", "use_dynamic_bsz"),
    [
        ({}, None),
        (layout(NESTED, ppo_micro_batch_size_per_gpu=2), False),
        (layout(FLAT, ppo_micro_batch_size_per_gpu=2), False),
    ],
    ids=["dynamic-default", "fixed-nested", "fixed-flat"],
)
def test_engine_pairs_cut_across_gpus_refused_at_configuration(
    expect, tmp_path: Path, trinity_tree: Path, trainer_config: dict, use_dynamic_bsz: bool | None
):
    """6 pairs on 4 GPUs leave a GPU part of a pair (or of a micro-batch of 2 pairs) whatever counts the rows."""
    fixed = use_dynamic_bsz is False
    warnings = check_twice(dpo_config(tmp_path, trainer_config, train_batch_size=16, use_dynamic_bsz=use_dynamic_bsz))
    doubled = [message for message in warnings if "2 times as many rows" in message]
    unfit = dpo_config(tmp_path, trainer_config, train_batch_size=6, use_dynamic_bsz=use_dynamic_bsz)
    if expect == "bug":
        assert not doubled, warnings
        check(unfit)  # accepted: verl asserts only at the first update
        return
    assert len(doubled) == (2 if fixed else 0), warnings  # once per check
    with pytest.raises(ValueError, match=rf"`buffer\.train_batch_size` 6 gives each of the {GPUS} data-parallel"):
        check(unfit)
