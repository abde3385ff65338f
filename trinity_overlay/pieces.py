"""The Trinity overlay's pieces: which patches go on together, by slug, and what keeps a piece off. It changes verl's
engine path only: beside verl < 0.8, whose legacy actors it does not change, the pieces that need them stay off.
"""

from __future__ import annotations

from patchset_overlay.derive import overlay_spec, version_tuple
from patchset_overlay.spec import Piece, UpstreamSource
from trinity_overlay import WATCHED


def beside_legacy_verl(source: UpstreamSource) -> str | None:
    """Beside verl < 0.8 Trinity trains through its legacy actors, whose split the overlay does not change: the DPO
    pair logits would meet micro-batches that cut pairs, and the switch would turn on upstream's own rule there."""
    verl = UpstreamSource.find("verl")
    version = verl.version() if verl is not None else None
    if version is not None and version_tuple(version) < (0, 8):
        return (
            f"beside verl {version} Trinity trains through its legacy actors, whose changes (0006, 0007, 0008: DPO "
            "pairs, DPO optimizer steps, micro-batch weights) this overlay does not make (use the patched wheel "
            "or checkout there)"
        )
    return None


OVERLAY = overlay_spec(
    "trinity_overlay",
    "trinity",
    "trinity-rft",
    WATCHED,
    (
        Piece(
            "policy-loss-normalization",
            (
                "trainer-policy-loss-global-normalization",
                "trainer-weight-each-trinitypolicyloss-term-its-own",
                "trainer-warn-start-up-that-mix-mix-chord-depend",
                "trainer-policy-loss-runtime-keys",
            ),
        ),
        Piece(
            "dpo-pairs-and-steps",
            (
                "algorithm-fix-dpo-compute-one-logit-per-chosen",
                "trainer-keep-dpo-pairs-one-micro-batch-under-verl",
                "trainer-keep-dpo-pairs-whole-legacy-actors",
                "trainer-make-one-dpo-training-step-one-optimizer",
                "trainer-weight-each-legacy-micro-batch-loss-term",
            ),
            unfit=beside_legacy_verl,
        ),
        Piece("loss-scale-switch-default", ("config-loss-scale-switch-on-by-default",), unfit=beside_legacy_verl),
    ),
    cannot_change=(
        "Trinity's legacy actors (trinity/trainer/verl_legacy/), used beside verl < 0.8: their changes are in the "
        "patched wheel or checkout only"
    ),
)
