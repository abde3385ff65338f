"""Command line: ``python -m patchset wheels [build|manifest]``; the work is ``patchset.wheels.build``."""

from __future__ import annotations

import argparse
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from patchset.cli.exits import CACHE_WAIT_HELP, INTERNAL_HELP
from patchset.cli.options import add_common_options, workspace_from
from patchset.cli.startup import Run, add_parser
from patchset.plumbing import signals
from patchset.plumbing.errors import EXIT_OK, BadInput
from patchset.plumbing.paths import REPO_ROOT
from patchset.plumbing.ui import Console, display_path
from patchset.wheels.build import DISTRIBUTIONS, WheelBuild, build_wheels, report_manifests


def _dist_dir(args: argparse.Namespace) -> Path:
    return Path(args.dist_dir).expanduser().resolve() if args.dist_dir else REPO_ROOT / "dist"


EXIT_CODES = """\
exit status:
  0  built: every wheel is in the dist folder (manifest: every package has a manifest)
  1  pip could not build a wheel, the wheel is not the one expected, or the build environment could not be
     made; nothing was put into the dist folder
     (manifest: a package is not importable or has no manifest)
  2  bad input: usage; a --pin that is not NAME==VERSION of a release a series targets (a companion-only pin,
     a release not pinned); bad upstreams.toml, series or patch; no revision (not a git checkout: pass
     --revision); sha256 mismatch, PyPI unreachable with no sdist cached, failed fetch; the tree's version is not
     the pin's
  3  a patch does not apply to the pinned release (the message names the patch, file and hunk)
"""
EXIT_CODES += CACHE_WAIT_HELP + INTERNAL_HELP + "  130, 143, 129  interrupted by SIGINT, SIGTERM or SIGHUP\n"

DESCRIPTION = """\
Build patched wheels of the default pins of patches/upstreams.toml (verl 0.8.0, trinity-rft 0.6.0), or of each
release named with --pin: the series applied as scripts/apply.sh applies it, version <release>+patchset.<N> (N:
the commits that touch patches/), and a manifest <package>/_patchset_manifest.json inside; built with pip wheel
by the test environment's python, into DIST (default: <repo>/dist). docs/guide.md says more.

examples:
  scripts/build-wheels.sh                           verl 0.8.0 and trinity-rft 0.6.0 (the default pins)
  scripts/build-wheels.sh --pin verl==0.9.1         verl 0.9.1 alone, with the patches upstream lacks there
  scripts/build-wheels.sh --pin verl==0.8.0 --pin verl==0.9.1 --pin trinity-rft==0.6.0
"""


def register(commands: argparse._SubParsersAction, name: str, help: str) -> Run:
    """Add ``wheels``' parser, with ``build`` (the default) and ``manifest``, to the top-level ``commands``."""
    epilog = EXIT_CODES + "\nWith no command, 'build' runs."
    parser = add_parser(commands, name, help, prog="scripts/build-wheels.sh", description=DESCRIPTION, epilog=epilog)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    build = add_parser(
        commands, "build", "build the patched wheels (default)", description=DESCRIPTION, epilog=EXIT_CODES
    )
    build.add_argument(
        "--pin",
        action="append",
        default=[],
        metavar="NAME==VERSION",
        help="build this pinned release (repeatable; default: the default pins). Any release of "
        "patches/upstreams.toml that a series targets, e.g. verl==0.9.1 or verl==0.7.1; a companion-only pin "
        "(target = false) or a release not pinned there is refused (exit 2)",
    )
    build.add_argument("--dist-dir", metavar="DIST", help="where the wheels go (default: <repo>/dist)")
    build.add_argument(
        "--revision", type=int, metavar="N", help="the patchset revision for the label, instead of counting commits"
    )
    add_common_options(build)
    manifest = commands.add_parser(
        "manifest",
        help="print the patchset manifest of the installed verl and trinity",
        description="Print the patchset manifest of the packages 'import' would load (without importing them).",
        epilog="exit status: 0 every package has a manifest; 1 one is not importable or has none; 2 usage",
    )
    manifest.add_argument("packages", nargs="*", default=list(DISTRIBUTIONS), metavar="PACKAGE")
    manifest.add_argument("--json", action="store_true", help="print JSON: location, installed version, manifest")
    manifest.add_argument(
        "--python",
        metavar="PYTHON",
        help="the python of the environment to read (default: the one running this; this project is not installed "
        "there, the command runs from this checkout)",
    )

    def parse(line: Sequence[str]) -> argparse.Namespace:
        if not line or line[0] not in ("build", "manifest", "-h", "--help"):
            line = ["build", *line]
        return parser.parse_args(line)

    return Run(_handle, interrupted=_interrupted, parse=parse)


def _handle(args: argparse.Namespace, console: Console, guard: signals.Guard) -> int:
    """``build`` (the default): each wheel printed once; ``manifest``: each package's (1 when one has none)."""
    if args.command != "manifest":
        build = WheelBuild(_dist_dir(args), requested=args.pin, revision=args.revision)
        for item in build_wheels(build, workspace_from(args), console, guard):
            console.summary(str(item.wheel))
        return EXIT_OK
    if args.python:  # read that environment: run this same command with its interpreter, from this checkout
        command = [args.python, "-P", "-m", "patchset", "wheels", "manifest", *args.packages]
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        try:
            return subprocess.run([*command, *(["--json"] if args.json else [])], env=env).returncode
        except OSError as error:
            raise BadInput(f"cannot run --python {args.python}: {error.strerror}") from None
    return report_manifests(args.packages, console, as_json=args.json)


def _interrupted(args: argparse.Namespace) -> str:
    return "" if args.command == "manifest" else f"no wheel was put into {display_path(_dist_dir(args))}"
