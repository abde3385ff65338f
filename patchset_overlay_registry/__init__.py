"""The one registration list of the overlays, in ``status``'s order (why a list: see `patchset_overlay.startup`).

Each package named here declares ``WATCHED`` (the upstream modules it changes) and ``overlay()`` (made by
`patchset_overlay.overlay_functions`) at its top level, importing nothing else: they are read at every start-up.
"""

from __future__ import annotations

OVERLAYS = ("verl_overlay", "trinity_overlay")
