"""The Trinity overlay's pieces, one file each, and the overlay's spec that lists them in order. Patches that change
the same symbols form one piece, mirrored as the finished series leaves them (a piece is all or nothing, so no
intermediate state of a symbol is ever needed):

- `policy_loss_normalization` (0001, 0003, 0005, 0009): with ``trainer.fix_actor_microbatch_loss_scale`` on, each
  policy-loss term weighted by its share of the global mini-batch;
- `dpo_pairs_and_steps` (0002, 0004, 0006, 0007, 0008): DPO pairs and optimizer steps on verl's engine path. Beside
  verl < 0.8 Trinity trains through its legacy actors, whose changes (0006, 0007, and 0008's micro-batch weights,
  which change nothing else) the overlay does not mirror: the piece stays off there;
- `loss_scale_switch_default` (0010, carried): the switch unset by default, resolved by the trainer validator (on for
  veRL, off for Tinker); off beside verl < 0.8, as the DPO piece.

The patched code itself stays in the mirrored modules (``trinity_overlay/algorithm/...``,
``trinity_overlay/trainer/...``), which keep Trinity's module layout. Adding a piece: its file here, its name in
``OVERLAY.pieces``, its upstream modules in ``trinity_overlay.WATCHED`` if new, its mirrored code, and the
fingerprints, made by ``python -m patchset_overlay fingerprints --write``.
"""

from __future__ import annotations

from patchset_overlay.spec import Overlay
from trinity_overlay.pieces import dpo_pairs_and_steps, loss_scale_switch_default, policy_loss_normalization

OVERLAY = Overlay(
    name="trinity_overlay",
    upstream="trinity",
    distribution="trinity-rft",
    supported=("0.6.0",),
    pieces=(policy_loss_normalization.PIECE, dpo_pairs_and_steps.PIECE, loss_scale_switch_default.PIECE),
)
