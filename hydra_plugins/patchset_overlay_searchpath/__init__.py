"""Hydra search path plugin: the config files the overlays derive (verl's critic config with ``loss_scale_factor``)
come first, so ``critic/critic.yaml`` resolves to the derived file; every other config still comes from verl.
"""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class PatchsetOverlaySearchPathPlugin(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from patchset_overlay.searchpath import config_folder
        from patchset_overlay.startup import overlays

        for overlay in overlays():
            folder = config_folder(overlay) if overlay.config_dir else None
            if folder is not None:
                search_path.prepend(provider="patchset-overlay", path=f"file://{folder}")
