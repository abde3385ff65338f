"""What is active in this process: each overlay, each piece, its state and the reason."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

from patchset_overlay import ENV_SWITCH, overlays
from patchset_overlay.runtime import piece_states
from patchset_overlay.spec import Overlay
from patchset_overlay.state import PieceState, record_for


def _import_targets(overlay: Overlay) -> str | None:
    """Import the upstream modules, so pending pieces get judged; the error text if the upstream is missing."""
    if importlib.util.find_spec(overlay.upstream) is None:
        return f"{overlay.distribution} is not installed"
    try:
        for piece in overlay.pieces:
            for module in piece.modules:
                importlib.import_module(module)
    except Exception as error:
        return f"importing {overlay.distribution} failed: {error!r}"
    return None


def collect(import_upstreams: bool = True) -> list[dict[str, Any]]:
    """One entry per overlay: how it was switched on (or off), the upstream version, and each piece's state.
    With ``import_upstreams`` off, only what this process has imported so far is reported."""
    report = []
    for overlay in overlays():
        problem = _import_targets(overlay) if import_upstreams else None
        record = record_for(overlay.name)
        package = sys.modules.get(overlay.upstream)
        pieces = [
            {"piece": patch, "state": piece.state.value, "reason": piece.reason}
            for patch, piece in piece_states(overlay).items()
        ]
        if not record.enabled and record.how:
            for piece in pieces:
                if piece["state"] == PieceState.INACTIVE.value:
                    piece["reason"] = record.how
        for extra in overlay_extras(overlay):
            pieces.append(extra)
        report.append(
            {
                "overlay": overlay.name,
                "enabled": record.enabled,
                "how": record.how or "not activated in this process",
                "upstream": overlay.distribution,
                "version": getattr(package, "__version__", None),
                "problem": problem,
                "pieces": pieces,
            }
        )
    return report


def overlay_extras(overlay: Overlay) -> list[dict[str, Any]]:
    """Pieces that are not import hooks (verl's Hydra config), reported beside the others."""
    if overlay.name != "verl_overlay":
        return []
    from verl_overlay.trainer.config import hydra_config_state

    state, reason = hydra_config_state()
    return [{"piece": "critic.yaml (Hydra search path)", "state": state, "reason": reason}]


def render(report: list[dict[str, Any]]) -> str:
    lines = []
    for entry in report:
        switch = "on" if entry["enabled"] else "off"
        version = entry["version"] or "not imported"
        lines.append(f"{entry['overlay']}: {switch} ({entry['how']}); {entry['upstream']} {version}")
        if entry["problem"]:
            lines.append(f"  {entry['problem']}")
        for piece in entry["pieces"]:
            lines.append(f"  {piece['piece']}: {piece['state']}: {piece['reason']}")
    lines.append(f"(set {ENV_SWITCH}=0 to switch the automatic activation off)")
    return "\n".join(lines)
