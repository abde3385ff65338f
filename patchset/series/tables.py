"""README.md's patch table and docs/loss-audit.md's table, made from the DEP-3 headers and ``parts.toml``, never by
hand: ``export tables --write`` puts them between their markers; ``--check`` exits 1 when either differs."""

from __future__ import annotations

import re
from pathlib import Path

from patchset.plumbing import marked
from patchset.series.model import Patch, load_series
from patchset.series.parts import read_parts, slug_of
from patchset.upstreams.pins import at_least, load_pins, release_key

WRITE = "python -m patchset export tables --write"
START = f"<!-- patch table: made by `{WRITE}`; edit parts.toml, not this -->"
END = "<!-- end of patch table -->"
AUDIT_START = f"<!-- loss audit table: made by `{WRITE}`; edit parts.toml, not this -->"
AUDIT_END = "<!-- end of loss audit table -->"
AUDIT_KEY = "loss-audit"  # the array of rows in a parts.toml, beside the patches' tables
_ISSUE = re.compile(r"github\.com/([^/]+)/([^/]+)/(?:issues|pull)/(\d+)")


def _link(url: str) -> str:
    """``[verl#6957](https://github.com/verl-project/verl/pull/6957)``, or the URL as it is."""
    match = _ISSUE.search(url)
    return f"[{match.group(2)}#{match.group(3)}]({url})" if match else url


def _upstream(patch: Patch, name: str) -> str:
    since = patch.upstream_since
    if since:
        url = patch.fields.get("Applied-Upstream", "").partition(",")[2].split()
        return f"fixed in {name} {since}" + (f" ({_link(url[0])})" if url else "")
    bug = patch.fields.get("Bug", "").strip()
    return "not fixed" + (f" ({_link(bug)})" if bug else "")


def patch_table(patches_dir: Path) -> str:
    """The table, as markdown lines between the markers."""
    pins = load_pins(patches_dir / "upstreams.toml")
    lines = [START, "", "| patch | releases | what is wrong without it | upstream |", "|---|---|---|---|"]
    for series_name in dict.fromkeys(pin.series for pin in pins.pins):
        series = load_series(patches_dir, series_name)
        pinned = [pin for pin in pins.pins if pin.series == series_name]
        label = "Trinity" if pinned[0].key == "trinity" else series_name
        declared = read_parts(patches_dir / series_name)
        for number, patch in enumerate(series.patches, start=1):
            since = patch.upstream_since
            releases = sorted(
                (pin.version for pin in pinned if not since or not at_least(pin.version, since)), key=release_key
            )
            summary = declared.get(slug_of(patch.name), {}).get("summary", "")
            link = f"[{label} {number:04d}](patches/{series_name}/{patch.name})"
            lines.append(f"| {link} | {', '.join(releases)} | {summary} | {_upstream(patch, pinned[0].name)} |")
    return "\n".join([*lines, "", END])


def audit_table(patches_dir: Path) -> str:
    """The loss audit's table, as markdown lines between the markers."""
    pins = load_pins(patches_dir / "upstreams.toml")
    lines = [AUDIT_START, "", "| loss | normalizes by the global mini-batch? | with this series |", "|---|---|---|"]
    for pin in pins.defaults():
        series = load_series(patches_dir, pin.series)
        declared = read_parts(patches_dir / pin.series)
        label = "Trinity" if pin.key == "trinity" else pin.series
        for row in declared.get(AUDIT_KEY, []):
            numbers = [
                f"{number:04d}"
                for number, patch in enumerate(series.patches, start=1)
                if any(loss in row["loss"] for loss in declared.get(slug_of(patch.name), {}).get("audit", ()))
            ]
            fix = f"{row['fix']}: {label} {', '.join(numbers)}" if numbers else row["fix"]
            lines.append(f"| {row['loss']} | {row['global']} | {fix} |")
    return "\n".join([*lines, "", AUDIT_END])


# each generated table: its file (relative to the repository), its markers, and what makes it
TABLES = (("README.md", START, END, patch_table), ("docs/loss-audit.md", AUDIT_START, AUDIT_END, audit_table))


def drifted(root: Path, patches_dir: Path) -> list[Path]:
    """The files whose table differs from the one the declarations make."""
    return [
        root / relative
        for relative, start, end, make in TABLES
        if marked.differs(root / relative, start, end, "table", make(patches_dir))
    ]


def write(root: Path, patches_dir: Path) -> None:
    made = [(root / relative, start, end, make(patches_dir)) for relative, start, end, make in TABLES]
    for path, start, end, _ in made:
        marked.section(path, start, end, "table")  # every file has its markers before any is written
    for path, start, end, table in made:
        marked.replace(path, start, end, "table", table)
