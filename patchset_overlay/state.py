"""Per-process record of what each overlay did: the one piece of global state overlays need.

Activation patches objects shared by the whole interpreter, so what is active is a property of the process; this
module is where it is written down, for `status` and for undo.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class PieceState(Enum):
    PENDING = "pending"  # activated, not judged yet (none of the upstream's target modules imported so far)
    ACTIVE = "active"
    UPSTREAM_HAS_FIX = "off (upstream has the fix)"
    OTHER_RELEASE = "off (another release's piece)"  # a piece written for other releases (another may cover this one)
    REFUSED = "off (refused)"
    INACTIVE = "off"


@dataclass(frozen=True)
class Verdict:
    """A piece's state and why: what the guard decides, and what an overlay reports of its other parts."""

    state: PieceState
    reason: str


@dataclass
class PieceRecord:
    state: PieceState = PieceState.INACTIVE
    reason: str = "not activated in this process"
    # upstream module -> the undo steps of its installer, for each target module changed so far
    undo: dict[str, list[Callable[[], None]]] = field(default_factory=dict)


@dataclass
class OverlayRecord:
    enabled: bool = False
    judged: bool = False
    pieces: dict[str, PieceRecord] = field(default_factory=dict)
    warned: set[str] = field(default_factory=set)
    how: str = ""  # how it was activated: "explicit" or "automatic (...)"
    plan: Any = None  # the `patchset_overlay.derive.Plan` of the installed release, once judged


RECORDS: dict[str, OverlayRecord] = {}


def record_for(name: str) -> OverlayRecord:
    return RECORDS.setdefault(name, OverlayRecord())
