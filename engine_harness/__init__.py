"""Drives verl's real engine and losses for the regression tests (tests/), the proof and the benchmarks.

Beside `patchset`, not in it, nor in the wheel: it runs inside the processes that import the trees under test, and
needs only `patchset.plumbing` (tests/scripts/test_layers.py). Only `sim` imports torch or verl at import time: the
scripts' main processes read the constants.
"""

from __future__ import annotations

# verl's four ways to aggregate a loss over tokens and sequences (``loss_agg_mode``)
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
