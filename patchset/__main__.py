"""Entry point for ``python -m patchset``."""

from __future__ import annotations

from patchset.cli import main

raise SystemExit(main())
