"""Which pinned releases a wheel build makes: ``--pin NAME==VERSION``, as a pip user writes a requirement.

A pin is buildable when ``patches/upstreams.toml`` pins that release and a series targets it: the default pins
(verl 0.8.0, trinity-rft 0.6.0) and the other releases of a series (verl 0.9.0 and 0.9.1, which take the part of the
verl series that upstream does not have; verl 0.7.0 and 0.7.1, which take the series of their line). A
companion-only pin (``target = false``) is no series' target, so there is nothing to build from it. Every request is
checked before anything is fetched or built, and a bad one is refused with one line that names it and lists what
can be built.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from patchset.plumbing.errors import BadInput
from patchset.plumbing.ui import display_path
from patchset.upstreams.pins import Pin, Pins

# NAME==VERSION, spaces allowed around ==; the version is a release as upstreams.toml writes it (no local label)
_REQUIREMENT = re.compile(r"^\s*(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*==\s*(?P<version>\S+?)\s*$")


def _normalized(name: str) -> str:
    """The name as PEP 503 compares names: ``Trinity_RFT`` and ``trinity-rft`` are the same project."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement(pin: Pin) -> str:
    """``pin`` as ``--pin`` takes it: ``verl==0.9.1``."""
    return f"{pin.name}=={pin.version}"


def buildable(pins: Pins) -> tuple[Pin, ...]:
    """The pins a series targets (companion-only pins excluded), in the order of ``upstreams.toml``."""
    return tuple(pin for pin in pins.pins if pin.target)


def _listing(pins: Pins) -> str:
    return ", ".join(requirement(pin) for pin in buildable(pins)) or "none"


def select_pins(pins: Pins, requested: Sequence[str]) -> tuple[Pin, ...]:
    """The pins named by ``requested`` (``NAME==VERSION`` each), in the order given, each once; the default pins when
    ``requested`` is empty. Raises ``BadInput`` for a request that is malformed, carries a local label, names a
    companion pin or no pin at all."""
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
        name, version = _normalized(match["name"]), match["version"]
        if "+" in version:
            raise BadInput(
                f"--pin {text}: give the upstream release without a local label (--pin {match['name']}=="
                f"{version.partition('+')[0]}); the build labels the wheel +patchset.N itself"
            )
        pin = next((p for p in pins.pins if _normalized(p.name) == name and p.version == version), None)
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
