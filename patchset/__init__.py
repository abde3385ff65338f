"""Apply this project's patch series to pinned verl / Trinity-RFT releases or to a user's own checkout.

Run ``python -m patchset --help`` (or ``scripts/apply.sh --help``). The package is stdlib-only so that it runs
with the system ``python3`` before any virtual environment exists.
"""

from __future__ import annotations
