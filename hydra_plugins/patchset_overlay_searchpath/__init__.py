"""Hydra search path plugin: verl's critic config with ``loss_scale_factor`` for an installed verl 0.8.0.

Hydra imports every module under the ``hydra_plugins`` namespace package and calls each `SearchPathPlugin` when it
builds a search path, for ``@hydra.main`` and the compose API alike. Prepending the overlay's config folder makes
``critic/critic.yaml`` resolve to the overlay's copy; every other config still comes from verl.
"""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class PatchsetOverlaySearchPathPlugin(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from verl_overlay import overlay
        from verl_overlay.pieces.critic_yaml import search_path_dir

        folder = search_path_dir(overlay())
        if folder is not None:
            search_path.prepend(provider="verl-overlay", path=f"file://{folder}")
