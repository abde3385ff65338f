"""``python -m patchset_overlay``: what the overlays do in this process, and their fingerprints.

- ``status [--json]``: each overlay, each piece, its state and the reason (imports the upstreams to judge them);
- ``show [FILE]``: the files the overlays derive on the installed releases, or the text of one (a module such as
  ``verl.workers.utils.losses``, or a path such as ``verl/trainer/config/critic/critic.yaml``): what runs here;
- ``fingerprints --root UPSTREAM=PATH [--root ...] [--write | --check]``: the sha256 of every target's source in the
  unpatched release whose package folder is PATH, UPSTREAM the import name of a registered overlay's upstream (e.g.
  ``verl``; see `patchset_overlay.fingerprints`).

Exit codes: 0 done; 1 ``--check`` found stale fingerprints; 2 bad arguments (a root that is not a package folder, a
file no overlay derives here).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path


def _status(as_json: bool) -> int:
    from patchset_overlay.status import collect, render

    report = collect()
    print(json.dumps(report, indent=2) if as_json else render(report))
    return 0


def _show(wanted: str | None) -> int:
    """List the derived files (their pieces' patches applied on the installed release), or print one of them."""
    from patchset_overlay.runtime import verdicts
    from patchset_overlay.startup import overlays

    found = {}
    for overlay in overlays():
        plan, _ = verdicts(overlay)
        for path, derived in (plan.derived if plan is not None else {}).items():
            found[path] = derived
            found[path.removesuffix(".py").replace("/", ".")] = derived
    if wanted is None:
        for derived in {derived.path: derived for derived in found.values()}.values():
            print(f"{derived.path}  ({derived.filename})")
        return 0
    if wanted not in found:
        print(
            f"error: show {wanted}: no overlay derives it here (python -m patchset_overlay show lists them)",
            file=sys.stderr,
        )
        return 2
    print(found[wanted].text, end="")
    return 0


def _root_forms() -> str:
    """``verl=PATH or trinity=PATH``: the ``--root`` forms, one per registered overlay's upstream."""
    from patchset_overlay.startup import overlays

    return " or ".join(f"{overlay.upstream}=PATH" for overlay in overlays())


def _fingerprints(roots: list[str], write: bool, check: bool) -> int:
    from patchset_overlay.fingerprints import compute, fingerprints_path, recorded, render, stale
    from patchset_overlay.source import UpstreamSource
    from patchset_overlay.startup import overlays

    by_upstream = {overlay.upstream: overlay for overlay in overlays()}
    problems = 0
    for item in roots:
        upstream, _, folder = item.partition("=")
        root = Path(folder).resolve()
        if upstream not in by_upstream or not (root / "__init__.py").is_file():
            print(f"error: --root {item}: expected {_root_forms()}, PATH a package folder", file=sys.stderr)
            return 2
        overlay, source = by_upstream[upstream], UpstreamSource(upstream, root)
        path = fingerprints_path(overlay)
        if check:
            keys = stale(overlay, source)
            for key in keys:
                print(
                    f"{path}: stale fingerprint for {key} (run: python -m patchset_overlay fingerprints --write "
                    f"--root {upstream}=PATH)"
                )
            problems += len(keys)
        elif write:  # this release's set, beside the other releases' sets already stored
            path.write_text(render({**recorded(overlay), source.version(): compute(overlay, source)}), encoding="utf-8")
            print(f"* Wrote the fingerprints of {upstream} {source.version()} into {path}")
        else:
            print(render({source.version(): compute(overlay, source)}), end="")
    return 1 if problems else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m patchset_overlay",
        description="What the overlays do in this process, and the fingerprints they check.",
        epilog="Exit codes: 0 done; 1 --check found stale fingerprints; 2 bad arguments.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    status_parser = commands.add_parser("status", help="what is active in this process, and why")
    status_parser.add_argument("--json", action="store_true", help="machine-readable output")
    show_parser = commands.add_parser("show", help="the files the overlays derive here, or the text of one")
    show_parser.add_argument("file", nargs="?", help="a module (verl.workers.utils.losses) or a path in the tree")
    prints = commands.add_parser("fingerprints", help="sha256 of every target's source in an unpatched release")
    prints.add_argument(
        "--root",
        action="append",
        required=True,
        metavar="UPSTREAM=PATH",
        help=f"{_root_forms()}: the package folder of the release (repeatable)",
    )
    mode = prints.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="store them in each overlay's fingerprints.json")
    mode.add_argument("--check", action="store_true", help="exit 1 if a stored fingerprint differs")
    args = parser.parse_args(argv)
    if args.command == "status":
        return _status(args.json)
    if args.command == "show":
        return _show(args.file)
    return _fingerprints(args.root, args.write, args.check)


if __name__ == "__main__":
    raise SystemExit(main())
