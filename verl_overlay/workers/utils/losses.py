"""Mirror of ``verl.workers.utils.losses``: ``value_loss`` reading the engine's global batch info (patch 0001), and
``ppo_loss`` handing each micro-batch its rows of what the engine worker computed over the whole mini-batch (KL-Cov's
and Clip-Cov's tokens, patch 0004; bypass mode's IS mean, patch 0005) through ``config.policy_loss_inputs``.

Installed by replacing the upstream function's code in place, so it runs in ``verl.workers.utils.losses``'s
namespace (the globals below are that module's own objects) and ``partial(value_loss, ...)`` /
``partial(ppo_loss, ...)`` objects, made before or after, and pickles of them, all get it.
"""

from __future__ import annotations

from tensordict import TensorDict
from verl.trainer.ppo.core_algos import agg_loss, compute_value_loss, get_policy_loss_fn, kl_penalty
from verl.utils.metric import AggregationType, Metric
from verl.utils.torch_functional import masked_mean
from verl.workers.config import ActorConfig, CriticConfig
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
    vpreds = no_padding_2_padding(model_output["values"], data)  # (bsz, response_length)

    # the engine (dp_size, batch_num_tokens) and the trainer (global_batch_size) attach these before splitting the
    # mini-batch; read strictly as ppo_loss and verl 0.9.x do, and before select() below drops them
    dp_size = data["dp_size"]
    batch_num_tokens = data["batch_num_tokens"]
    global_batch_size = data["global_batch_size"]
    loss_scale_factor = config.loss_scale_factor
    globally_normalized = (
        dp_size > 1 or batch_num_tokens is not None or global_batch_size is not None or loss_scale_factor is not None
    )
    # a share of the mini-batch loss is summed over micro-batches, a local mean is averaged (as ppo_loss logs)
    aggregation = AggregationType.SUM if globally_normalized else AggregationType.MEAN

    data = data.select("values", "returns", "response_mask").to_padded_tensor()
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

    # select fields and convert to padded tensor
    fields = ["response_mask", "old_log_probs", "advantages"]
    if "rollout_is_weights" in data:
        fields.append("rollout_is_weights")
    if "ref_log_prob" in data:
        fields.append("ref_log_prob")
    # KL-Cov's and Clip-Cov's tokens and the IS weights' mean (bypass mode), over the whole mini-batch by the
    # engine worker
    mini_batch_inputs = ("kl_cov_mask", "clip_cov_mask", "rollout_is_batch_mean")
    mini_batch_fields = [key for key in mini_batch_inputs if key in data]
    data = data.select(*fields, *mini_batch_fields).to_padded_tensor()

    response_mask = data["response_mask"].to(bool)
    for key in mini_batch_inputs:
        # None: the loss chooses (or takes the mean) within this micro-batch
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
