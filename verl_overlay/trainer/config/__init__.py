"""Mirror of ``verl/trainer/config``: ``critic/critic.yaml`` with ``loss_scale_factor`` (patch 0001), for Hydra; the
part that puts it on Hydra's search path is `verl_overlay.pieces.critic_yaml`."""
