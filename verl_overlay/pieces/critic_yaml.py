"""Piece 0001's critic YAML, for Hydra: ``critic/critic.yaml`` with ``loss_scale_factor`` put on Hydra's search path.

The YAML is in the mirrored ``verl_overlay/trainer/config`` (verl's layout: Hydra looks for ``critic/critic.yaml``
under a config folder); it is verl 0.8.0's file with the patch's lines added. Hydra finds it through the search path
plugin ``hydra_plugins.patchset_overlay_searchpath``, ahead of verl's own config folder, but only while the critic
code piece (`verl_overlay.pieces.critic`) is active (so that ``CriticConfig`` gets the field the YAML sets, whenever
it is imported) and verl's own critic.yaml is the file this one was made from (the sha256 below): an overlay never
replaces a file it does not recognise. This runs inside Hydra's plugin discovery, so it reads verl's files without
importing verl. `status` reports it after the code pieces (the overlay's ``other_parts``).
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

from patchset_overlay.runtime import OverlayWarning, piece_verdict, switched_on
from patchset_overlay.source import UpstreamSource
from patchset_overlay.spec import Overlay
from patchset_overlay.state import PieceState, Verdict
from verl_overlay.pieces import critic, critic_v0_7

NAME = "critic.yaml (Hydra search path)"
CONFIG_DIR = Path(__file__).resolve().parents[1] / "trainer" / "config"
UPSTREAM_FILE = "trainer/config/critic/critic.yaml"
# sha256 of verl 0.8.0's verl/trainer/config/critic/critic.yaml, the file CONFIG_DIR/critic/critic.yaml extends
UPSTREAM_SHA256 = "fac7babe651d2a434668d691d8fe4cd09c65017869a32d72d009d0c691c4551f"
# verl 0.7.1's critic.yaml differs (it still has the deprecated model section): its patched file is a folder of its
# own, taken with the 0.7.1 critic piece
CONFIG_DIR_V0_7 = Path(__file__).resolve().parents[1] / "trainer" / "config_v0_7"
UPSTREAM_SHA256_V0_7 = "1f4e71ed9aedcc1512230bbc627deed352002b45db86b0f0db32823cab35509f"
# release -> (the folder to put on Hydra's search path, the sha256 of the upstream file its critic.yaml extends)
_FILES = {release: (CONFIG_DIR_V0_7, UPSTREAM_SHA256_V0_7) for release in critic_v0_7.RELEASES}
_warned: set[str] = set()


NOT_CHANGED = (
    "files on disk: verl's trainer/config/_generated_ppo_*.yaml reference configs, and critic/critic.yaml read by "
    "path rather than through Hydra's search path, stay upstream's (they lack critic.loss_scale_factor)"
)


def _critic_piece_off(overlay: Overlay, version: str | None = None) -> Verdict | None:
    """The verdict of the critic code piece for ``version`` if it is judged off: the YAML belongs to it, and
    CriticConfig would refuse the field the YAML adds. Judged from verl's files, so no verl module is imported here."""
    piece = critic_v0_7.PIECE if version in critic_v0_7.RELEASES else critic.PIECE
    verdict = piece_verdict(overlay, piece.name)
    if verdict is not None and verdict.state not in (PieceState.PENDING, PieceState.ACTIVE):
        return verdict
    return None


def hydra_config_state(overlay: Overlay) -> Verdict:
    """Whether the critic YAML is on Hydra's search path, and why; the reason names the file and the version.
    Version and code checks are the critic piece's own verdict; the YAML adds the check of the file it replaces."""
    on, how = switched_on(overlay)
    if not on:
        return Verdict(PieceState.INACTIVE, how)
    source = UpstreamSource.find(overlay.upstream)
    if source is None:
        return Verdict(PieceState.INACTIVE, "verl is not installed")
    root, version = source.root, source.version()
    code_piece = _critic_piece_off(overlay, version)
    if code_piece is not None:
        return code_piece
    config_dir, upstream_sha256 = _FILES.get(version, (CONFIG_DIR, UPSTREAM_SHA256))
    upstream = root / UPSTREAM_FILE
    text = upstream.read_text(encoding="utf-8") if upstream.exists() else ""
    if "\nloss_scale_factor:" in text:
        return Verdict(PieceState.UPSTREAM_HAS_FIX, f"verl {version}'s {UPSTREAM_FILE} already sets loss_scale_factor")
    found = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if found != upstream_sha256:
        return Verdict(
            PieceState.REFUSED,
            f"verl {version}'s {UPSTREAM_FILE} is not the file this overlay was made from (sha256 {found[:16]}, "
            f"expected {upstream_sha256[:16]}); Hydra uses verl's own",
        )
    return Verdict(
        PieceState.ACTIVE, f"Hydra finds critic/critic.yaml in {config_dir} before verl's {root / 'trainer/config'}"
    )


def status(overlay: Overlay) -> dict[str, Verdict]:
    """The overlay's ``other_parts`` hook: this part's entry in ``status``."""
    return {NAME: hydra_config_state(overlay)}


def search_path_dir(overlay: Overlay) -> Path | None:
    """The folder to put on Hydra's search path, or None (with a warning once, if refused) to leave verl's alone;
    ``overlay``: the verl overlay's spec (the plugin passes it: this module is part of it)."""
    verdict = hydra_config_state(overlay)
    if verdict.state is PieceState.ACTIVE:
        source = UpstreamSource.find(overlay.upstream)
        return _FILES.get(source.version(), (CONFIG_DIR, ""))[0] if source is not None else CONFIG_DIR
    # a refusal of the critic code piece has been said already, by its own warning
    source = UpstreamSource.find(overlay.upstream)
    version = source.version() if source is not None else None
    code_piece_off = _critic_piece_off(overlay, version)
    if verdict.state is PieceState.REFUSED and code_piece_off is None and verdict.reason not in _warned:
        _warned.add(verdict.reason)
        warnings.warn(f"verl_overlay: critic.yaml not used: {verdict.reason}", OverlayWarning, stacklevel=2)
    return None
