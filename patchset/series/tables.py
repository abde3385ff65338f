"""README.md's patch table and docs/loss-audit.md's table, made from the series' declarations, never by hand.

One row a patch of every series the pins name: the patch, the pinned releases that take it (those that do not have
it upstream by its DEP-3 ``Applied-Upstream``), what is wrong without it (``summary`` in the series' ``parts.toml``)
and where upstream stands (``fixed in <upstream> <version>`` with the link its header gives, else ``not fixed`` with
its ``Bug:`` link). The loss audit: one row a loss the engine path can call (``[[loss-audit]]`` in the ``parts.toml``
of each default pin's series), its fix followed by the patches whose ``audit`` names that loss. ``python -m
patchset.series.tables --write`` puts both between their files' markers; ``--check`` exits 1 when either is not the
one the declarations make (tests/scripts/test_tables.py too).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from patchset.series.model import Patch, load_series
from patchset.series.parts import read_parts, slug_of
from patchset.upstreams.pins import at_least, load_pins, release_key

START = "<!-- patch table: made by `python -m patchset.series.tables --write`; edit parts.toml, not this -->"
END = "<!-- end of patch table -->"
AUDIT_START = "<!-- loss audit table: made by `python -m patchset.series.tables --write`; edit parts.toml, not this -->"
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


def _block(text: str, start_marker: str, end_marker: str, path: Path) -> tuple[int, int]:
    start, end = text.find(start_marker), text.find(end_marker)
    if start < 0 or end < start:
        raise ValueError(f"{path} has no table markers ({start_marker!r} ... {end_marker!r})")
    return start, end + len(end_marker)


def drifted(root: Path, patches_dir: Path) -> list[Path]:
    """The files whose table differs from the one the declarations make."""
    found = []
    for relative, start_marker, end_marker, make in TABLES:
        path = root / relative
        text = path.read_text(encoding="utf-8")
        start, end = _block(text, start_marker, end_marker, path)
        if text[start:end] != make(patches_dir):
            found.append(path)
    return found


def write(root: Path, patches_dir: Path) -> None:
    for relative, start_marker, end_marker, make in TABLES:
        path = root / relative
        text = path.read_text(encoding="utf-8")
        start, end = _block(text, start_marker, end_marker, path)
        path.write_text(text[:start] + make(patches_dir) + text[end:], encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m patchset.series.tables",
        description="Print README.md's patch table and docs/loss-audit.md's table as the series' parts.toml make them.",
        epilog="Exit codes: 0 done; 1 --check found README.md's table out of date; 2 bad input.",
    )
    parser.add_argument("--write", action="store_true", help="put them into their files, between the markers")
    parser.add_argument("--check", action="store_true", help="exit 1 when a file's table differs")
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parents[2]
    patches_dir = root / "patches"
    try:
        if args.check:
            for path in drifted(root, patches_dir):
                print(f"{path}: the table is out of date (run: python -m patchset.series.tables --write)")
            return 1 if drifted(root, patches_dir) else 0
        if args.write:
            write(root, patches_dir)
            print(f"* Wrote the tables into {', '.join(relative for relative, *_ in TABLES)}")
            return 0
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(patch_table(patches_dir) + "\n\n" + audit_table(patches_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
