"""Per-process record of what each overlay did: the one piece of global state overlays need.

Activation patches objects shared by the whole interpreter, so what is active is a property of the process; this
module is where it is written down, for `status` and for undo.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum


class PieceState(Enum):
    PENDING = "pending"  # activated, waiting for the upstream modules to be imported
    ACTIVE = "active"
    UPSTREAM_HAS_FIX = "off (upstream has the fix)"
    REFUSED = "off (refused)"
    INACTIVE = "off"


@dataclass
class PieceRecord:
    state: PieceState = PieceState.INACTIVE
    reason: str = "not activated in this process"
    undo: list[Callable[[], None]] = field(default_factory=list)


@dataclass
class OverlayRecord:
    enabled: bool = False
    hooks_registered: bool = False
    imported: set[str] = field(default_factory=set)
    pieces: dict[str, PieceRecord] = field(default_factory=dict)
    warned: set[str] = field(default_factory=set)
    loading: set[str] = field(default_factory=set)  # pieces importing their `loads` modules right now
    how: str = ""  # how it was activated: "explicit" or "automatic (...)"


RECORDS: dict[str, OverlayRecord] = {}


def record_for(name: str) -> OverlayRecord:
    return RECORDS.setdefault(name, OverlayRecord())
