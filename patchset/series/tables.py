"""README.md's patch table, made from the series and their declarations, never written by hand.

One row a patch of every series the pins name: the patch, the pinned releases that take it (those that do not have
it upstream by its DEP-3 ``Applied-Upstream``), what is wrong without it (``summary`` in the series' ``parts.toml``)
and where upstream stands (``fixed in <upstream> <version>`` with the link its header gives, else ``not fixed`` with
its ``Bug:`` link). ``python -m patchset.series.tables --write`` puts it between README.md's markers;
``--check`` exits 1 when README.md's table is not the one the declarations make (tests/scripts/test_tables.py too).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from patchset.series.model import Patch, load_series
from patchset.series.parts import read_parts, slug_of
from patchset.upstreams.pins import load_pins

START = "<!-- patch table: made by `python -m patchset.series.tables --write`; edit parts.toml, not this -->"
END = "<!-- end of patch table -->"
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


def _release_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


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
                (pin.version for pin in pinned if not since or _release_key(pin.version) < _release_key(since)),
                key=_release_key,
            )
            summary = declared.get(slug_of(patch.name), {}).get("summary", "")
            link = f"[{label} {number:04d}](patches/{series_name}/{patch.name})"
            lines.append(f"| {link} | {', '.join(releases)} | {summary} | {_upstream(patch, pinned[0].name)} |")
    return "\n".join([*lines, "", END])


def _block(readme: str) -> tuple[int, int]:
    start, end = readme.find(START), readme.find(END)
    if start < 0 or end < start:
        raise ValueError(f"README.md has no patch table markers ({START!r} ... {END!r})")
    return start, end + len(END)


def drift(readme_path: Path, patches_dir: Path) -> bool:
    """Whether README.md's table differs from the one the declarations make."""
    readme = readme_path.read_text(encoding="utf-8")
    start, end = _block(readme)
    return readme[start:end] != patch_table(patches_dir)


def write(readme_path: Path, patches_dir: Path) -> None:
    readme = readme_path.read_text(encoding="utf-8")
    start, end = _block(readme)
    readme_path.write_text(readme[:start] + patch_table(patches_dir) + readme[end:], encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m patchset.series.tables",
        description="Print README.md's patch table as the series and their parts.toml make it.",
        epilog="Exit codes: 0 done; 1 --check found README.md's table out of date; 2 bad input.",
    )
    parser.add_argument("--write", action="store_true", help="put it into README.md, between its markers")
    parser.add_argument("--check", action="store_true", help="exit 1 when README.md's table differs")
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parents[2]
    readme, patches_dir = root / "README.md", root / "patches"
    try:
        if args.check:
            if drift(readme, patches_dir):
                print(f"{readme}: the patch table is out of date (run: python -m patchset.series.tables --write)")
                return 1
            return 0
        if args.write:
            write(readme, patches_dir)
            print(f"* Wrote the patch table into {readme}")
            return 0
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(patch_table(patches_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
