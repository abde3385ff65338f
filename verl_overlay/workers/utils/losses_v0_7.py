"""``value_loss`` of ``verl.workers.utils.losses`` as the verl-0.7 series' critic patch leaves it on verl 0.7.1
(piece `verl_overlay.pieces.critic_v0_7`).

verl 0.7.1's ``value_loss`` is not 0.8.0's (it slices the model output with ``_slice_response_from_unpad_output`` and
reads the TensorDict without ``select()``), so its patched code is a file of its own beside the 0.8.0 mirror
(``losses.py``); both change the same upstream function. Installed by replacing the upstream function's code in
place, so it runs in ``verl.workers.utils.losses``'s namespace: every global below is that module's own object.
"""

from __future__ import annotations

from tensordict import TensorDict
from verl.trainer.ppo.core_algos import compute_value_loss
from verl.utils.metric import AggregationType, Metric
from verl.utils.torch_functional import masked_mean
from verl.workers.config import CriticConfig
from verl.workers.utils.losses import _slice_response_from_unpad_output


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
