"""``python -m patchset_overlay``: ``status [--json]`` (each overlay and piece, its state and why), ``show [FILE]``
(the files the overlays derive here, or one's text) and ``fingerprints --root UPSTREAM=PATH [--write | --check]``:
the sha256 of every file an overlay derives on the unpatched release in PATH, which the guard checks.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from patchset_overlay.derive import Plan, sha256
from patchset_overlay.guard import fingerprints_path, recorded
from patchset_overlay.runtime import verdicts
from patchset_overlay.spec import UpstreamSource
from patchset_overlay.startup import overlays
from patchset_overlay.status import collect, render


def _show(wanted: str | None) -> int:
    """List the derived files (their pieces' patches applied on the installed release), or print one of them."""
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
    return " or ".join(f"{overlay.upstream}=PATH" for overlay in overlays())


def _fingerprints(roots: list[str], write: bool, check: bool) -> int:
    by_upstream = {overlay.upstream: overlay for overlay in overlays()}
    problems = 0
    for item in roots:
        upstream, _, folder = item.partition("=")
        root = Path(folder).resolve()
        if upstream not in by_upstream or not (root / "__init__.py").is_file():
            print(f"error: --root {item}: expected {_root_forms()}, PATH a package folder", file=sys.stderr)
            return 2
        overlay, source = by_upstream[upstream], UpstreamSource(upstream, root)
        path, plan = fingerprints_path(overlay), Plan.make(overlay, source)
        # {"path in the tree": sha256} of every file the overlay derives on this release, read from it
        fresh = {file: sha256(plan.installed_text(file)) for file in sorted(plan.files(plan.patches))}
        if check:
            stored = recorded(overlay).get(source.version(), {})
            keys = sorted(key for key in stored.keys() | fresh.keys() if stored.get(key) != fresh.get(key))
            for key in keys:
                print(
                    f"{path}: stale fingerprint for {key} (run: python -m patchset_overlay fingerprints --write "
                    f"--root {upstream}=PATH)"
                )
            problems += len(keys)
        elif write:  # this release's set, beside the other releases' sets already stored
            every = {**recorded(overlay), source.version(): fresh}
            path.write_text(json.dumps(every, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            print(f"* Wrote the fingerprints of {upstream} {source.version()} into {path}")
        else:
            print(json.dumps({source.version(): fresh}, indent=2, sort_keys=True))
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
        report = collect()
        print(json.dumps(report, indent=2) if args.json else render(report))
        return 0
    if args.command == "show":
        return _show(args.file)
    return _fingerprints(args.root, args.write, args.check)


if __name__ == "__main__":
    raise SystemExit(main())
