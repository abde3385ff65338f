"""What the fix costs: `loss_call` (``scripts/bench.py``) times one loss call of the patched trees against the vanilla
ones and counts the host synchronisations it makes (`syncs`); `pre_pass` (``scripts/bench.py --pre-pass``) times the
no-grad forward before a later update against the training step; `startup` (``scripts/bench_startup.py``) times the
overlays' start-up in a fresh interpreter."""
