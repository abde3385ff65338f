"""``python -m patchset_overlay status [--json]``: print each overlay, its state and the reason."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m patchset_overlay", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    status_parser = commands.add_parser("status", help="what is active in this process, and why")
    status_parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)

    from patchset_overlay.status import collect, render

    report = collect()
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
