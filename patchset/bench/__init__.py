"""What the fix costs (``python -m patchset bench``): `loss_call` times one loss call of the patched trees against the
vanilla ones and counts the host synchronisations it makes (`syncs`); `pre_pass` (``--pre-pass``) times the no-grad
forward before a later update against the training step; `startup` (``--startup``) times the overlays' start-up in a
fresh interpreter."""
