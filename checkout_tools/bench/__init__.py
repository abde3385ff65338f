"""What the fix costs: `loss_call` (``scripts/bench.py``) times one loss call of the patched trees against the vanilla
ones and counts the host synchronisations it makes; `startup` (``scripts/bench_startup.py``) times the overlays'
start-up in a fresh interpreter."""
