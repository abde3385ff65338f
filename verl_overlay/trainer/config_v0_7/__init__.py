"""Mirror of verl 0.7.1's ``verl/trainer/config``: ``critic/critic.yaml`` with ``loss_scale_factor`` (the verl-0.7
series' 0001), for Hydra on verl 0.7.1; the part that puts it on Hydra's search path is
`verl_overlay.pieces.critic_yaml`."""
