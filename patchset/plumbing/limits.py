"""``PATCHSET_TIME_SCALE``: the one knob that raises every time limit on a slower machine."""

from __future__ import annotations

import os

from patchset.plumbing.errors import BadInput

TIME_SCALE_VARIABLE = "PATCHSET_TIME_SCALE"
RAISE_HINT = f"{TIME_SCALE_VARIABLE}=2 doubles every limit"


def scaled(seconds: float) -> float:
    """``seconds``, the limit on this project's machine, times ``PATCHSET_TIME_SCALE`` (default 1)."""
    value = os.environ.get(TIME_SCALE_VARIABLE, "").strip()
    try:
        scale = float(value) if value else 1.0
    except ValueError:
        scale = 0.0
    if not scale > 0 or scale == float("inf"):
        raise BadInput(f"{TIME_SCALE_VARIABLE}={value!r} is not a positive number (the factor every time limit takes)")
    return seconds * scale
