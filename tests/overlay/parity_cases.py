"""Compute every loss case the overlay/patch parity test compares, in whichever process runs this file.

``python parity_cases.py OUT.pt`` runs the real verl critic ``value_loss``, verl's ``ppo_loss`` with GMPO, its
``distillation_ppo_loss``, and Trinity's ``TrinityPolicyLoss``
through verl's engine steps (tests/harness/sim.py) for every ``loss_agg_mode`` and algorithm, and for
every registered policy loss (`policy_loss_cases.py`: REC, MIX, MIX_CHORD, DPO's pair grouping, ...) and a loss
that normalizes itself (tests/harness/self_normalizing_loss.py), several splits and data-parallel sizes, and
saves each case's micro-batch losses, gradient and metrics, with which files the upstream modules came from and what
the overlays say. The test runs it once on the installed releases with
the overlays on and once on the patched checkouts, and compares the two bit for bit. Each fix names the functions
that compute its cases (those ``main`` calls) in ``parity`` of its series' parts.toml (test_fix_completeness.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # policy_loss_cases (-P leaves it out)
sys.path.append(str(Path(__file__).resolve().parents[2]))  # engine_harness, after the installed overlays
# the tests' helpers as `harness`: an installed sdist may bring a top-level `tests` package of its own
sys.path.append(str(Path(__file__).resolve().parents[1]))

from harness.cov_selection import worker_masks  # noqa: E402
from harness.is_batch_norm import worker_batch_means  # noqa: E402
from harness.self_normalizing_loss import algorithm_config as self_normalizing_config  # noqa: E402
from harness.self_normalizing_loss import registered  # noqa: E402
from harness.sim import engine_gradient  # noqa: E402
from harness.training_worker import StubEngine, add_loss_input, train_mini_batches  # noqa: E402
from harness.trinity_configs import FLAT, NESTED, check, dpo_config, installed_actor_loss, layout  # noqa: E402
from policy_loss_cases import every_policy_loss_cases  # noqa: E402

from engine_harness import LOSS_AGG_MODES
from engine_harness.sim import (  # noqa: E402
    PROMPT_LEN,
    RESPONSE_LEN,
    Split,
    actor_config,
    make_rollout_batch,
    use_cpu_unpadding,
)
from engine_harness.trinity_configs import algorithm_config  # noqa: E402
from engine_harness.worker_statistics import asked_for  # noqa: E402

ALGORITHMS = ["ppo", "grpo", "dpo"]
SPLITS = [(1, Split(1)), (1, Split(2)), (1, Split(3, dynamic=True)), (2, Split(2))]
BATCH_SIZE = 24


def _plain(value: Any) -> Any:
    """Metrics as comparable values: a verl Metric becomes (aggregation, values)."""
    if hasattr(value, "aggregation") and hasattr(value, "values"):
        return ("Metric", str(value.aggregation), [_plain(item) for item in value.values])
    if isinstance(value, torch.Tensor):
        return ("tensor", value.detach().clone())
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def _run(
    loss_fn,
    batch,
    outputs,
    dp_size: int,
    split: Split,
    force_group_size: int | None = None,
    global_batch_info: bool = True,
) -> dict[str, Any]:
    losses: list[torch.Tensor] = []

    def recording(model_output, data):
        loss, metrics = loss_fn(model_output, data)
        losses.append(loss.detach().clone())
        return loss, metrics

    gradient, metrics = engine_gradient(
        recording,
        batch,
        outputs,
        split,
        dp_size=dp_size,
        global_batch_info=global_batch_info,
        force_group_size=force_group_size or 1,
    )
    return {"losses": losses, "gradient": gradient, "metrics": _plain(metrics)}


def critic_cases() -> dict[str, dict[str, Any]]:
    from verl.workers.config import CriticConfig
    from verl.workers.utils.losses import value_loss

    batch = make_rollout_batch(BATCH_SIZE, seed=0, extra_fields=("values", "returns"))
    noise = torch.randn(batch["values"].shape, generator=torch.Generator().manual_seed(7))
    outputs = {"values": batch["values"] + 0.3 * noise}
    cases = {}
    for mode in LOSS_AGG_MODES:
        for scale in (None, 11):
            extra = {} if scale is None else {"loss_scale_factor": scale}
            try:
                config = CriticConfig(
                    strategy="fsdp", ppo_micro_batch_size_per_gpu=1, cliprange_value=0.2, loss_agg_mode=mode, **extra
                )
            except TypeError as error:  # vanilla verl: no loss_scale_factor
                cases[f"critic {mode} scale={scale}"] = {"error": str(error)}
                continue
            loss_fn = lambda model_output, data, config=config: value_loss(config, model_output, data)  # noqa: E731
            for dp_size, split in SPLITS:
                cases[f"critic {mode} scale={scale} dp{dp_size} {split}"] = _run(
                    loss_fn, batch, outputs, dp_size, split
                )
            cases[f"critic {mode} scale={scale} outside-engine"] = _run(
                loss_fn, batch, outputs, 1, Split(2), global_batch_info=False
            )
    return cases


def geo_mean_cases() -> dict[str, dict[str, Any]]:
    """verl's ppo_loss with the GMPO policy loss (patch 0003), token-mean and a sequence mean."""
    from verl.workers.config import PolicyLossConfig
    from verl.workers.utils.losses import ppo_loss

    batch = make_rollout_batch(BATCH_SIZE, seed=2, extra_fields=("old_log_probs", "advantages"))
    batch["old_log_probs"] = -batch["old_log_probs"].abs()
    noise = torch.randn(batch["old_log_probs"].shape, generator=torch.Generator().manual_seed(13))
    outputs = {"log_probs": batch["old_log_probs"] + 0.1 * noise}
    cases = {}
    for mode in ("token-mean", "seq-mean-token-mean"):
        config = actor_config(mode, policy_loss=PolicyLossConfig(loss_mode="geo_mean"))
        loss_fn = lambda model_output, data, config=config: ppo_loss(config, model_output, data)  # noqa: E731
        for dp_size, split in SPLITS:
            cases[f"geo_mean {mode} dp{dp_size} {split}"] = _run(loss_fn, batch, outputs, dp_size, split)
    return cases


def distillation_cases() -> dict[str, dict[str, Any]]:
    """verl's on-policy distillation loss (patch 0002): supervised k3, task rewards off, the teacher's log-probs given
    with the batch; each split a fresh worker's first call (fresh configs), every ``loss_agg_mode``."""
    from engine_harness.losses import loss_function

    batch = make_rollout_batch(BATCH_SIZE, seed=3, extra_fields=("advantages",))
    generator = torch.Generator().manual_seed(17)
    shape = (BATCH_SIZE, RESPONSE_LEN)
    student = -torch.rand(shape, generator=generator) * 2
    batch["old_log_probs"] = student + 0.05 * torch.randn(shape, generator=generator)
    # the teacher's log-prob of response token t sits at the position before it, as the model's own output does
    teacher = torch.zeros(BATCH_SIZE, PROMPT_LEN + RESPONSE_LEN, 1)
    teacher[:, PROMPT_LEN - 1 : PROMPT_LEN - 1 + RESPONSE_LEN, 0] = -torch.rand(shape, generator=generator) * 2
    batch["teacher_logprobs"] = teacher
    batch["teacher_ids"] = torch.zeros(teacher.shape, dtype=torch.long)
    outputs = {"log_probs": student}
    cases = {}
    for mode in LOSS_AGG_MODES:
        for dp_size, split in SPLITS:
            loss = loss_function("distillation", mode, strategy="fsdp")
            loss_fn = lambda model_output, data, loss=loss: loss(model_output=model_output, data=data)  # noqa: E731
            cases[f"distillation {mode} dp{dp_size} {split}"] = _run(loss_fn, batch, outputs, dp_size, split)
    return cases


def _statistics_config(loss_mode: str, rollout_is: str = "token"):
    """The actor config of a loss whose statistic the engine worker computes over the mini-batch (verl 0004, 0005)."""
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.workers.config import PolicyLossConfig

    if loss_mode == "kl_cov":
        policy_loss = PolicyLossConfig(loss_mode="kl_cov", kl_cov_ratio=0.05, ppo_kl_coef=1.0)
    elif loss_mode == "clip_cov":  # about half the tokens are candidates: a draw that can differ
        policy_loss = PolicyLossConfig(loss_mode="clip_cov", clip_cov_ratio=0.05, clip_cov_lb=0.0, clip_cov_ub=5.0)
    else:
        correction = RolloutCorrectionConfig(
            rollout_is=rollout_is,
            rollout_is_threshold=2.0,
            rollout_is_batch_normalize=True,
            bypass_mode=True,
            loss_type="reinforce",
        )
        policy_loss = PolicyLossConfig(loss_mode="bypass_mode", rollout_correction=correction)
    return actor_config("token-mean", policy_loss=policy_loss)


def mini_batch_statistics_cases() -> dict[str, Any]:
    """verl's ppo_loss with KL-Cov's and Clip-Cov's tokens chosen over the mini-batch (verl 0006, 0005 on 0004's hook;
    verl-0.7 0003) and bypass mode's IS weights divided by the mini-batch's mean (verl 0007, 0008; verl-0.7 0004): the
    mask or mean the worker computes (at dp 1, in this process), each split's losses and gradient with it in the
    batch, and what the real ``TrainingWorker`` sends a stand-in engine for two mini-batches (the first chosen from
    ``old_log_probs``, which the worker computed first, the second from a forward)."""
    from verl.workers.utils.losses import ppo_loss

    batch = make_rollout_batch(BATCH_SIZE, seed=4, extra_fields=("old_log_probs", "advantages"))
    batch["old_log_probs"] = -batch["old_log_probs"].abs()
    noise = torch.randn(batch["old_log_probs"].shape, generator=torch.Generator().manual_seed(17))
    log_probs = batch["old_log_probs"] + 0.1 * noise
    requests = {mode: (batch, log_probs, _statistics_config(mode)) for mode in ("kl_cov", "clip_cov")}
    statistics: dict[str, torch.Tensor | None] = dict(worker_masks(requests, 1))
    means = worker_batch_means(
        {
            level: {
                "log_prob": log_probs,
                "rollout_log_prob": batch["old_log_probs"],
                "response_mask": batch["response_mask"],
                "rollout_is": level,
                "rollout_is_threshold": 2.0,
            }
            for level in ("token", "sequence")
        },
        1,
    )
    if means is not None:
        statistics |= {f"bypass {level}": mean for level, mean in means.items()}
    cases: dict[str, Any] = {}
    for name, key, config_args in (
        ("kl_cov", "kl_cov_mask", ("kl_cov",)),
        ("clip_cov", "clip_cov_mask", ("clip_cov",)),
        ("bypass token", "rollout_is_batch_mean", ("bypass_mode", "token")),
        ("bypass sequence", "rollout_is_batch_mean", ("bypass_mode", "sequence")),
    ):
        statistic = statistics.get(name)  # None on vanilla verl: each micro-batch takes its own
        cases[f"statistics {name} computed"] = statistic
        with_statistic = batch.clone()
        if statistic is not None:
            add_loss_input(with_statistic, key, statistic)
        config = _statistics_config(*config_args)
        loss_fn = lambda model_output, data, config=config: ppo_loss(config, model_output, data)  # noqa: E731
        for dp_size, split in SPLITS:
            torch.manual_seed(0)  # vanilla's Clip-Cov draws from the global generator
            outputs = {"log_probs": log_probs}
            cases[f"statistics {name} dp{dp_size} {split}"] = _run(loss_fn, with_statistic, outputs, dp_size, split)
        engine = StubEngine(log_probs, before_update=batch["old_log_probs"])
        train_mini_batches(engine, batch.clone(), BATCH_SIZE // 2, infer_first=True, **asked_for(config))
        sent = [mini_batch.get(key, None) for mini_batch in engine.trained]
        cases[f"statistics {name} worker"] = {"sent": sent, "forwards": engine.inferred}
    return cases


def _actor_inputs() -> tuple[Any, dict[str, torch.Tensor]]:
    batch = make_rollout_batch(
        BATCH_SIZE, seed=1, extra_fields=("old_log_probs", "ref_log_prob", "advantages"), holes_in_mask=True
    )
    noise = torch.randn(batch["old_log_probs"].shape, generator=torch.Generator().manual_seed(11))
    batch["old_log_probs"] = -batch["old_log_probs"].abs()
    batch["ref_log_prob"] = -batch["ref_log_prob"].abs()
    outputs = {
        "log_probs": batch["old_log_probs"] + 0.1 * noise,
        "entropy": torch.rand(noise.shape, generator=torch.Generator().manual_seed(12)),
    }
    return batch, outputs


def actor_cases() -> dict[str, dict[str, Any]]:
    """`TrinityPolicyLoss` as Trinity's trainer installs it (the switch at its default), and with the switch off
    outside the engine, where on it would need the engine's batch info."""
    batch, outputs = _actor_inputs()
    cases = {}
    for algorithm in ALGORITHMS:
        for mode in LOSS_AGG_MODES:
            for terms in (True, False):
                config = algorithm_config(algorithm, mode, kl=terms, entropy=terms)
                loss_fn = installed_actor_loss(config)
                name = f"actor {algorithm} {mode} {'pg+entropy+kl' if terms else 'pg-only'}"
                for dp_size, split in SPLITS:
                    cases[f"{name} dp{dp_size} {split}"] = _run(loss_fn, batch, outputs, dp_size, split)
                switch_off = installed_actor_loss(config, False)
                cases[f"{name} outside-engine"] = _run(switch_off, batch, outputs, 1, Split(2), global_batch_info=False)
    return cases


def self_normalizing_cases() -> dict[str, dict[str, Any]]:
    """A policy loss that takes the engine's batch info as runtime keys and normalizes itself, as M2PO does in
    Trinity-RFT's PR #616, open when read (registered while its cases run)."""
    batch, outputs = _actor_inputs()
    cases = {}
    with registered():
        for terms in (True, False):
            loss_fn = installed_actor_loss(self_normalizing_config(terms))
            name = f"actor self-normalizing {'pg+entropy+kl' if terms else 'pg-only'}"
            for dp_size, split in SPLITS:
                cases[f"{name} dp{dp_size} {split}"] = _run(loss_fn, batch, outputs, dp_size, split)
            switch_off = installed_actor_loss(self_normalizing_config(terms), False)
            cases[f"{name} outside-engine"] = _run(switch_off, batch, outputs, 1, Split(2), global_batch_info=False)
    return cases


def switch_default_cases() -> dict[str, Any]:
    """``trainer.fix_actor_microbatch_loss_scale`` as Trinity's trainer validator leaves it (unset or set, for the
    veRL and the Tinker trainer), its default in the structured config Trinity loads YAML into, and what the veRL
    trainer says of a config whose switch is still unset."""
    from omegaconf import OmegaConf
    from trinity.common.config import Config, TrainerConfig
    from trinity.common.config_validator import TrainerConfigValidator

    cases: dict[str, Any] = {
        "switch structured default": OmegaConf.to_object(
            OmegaConf.structured(TrainerConfig)
        ).fix_actor_microbatch_loss_scale
    }
    for trainer_type in ("verl", "tinker"):
        for switch in (None, True, False):
            config = Config(mode="explore")
            config.trainer.trainer_type = trainer_type
            if switch is not None:
                config.trainer.fix_actor_microbatch_loss_scale = switch
            TrainerConfigValidator().validate(config)
            cases[f"switch {trainer_type} set {switch}"] = config.trainer.fix_actor_microbatch_loss_scale
    cases["switch unvalidated"] = _outcome(
        lambda: installed_actor_loss(algorithm_config("grpo", "token-mean"), validated=False) and []
    )
    return cases


def config_cases() -> dict[str, Any]:
    """What CriticConfig and verl's Hydra composition look like (the field, its place, the composed section)."""
    import dataclasses

    import verl
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from verl.workers.config import CriticConfig, FSDPCriticConfig

    config_dir = Path(verl.__file__).resolve().parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        composed = compose(config_name="ppo_trainer", overrides=["actor_rollout_ref.actor.loss_scale_factor=333"])
    return {
        "critic fields": [field.name for field in dataclasses.fields(CriticConfig)],
        "fsdp critic fields": [field.name for field in dataclasses.fields(FSDPCriticConfig)],
        "critic repr": repr(CriticConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1)),
        "critic doc": CriticConfig.__doc__,
        "composed critic": OmegaConf.to_container(composed.critic, resolve=True),
    }


def _outcome(action) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """What a check or a call says: its error, or the warnings it logged about rows, shuffling or the loss flag."""
    try:
        warnings = action()
    except (ValueError, TypeError) as error:
        return {"error": f"{type(error).__name__}: {error}"}
    words = ("rows", "shuffle", "fix_actor_microbatch_loss_scale")
    return {"warnings": [message for message in warnings or () if any(word in message for word in words)]}


def dpo_check_cases() -> dict[str, Any]:
    """What Trinity's configuration check says of DPO configs (either layout, fixed or dynamic micro-batches, pairs
    that fit each GPU or not, shuffling), what the DPO loss says of unpaired rows, and what the loss builder says of
    the deprecated flag."""
    import logging
    import tempfile
    from unittest import mock

    from trinity.algorithm import POLICY_LOSS_FN
    from trinity.trainer.verl.losses import build_trinity_loss

    def logged(call):  # type: ignore[no-untyped-def]
        with mock.patch.object(logging.Logger, "warning") as warning:
            call()
        return [str(item.args[0]) for item in warning.call_args_list]

    cases: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as model_dir:
        for path in (NESTED, FLAT):
            for actor, use_dynamic_bsz in (({"shuffle": True}, None), ({"ppo_micro_batch_size_per_gpu": 2}, False)):
                for pairs in (16, 6, 4):  # 4 pairs on 4 GPUs: a micro-batch of 1 pair, not 2
                    config = dpo_config(Path(model_dir), layout(path, **actor), pairs, use_dynamic_bsz)
                    cases[f"dpo check {path} {actor} {pairs} pairs"] = _outcome(lambda c=config: check(c) + check(c))
        config = dpo_config(Path(model_dir), {}, 6)
        cases["dpo check dynamic default 6 pairs"] = _outcome(lambda: check(config))
    loss_fn = POLICY_LOSS_FN.get("dpo")(backend="verl", beta=0.1)
    rows = {name: -torch.rand(5, 6, generator=torch.Generator().manual_seed(3)) for name in ("logprob", "ref_logprob")}
    mask = torch.ones(5, 6, dtype=torch.bool)
    cases["dpo loss 5 rows"] = _outcome(lambda: logged(lambda: loss_fn(**rows, action_mask=mask)))
    flagged = algorithm_config("ppo", "token-mean")
    cases["loss builder flag"] = _outcome(lambda: logged(lambda: build_trinity_loss(flagged, True)))
    return cases


def provenance() -> dict[str, Any]:
    import trinity.trainer.verl.losses
    import verl.workers.utils.losses

    overlays = None
    try:
        from patchset_overlay.status import collect

        overlays = collect()
    except ImportError:
        pass
    return {
        "verl": verl.workers.utils.losses.__file__,
        "trinity": trinity.trainer.verl.losses.__file__,
        "overlays": overlays,
    }


def main(out: str) -> int:
    use_cpu_unpadding()
    torch.use_deterministic_algorithms(True)
    cases = {
        **critic_cases(),
        **geo_mean_cases(),
        **distillation_cases(),
        **mini_batch_statistics_cases(),
        **actor_cases(),
        **self_normalizing_cases(),
        **every_policy_loss_cases(_run, SPLITS, BATCH_SIZE),
        **dpo_check_cases(),
        **switch_default_cases(),
    }
    results = {"provenance": provenance(), "cases": cases, "config": config_cases()}
    torch.save(results, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
