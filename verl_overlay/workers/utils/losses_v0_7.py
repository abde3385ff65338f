"""``value_loss`` and ``ppo_loss`` of ``verl.workers.utils.losses`` as the verl-0.7 series leaves them on verl 0.7.1:
its critic patch (0001, piece `verl_overlay.pieces.critic_v0_7`) and its mini-batch statistics (0003 and 0004, piece
`verl_overlay.pieces.mini_batch_statistics_v0_7`).

verl 0.7.1's ``value_loss`` and ``ppo_loss`` are not 0.8.0's (``value_loss`` slices the model output with
``_slice_response_from_unpad_output``; both read the TensorDict without ``select()``), so their patched code is a
file of its own beside the 0.8.0 mirror (``losses.py``); both change the same upstream functions. Installed by
replacing the upstream function's code in place, so it runs in ``verl.workers.utils.losses``'s namespace: every
global below is that module's own object.
"""

from __future__ import annotations

from tensordict import TensorDict
from verl.trainer.ppo.core_algos import agg_loss, compute_value_loss, get_policy_loss_fn, kl_penalty
from verl.utils.metric import AggregationType, Metric
from verl.utils.torch_functional import masked_mean
from verl.workers.config import ActorConfig, CriticConfig
from verl.workers.utils.losses import _slice_response_from_unpad_output
from verl.workers.utils.padding import no_padding_2_padding


def value_loss(config: CriticConfig, model_output, data: TensorDict, dp_group=None):
    """Value loss of one micro-batch, as its share of the global mini-batch loss inside verl's engine.

    Args:
        config: CriticConfig
        model_output: model output from the model
        data: the input to the model
        dp_group: data parallel group

    Returns:
        value loss and its metrics
    """
    vpreds = _slice_response_from_unpad_output(model_output["values"], data)  # (bsz, response_length)

    # the engine (dp_size, batch_num_tokens) and the trainer (global_batch_size) attach these before splitting the
    # mini-batch; read strictly as ppo_loss and verl 0.9.x do
    dp_size = data["dp_size"]
    batch_num_tokens = data["batch_num_tokens"]
    global_batch_size = data["global_batch_size"]
    loss_scale_factor = config.loss_scale_factor
    globally_normalized = (
        dp_size > 1 or batch_num_tokens is not None or global_batch_size is not None or loss_scale_factor is not None
    )
    # a share of the mini-batch loss is summed over micro-batches, a local mean is averaged (as ppo_loss logs)
    aggregation = AggregationType.SUM if globally_normalized else AggregationType.MEAN

    response_mask = data["response_mask"].to(bool)
    vf_loss, vf_clipfrac = compute_value_loss(
        vpreds=vpreds,
        values=data["values"],
        returns=data["returns"],
        response_mask=response_mask,
        cliprange_value=config.cliprange_value,
        loss_agg_mode=config.loss_agg_mode,
        dp_size=dp_size,
        batch_num_tokens=batch_num_tokens,
        global_batch_size=global_batch_size,
        loss_scale_factor=loss_scale_factor,
    )
    metrics = {
        "critic/vf_loss": Metric(value=vf_loss.detach().item(), aggregation=aggregation),
        "critic/vf_clipfrac": vf_clipfrac.detach().item(),
        "critic/vpred_mean": masked_mean(vpreds, response_mask).detach().item(),
    }
    return vf_loss, metrics


def ppo_loss(config: ActorConfig, model_output, data: TensorDict, dp_group=None):
    """Computes ppo loss from model output (log_prob, entropy, values, etc. ) and old_log_probs from data; the
    mini-batch's selection masks and IS mean the engine worker added to ``data`` reach the policy loss through
    ``config.policy_loss_inputs`` (None where absent: the loss chooses within this micro-batch)."""
    log_prob = no_padding_2_padding(model_output["log_probs"], data)
    entropy = model_output.get("entropy", None)
    if entropy is not None:
        entropy = no_padding_2_padding(entropy, data)

    # global batch info for loss aggregation
    config.global_batch_info["dp_size"] = data["dp_size"]
    config.global_batch_info["batch_num_tokens"] = data["batch_num_tokens"]
    config.global_batch_info["global_batch_size"] = data["global_batch_size"]
    config.global_batch_info["loss_scale_factor"] = config.loss_scale_factor

    # assumes that if any of the global batch info is set, the policy_loss_fn will
    # normalize using dp_size/global_bsz/global_token; in this case, metric aggregation should be SUM
    # to reflect the mean loss over the global batch
    if (
        data["dp_size"] > 1
        or data["batch_num_tokens"] is not None
        or data["global_batch_size"] is not None
        or config.loss_scale_factor is not None
    ):
        metric_aggregation = AggregationType.SUM
    else:
        metric_aggregation = AggregationType.MEAN

    metrics = {}

    response_mask = data["response_mask"].to(bool)
    for key in ("kl_cov_mask", "clip_cov_mask", "rollout_is_batch_mean"):
        # KL-Cov's and Clip-Cov's tokens and the IS weights' mean (bypass mode), over the whole mini-batch by the
        # engine worker; None: the loss chooses (or takes the mean) within this micro-batch
        config.policy_loss_inputs[key] = data.get(key, None)
    # compute policy loss
    old_log_prob = data["old_log_probs"]
    advantages = data["advantages"]
    rollout_is_weights = data.get("rollout_is_weights", None)

    loss_agg_mode = config.loss_agg_mode

    loss_mode = config.policy_loss.get("loss_mode", "vanilla")

    policy_loss_fn = get_policy_loss_fn(loss_mode)
    pg_loss, pg_metrics = policy_loss_fn(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=response_mask,
        loss_agg_mode=loss_agg_mode,
        config=config,
        rollout_is_weights=rollout_is_weights,
    )

    # AggregationType.MEAN for pg metrics: assumes policy_loss_fn normalizes by local_bsz/local_tokens
    # Ex: in compute_policy_loss_vanilla, pg_metrics are pg_clipfrac, ppo_kl, pg_clipfrac_lower
    pg_metrics = Metric.from_dict(pg_metrics, aggregation=AggregationType.MEAN)

    metrics.update(pg_metrics)
    metrics["actor/pg_loss"] = Metric(value=pg_loss, aggregation=metric_aggregation)
    policy_loss = pg_loss

    # add entropy loss
    if entropy is not None:
        entropy_loss = agg_loss(
            loss_mat=entropy, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **config.global_batch_info
        )
        entropy_coeff = config.entropy_coeff
        policy_loss -= entropy_coeff * entropy_loss
        metrics["actor/entropy_loss"] = Metric(value=entropy_loss, aggregation=metric_aggregation)

    # add kl loss
    if config.use_kl_loss:
        ref_log_prob = data["ref_log_prob"]
        # compute kl loss
        kld = kl_penalty(logprob=log_prob, ref_logprob=ref_log_prob, kl_penalty=config.kl_loss_type)
        kl_loss = agg_loss(
            loss_mat=kld, loss_mask=response_mask, loss_agg_mode=config.loss_agg_mode, **config.global_batch_info
        )

        policy_loss += kl_loss * config.kl_loss_coef
        metrics["kl_loss"] = Metric(value=kl_loss, aggregation=metric_aggregation)
        metrics["kl_coef"] = config.kl_loss_coef

    return policy_loss, metrics
