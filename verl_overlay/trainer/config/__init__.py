"""Mirror of ``verl/trainer/config``: the critic YAML with ``loss_scale_factor`` (patch 0001), for Hydra.

``critic/critic.yaml`` here is verl 0.8.0's file with the patch's lines added. Hydra finds it through the search
path plugin ``hydra_plugins.patchset_overlay_searchpath``, ahead of verl's own config folder, but only while the
critic code piece is active (so that ``CriticConfig`` gets the field the YAML sets, whenever it is imported) and
verl's own critic.yaml is the file this one was made from (the sha256 below): an overlay never replaces a file it
does not recognise. This runs inside Hydra's plugin discovery, so it reads verl's files without importing verl.
"""

from __future__ import annotations

import hashlib
import sys
import warnings
from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parent
UPSTREAM_FILE = "trainer/config/critic/critic.yaml"
# sha256 of verl 0.8.0's verl/trainer/config/critic/critic.yaml, the file CONFIG_DIR/critic/critic.yaml extends
UPSTREAM_SHA256 = "fac7babe651d2a434668d691d8fe4cd09c65017869a32d72d009d0c691c4551f"
CRITIC_PATCH = "0001-trainer-critic-value-loss-global-normalization"
_warned: set[str] = set()


NOT_CHANGED = (
    "files on disk: verl's trainer/config/_generated_ppo_*.yaml reference configs, and critic/critic.yaml read by "
    "path rather than through Hydra's search path, stay upstream's (they lack critic.loss_scale_factor)"
)


def _switched_on() -> tuple[bool, str]:
    """Whether the verl overlay is on in this process. Under automatic activation a Hydra composition can come
    before any verl import: it activates the overlays then, so that the YAML and CriticConfig stay in step."""
    from patchset_overlay import ENV_SWITCH, activate_all, switched_off
    from patchset_overlay.state import record_for

    record = record_for("verl_overlay")
    if record.enabled:
        return True, record.how
    autoload = sys.modules.get("patchset_overlay.autoload")
    if autoload is not None and autoload.outcome == autoload.AUTOMATIC:
        activate_all(autoload.AUTOMATIC)
        return True, record.how
    if switched_off():
        return False, f"switched off by {ENV_SWITCH}"
    return False, record.how or "verl_overlay is not activated in this process"


def _critic_piece_off() -> tuple[str, str] | None:
    """The critic code piece's (state, reason) if it is judged off: the YAML belongs to it, and CriticConfig
    would refuse the field the YAML adds. Judged from verl's files, so no verl module is imported here."""
    from patchset_overlay.runtime import judge_pieces
    from patchset_overlay.state import PieceState, record_for
    from verl_overlay.pieces import OVERLAY

    judge_pieces(OVERLAY)
    piece = record_for("verl_overlay").pieces.get(CRITIC_PATCH)
    if piece is not None and piece.state not in (PieceState.PENDING, PieceState.ACTIVE):
        return piece.state.value, piece.reason
    return None


def hydra_config_state() -> tuple[str, str]:
    """("active" | "off ...", reason) for the critic YAML; the reason names the file and the version. Version and
    code checks are the critic piece's own verdict; the YAML adds the check of the file it replaces."""
    on, how = _switched_on()
    if not on:
        return "off", how
    code_piece = _critic_piece_off()
    if code_piece is not None:
        return code_piece
    from patchset_overlay.source import UpstreamSource

    source = UpstreamSource.find("verl")
    if source is None:
        return "off", "verl is not installed"
    root, version = source.root, source.version()
    upstream = root / UPSTREAM_FILE
    text = upstream.read_text(encoding="utf-8") if upstream.exists() else ""
    if "\nloss_scale_factor:" in text:
        return "off (upstream has the fix)", f"verl {version}'s {UPSTREAM_FILE} already sets loss_scale_factor"
    found = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if found != UPSTREAM_SHA256:
        return "off (refused)", (
            f"verl {version}'s {UPSTREAM_FILE} is not the file this overlay was made from (sha256 {found[:16]}, "
            f"expected {UPSTREAM_SHA256[:16]}); Hydra uses verl's own"
        )
    return "active", f"Hydra finds critic/critic.yaml in {CONFIG_DIR} before verl's {root / 'trainer/config'}"


def search_path_dir() -> Path | None:
    """The folder to put on Hydra's search path, or None (with a warning once, if refused) to leave verl's alone."""
    state, reason = hydra_config_state()
    if state == "active":
        return CONFIG_DIR
    # a refusal of the critic code piece has been said already, by its own warning
    if state == "off (refused)" and _critic_piece_off() is None and reason not in _warned:
        from patchset_overlay.runtime import OverlayWarning

        _warned.add(reason)
        warnings.warn(f"verl_overlay: critic.yaml not used: {reason}", OverlayWarning, stacklevel=2)
    return None
