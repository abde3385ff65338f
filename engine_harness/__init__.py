"""Drives verl's real engine and losses: for the regression tests (tests/), the proof and the benchmarks.

A top-level package beside `patchset`, not in it: it runs inside the processes that import the trees under test (the
regression suite's, tests/overlay's, the proof's ranks, the benchmarks' children), and of the tooling it needs only
`patchset.plumbing`. It runs from the checkout and is not in the project's wheel (setup.cfg names the shipped packages).
It imports nothing from tests/ or scripts/ (tests/scripts/test_layers.py).

Nothing here imports torch or verl at import time except `sim`: the scripts' main processes read the constants.
"""

from __future__ import annotations

# verl's four ways to aggregate a loss over tokens and sequences (``loss_agg_mode``)
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
