"""Command-line options shared by the patchset commands (apply, fetch, export)."""

from __future__ import annotations

import argparse
import os

from patchset.upstreams.fetch import CACHE_ENV
from patchset.upstreams.workspace import Workspace, resolve_workspace


def add_common_options(parser: argparse.ArgumentParser, *, cache: bool = True) -> None:
    """``--cache`` (unless ``cache`` is off), ``--patches-dir`` and ``-q/--quiet``, worded the same everywhere."""
    if cache:
        parser.add_argument(
            "--cache",
            metavar="DIR",
            help=f"cache folder for sdists and checkouts (default: ${CACHE_ENV}, else <repo>/.cache)",
        )
    parser.add_argument(
        "--patches-dir",
        metavar="DIR",
        help="folder holding upstreams.toml and the series folders (default: the repository's patches/)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print only summaries, warnings and errors")


def workspace_from(args: argparse.Namespace) -> Workspace:
    """The run's `Workspace` from ``--patches-dir`` and ``--cache`` (or ``$PATCHSET_CACHE``), resolved once."""
    return resolve_workspace(args.patches_dir, getattr(args, "cache", None), os.environ)
