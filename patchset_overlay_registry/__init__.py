"""The one registration list of the overlays: `patchset_overlay` switches on the packages named here, in this order
(the order ``python -m patchset_overlay status`` lists them), and names none itself.

Each package named here declares at its top level ``WATCHED`` (the upstream modules it changes, which the start-up
import finder watches; tests/overlay pins that they are its pieces' target modules) and ``overlay()`` (its
`patchset_overlay.spec.Overlay`; `patchset_overlay.overlay_functions` makes it), and imports nothing at module level
but that front of the core: this list and those declarations are read at every interpreter start
(``patchset_overlay.pth``). Adding an overlay: its package, and one name here. Why a list and not entry points: see
`patchset_overlay.startup`.
"""

from __future__ import annotations

OVERLAYS = ("verl_overlay", "trinity_overlay")
