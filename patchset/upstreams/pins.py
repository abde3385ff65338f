"""The pinned upstream releases (``patches/upstreams.toml``) and version ordering."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from patchset.plumbing.errors import BadInput

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_FIELDS = ("key", "name", "version", "sdist_sha256", "repository", "tag", "series")


@dataclass(frozen=True)
class Pin:
    """One pinned upstream release: where its sdist comes from and which series it takes."""

    key: str
    name: str
    version: str
    sdist_sha256: str
    repository: str
    tag: str
    series: str
    default: bool
    # the upstream key whose trees are tested beside this release (vanilla); None: none are
    companion_for: str | None = None
    # False for a release pinned only as a companion, which its series does not target
    target: bool = True

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"

    @property
    def dirname(self) -> str:
        return f"{self.name}-{self.version}"


@dataclass(frozen=True)
class Pins:
    """All pins of an ``upstreams.toml``, in file order."""

    pins: tuple[Pin, ...]
    source: Path

    def find(self, key: str, version: str) -> Pin | None:
        return next((p for p in self.pins if p.key == key and p.version == version), None)

    def for_key(self, key: str) -> tuple[Pin, ...]:
        return tuple(p for p in self.pins if p.key == key)

    def versions(self, key: str) -> list[str]:
        """The versions of ``key`` that a series targets (companion-only pins excluded)."""
        return sorted((p.version for p in self.for_key(key) if p.target), key=release_key)

    def defaults(self) -> tuple[Pin, ...]:
        return tuple(p for p in self.pins if p.default)

    def default_for(self, key: str) -> Pin | None:
        return next((p for p in self.defaults() if p.key == key), None)

    def series_pin(self, key: str, version: str) -> Pin | None:
        """The pin whose series a release of ``key`` takes: its own pin if a series targets it, else the newest
        targeted pin of its release line (verl 0.7.2: 0.7.1's), else the default pin."""
        minor = release_key(version)[0][:2]
        line = [p for p in self.for_key(key) if p.target and release_key(p.version)[0][:2] == minor]
        exact = next((p for p in line if p.version == version), None)
        return exact or max(line, key=lambda p: release_key(p.version), default=None) or self.default_for(key)

    def companions(self, key: str, of: str) -> tuple[Pin, ...]:
        """Releases of ``key`` beside which trees of upstream ``of`` are also tested (as released, unpatched)."""
        return tuple(p for p in self.for_key(key) if p.companion_for == of)


def load_pins(path: Path) -> Pins:
    """Read and validate ``upstreams.toml``; raise ``BadInput`` naming the file on any problem."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(f"{path} not found; pass --patches-dir DIR with the folder that holds upstreams.toml") from None
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read {path}: {exc}") from None
    tables = data.get("upstream")
    if not isinstance(tables, list) or not tables:
        raise BadInput(f"{path} has no [[upstream]] tables")
    pins: list[Pin] = []
    for index, table in enumerate(tables, start=1):
        where = f"{path}: [[upstream]] #{index}"
        if missing := [f for f in _FIELDS if not isinstance(table.get(f), str) or not table.get(f)]:
            raise BadInput(f"{where} lacks {', '.join(missing)} (each must be a non-empty string)")
        if not _SHA256.match(table["sdist_sha256"]):
            raise BadInput(f"{where}: sdist_sha256 must be 64 lowercase hex digits")
        default = table.get("default", False)
        if not isinstance(default, bool):
            raise BadInput(f"{where}: default must be true or false")
        companion_for = table.get("companion_for")
        if companion_for is not None and (not isinstance(companion_for, str) or not companion_for or default):
            raise BadInput(f"{where}: companion_for must name an upstream key, on a pin that is not the default")
        target = table.get("target", True)
        if not isinstance(target, bool) or (not target and (companion_for is None or default)):
            raise BadInput(f"{where}: target must be true or false, and false only on a companion_for pin")
        pin = Pin(**{f: table[f] for f in _FIELDS}, default=default, companion_for=companion_for, target=target)
        if any(p.key == pin.key and p.version == pin.version for p in pins):
            raise BadInput(f"{where}: {pin.key} {pin.version} is pinned twice")
        if default and any(p.key == pin.key and p.default for p in pins):
            raise BadInput(f"{where}: a second default pin for {pin.key}")
        pins.append(pin)
    return Pins(pins=tuple(pins), source=path)


_RELEASE = re.compile(r"^v?(?P<nums>\d+(?:\.\d+)*)(?P<rest>.*)$")


def release_key(version: str) -> tuple[tuple[int, ...], int, str]:
    """A sort key for release versions: ``0.9.0 < 0.9.1 < 0.10.0``, and ``0.9.0rc1`` / ``0.9.0.dev0`` before
    ``0.9.0``. Unparsable versions sort first."""
    match = _RELEASE.match(version.strip())
    if not match:
        return ((), 0, version)
    nums = tuple(int(n) for n in match["nums"].split("."))
    while len(nums) > 1 and nums[-1] == 0:
        nums = nums[:-1]
    rest = match["rest"]
    final = 0 if re.match(r"^[.\-_]?(a|b|c|rc|alpha|beta|pre|preview|dev)", rest, re.IGNORECASE) else 1
    return (nums, final, rest)


def at_least(version: str, minimum: str) -> bool:
    """True when release ``version`` is ``minimum`` or later (by ``release_key``, ignoring local suffixes)."""
    have, want = release_key(version), release_key(minimum)
    return (have[0], have[1]) >= (want[0], want[1])
