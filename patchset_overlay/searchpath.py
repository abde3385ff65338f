"""Config files a piece's patches change (verl's ``critic/critic.yaml``), derived like the modules, for Hydra.

They go into a folder of their own (the verified cache, else a private temporary one) that the Hydra plugin puts
first on the search path. This runs inside Hydra's plugin discovery, so it reads the upstream's files, never imports.
"""

from __future__ import annotations

from pathlib import Path

from patchset_overlay.derive import Plan, cache_root, folder_for, private_folder, sha256, verified
from patchset_overlay.runtime import judge_pieces, record_for, switched_on
from patchset_overlay.spec import Overlay, PieceState, Verdict

_folders: dict[str, Path] = {}  # the derived set's digest -> its folder, in this process


def _config_files(plan: Plan) -> dict[str, str]:
    """{config file in the tree: the piece whose patches change it} for the release's whole series."""
    found = {}
    for piece in plan.overlay.pieces:
        for path in plan.files(plan.pieces_patches(piece, plan.patches + plan.upstream)):
            if not path.endswith(".py"):
                found[path] = piece.name
    return found


def config_folder(overlay: Overlay) -> Path | None:
    """The folder to put first on Hydra's search path, holding every derived config file; None when there is none."""
    plan = judge_pieces(overlay).plan if switched_on(overlay)[0] else None
    derived = {path: item for path, item in plan.derived.items() if not path.endswith(".py")} if plan else {}
    if not derived:
        return None
    key = "\n".join(f"{path}\0{sha256(item.text)}" for path, item in sorted(derived.items()))
    if key not in _folders:
        folder = folder_for(f"hydra {key}", cache_root())
        folder = folder / "config" if folder is not None else None
        if folder is None or not all(verified(folder / _relative(plan, p), i.text) for p, i in derived.items()):
            folder = private_folder()
            for path, item in derived.items():
                verified(folder / _relative(plan, path), item.text)
        _folders[key] = folder
    return _folders[key]


def _relative(plan: Plan, path: str) -> str:
    return path.removeprefix(f"{plan.overlay.config_dir}/")


def config_status(overlay: Overlay) -> dict[str, Verdict]:
    """For `status`: each config file the overlay's series changes, and whether Hydra finds it derived."""
    on, how = switched_on(overlay)
    plan = judge_pieces(overlay).plan if on else None
    if plan is None:  # off, or on where the upstream cannot be read (as its pieces, which say why)
        piece = next(iter(record_for(overlay.name).pieces.values()), None) if on else None
        verdict = Verdict(piece.state, piece.reason) if piece else Verdict(PieceState.INACTIVE, how)
        return {"config files (Hydra search path)": verdict}
    report = {}
    for path, piece in _config_files(plan).items():
        name = f"{Path(path).name} (Hydra search path)"
        if path in plan.derived:
            folder = config_folder(overlay)
            report[name] = Verdict(
                PieceState.ACTIVE,
                f"Hydra finds {_relative(plan, path)} in {folder} before {plan.source.root.parent / Path(path).parent}",
            )
        else:
            record = record_for(overlay.name).pieces[piece]
            report[name] = Verdict(record.state, record.reason)
    return report
