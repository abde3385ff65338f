"""What is active in this process: each overlay, each piece, its state and the reason."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from patchset_overlay import startup
from patchset_overlay.derive import Plan
from patchset_overlay.runtime import PieceRecord, judge_pieces, record_for, switched_on, verdicts
from patchset_overlay.searchpath import config_status
from patchset_overlay.spec import Overlay, Piece, PieceState


def _import_targets(overlay: Overlay) -> str | None:
    """Import the upstream's target modules, so that the pieces get judged and installed; why not, where that fails."""
    if importlib.util.find_spec(overlay.upstream) is None:
        return f"{overlay.distribution} is not installed"
    for module in overlay.modules:
        try:
            importlib.import_module(module)
        except Exception as error:
            if isinstance(error, ModuleNotFoundError) and error.name and module.startswith(f"{error.name}."):
                continue  # a target of a piece for other releases (verl 0.7.1 has no verl.trainer.distillation)
            return f"importing {overlay.distribution} failed: {error!r}"
    return None


SERIES_FILE = Path(__file__).with_name("series.json")  # written with patches/history.json by its generator


def carried_series() -> dict[str, Any]:
    """Which series of the patchset these overlays derive from: its revision (the ``+patchset.N`` of the wheels and of
    ``patches/history.json``; None: a series not released yet) and each series folder's id there."""
    try:
        data = json.loads(SERIES_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    return {"revision": data.get("revision"), "series": data.get("series", {})}


def _patch_names(plan: Plan | None, piece: Piece) -> list[str]:
    """The piece's patch files in the installed release's series (``0001-...``), else its slugs."""
    if plan is None or plan.series is None:
        return list(piece.patches)
    return [patch.path.stem for patch in plan.patches + plan.upstream if patch.slug in piece.patches]


def _how(overlay: Overlay) -> str:
    return record_for(overlay.name).how or startup.outcome or "not activated in this process"


def collect(import_upstreams: bool = True) -> list[dict[str, Any]]:
    """One entry per overlay: how it was switched on (or off), the upstream version, and each piece's state; with
    ``import_upstreams`` off, only what this process has imported so far."""
    report = []
    carried = carried_series()
    for overlay in startup.overlays():
        problem = _import_targets(overlay) if import_upstreams else None
        switched_on(overlay)  # activates them, as an import would: an upstream not installed imports nothing
        record = judge_pieces(overlay)
        plan, judged = (record.plan, {}) if record.enabled else verdicts(overlay)  # off: judged for this listing only
        other_release = {name for name, verdict in judged.items() if verdict.state is PieceState.OTHER_RELEASE}
        pieces = []
        for piece in overlay.pieces:
            state = record.pieces.get(piece.name, PieceRecord())
            if state.state is PieceState.OTHER_RELEASE or piece.name in other_release:
                continue  # written for other releases: this one has its own piece of the same patches
            reason = state.reason
            if state.state is PieceState.ACTIVE:
                changed: list[str] = []
                waiting: list[str] = []  # in modules not imported yet
                for module in record.plan.piece_modules(piece):
                    labels = [f"{module}.{change.label}" for change in record.plan.piece_changes(piece, module)]
                    (changed if module in state.undo else waiting).extend(labels)
                reason += f"; changed {', '.join(changed)}" if changed else ""
                reason += f"; changes {', '.join(waiting)} when imported" if waiting else ""
            elif not record.enabled and state.state is PieceState.INACTIVE:
                reason = _how(overlay)
            pieces.append(
                {
                    "piece": piece.name,
                    "patches": _patch_names(plan, piece),
                    "state": state.state.value,
                    "reason": reason,
                }
            )
        for name, verdict in (config_status(overlay) if overlay.config_dir else {}).items():
            pieces.append({"piece": name, "patches": [], "state": verdict.state.value, "reason": verdict.reason})
        report.append(
            {
                "overlay": overlay.name,
                "enabled": record.enabled,
                "how": _how(overlay),
                "upstream": overlay.distribution,
                "version": getattr(sys.modules.get(overlay.upstream), "__version__", None),
                "problem": problem,
                "pieces": pieces,
                "cannot_change": overlay.cannot_change,
                "series": carried,
            }
        )
    return report


def _patch_label(patch: str) -> str:
    """A patch file's number (``0001``), or the whole slug where the release's series is not known."""
    number = patch.partition("-")[0]
    return number if number.isdigit() else patch


def render(report: list[dict[str, Any]]) -> str:
    lines = []
    for entry in report:
        switch = "on" if entry["enabled"] else "off"
        version = entry["version"] or "not imported"
        lines.append(f"{entry['overlay']}: {switch} ({entry['how']}); {entry['upstream']} {version}")
        if entry["problem"]:
            lines.append(f"  {entry['problem']}")
        for piece in entry["pieces"]:
            patches = f" ({', '.join(map(_patch_label, piece['patches']))})" if piece["patches"] else ""
            lines.append(f"  {piece['piece']}{patches}: {piece['state']}: {piece['reason']}")
        if entry["cannot_change"]:
            lines.append(f"  not changed by overlays: {entry['cannot_change']}")
    if report:
        carried = report[0]["series"]
        revision = f"+patchset.{carried['revision']}" if carried["revision"] is not None else "an unreleased revision"
        idents = ", ".join(f"{folder} {ident}" for folder, ident in sorted(carried["series"].items()))
        lines.append(f"series carried: {revision} of the patchset ({idents or 'unknown'})")
    if not startup.switched_off():
        lines.append(f"(set {startup.ENV_SWITCH}=0 to switch the automatic activation off)")
    return "\n".join(lines)
