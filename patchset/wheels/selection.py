"""Which pinned releases a wheel build makes: ``--pin NAME==VERSION``, each checked before anything is fetched."""

from __future__ import annotations

import re
from collections.abc import Sequence

from patchset.plumbing.errors import BadInput
from patchset.plumbing.ui import display_path
from patchset.upstreams.fetch import normalized
from patchset.upstreams.pins import Pin, Pins

# NAME==VERSION, spaces allowed around ==; the version is a release as upstreams.toml writes it (no local label)
_REQUIREMENT = re.compile(r"^\s*(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*==\s*(?P<version>\S+?)\s*$")


def requirement(pin: Pin) -> str:
    """``pin`` as ``--pin`` takes it: ``verl==0.9.1``."""
    return f"{pin.name}=={pin.version}"


def _listing(pins: Pins) -> str:
    """The pins a series targets (companion-only pins excluded), in the order of ``upstreams.toml``."""
    return ", ".join(requirement(pin) for pin in pins.pins if pin.target) or "none"


def select_pins(pins: Pins, requested: Sequence[str]) -> tuple[Pin, ...]:
    """The pins ``requested`` names (``NAME==VERSION`` each), in order, each once; none: the default pins."""
    if not requested:
        defaults = pins.defaults()
        if not defaults:
            raise BadInput(
                f"{display_path(pins.source)} marks no [[upstream]] as default = true; name the releases with --pin"
            )
        return defaults
    chosen: dict[Pin, None] = {}
    for text in requested:
        match = _REQUIREMENT.match(text)
        if match is None:
            raise BadInput(
                f"--pin {text!r}: expected NAME==VERSION of a pinned release, e.g. --pin verl==0.9.1 "
                f"(buildable: {_listing(pins)})"
            )
        name, version = normalized(match["name"]), match["version"]
        if "+" in version:
            raise BadInput(
                f"--pin {text}: give the upstream release without a local label (--pin {match['name']}=="
                f"{version.partition('+')[0]}); the build labels the wheel +patchset.N itself"
            )
        pin = next((p for p in pins.pins if normalized(p.name) == name and p.version == version), None)
        if pin is None:
            raise BadInput(
                f"--pin {text}: {display_path(pins.source)} does not pin that release (buildable: {_listing(pins)})"
            )
        if not pin.target:
            raise BadInput(
                f"--pin {text}: {pin.label} is pinned only to test {pin.companion_for} trees beside it; the "
                f"{pin.series} series does not target it, so there is no patched wheel of it (buildable: "
                f"{_listing(pins)})"
            )
        chosen.setdefault(pin, None)
    return tuple(chosen)
