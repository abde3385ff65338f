"""The GPU proof (`scripts/gpu_proof.py`): verl's real FSDP2 engine, vanilla against patched, on the user's hardware.

- `cases`: what is measured and what each tree should show (no torch, no verl: the main process reads it);
- `verdict`: pass or fail per case, from the measurements, and the tolerances and why;
- `report`: the tables and lines the user reads;
- `side`: one tree's process (``python -m gpuproof.side``): starts the ranks and gathers what rank 0 measured;
- `rank`: one rank: the engines, the data and the steps, with the trees' own verl and Trinity modules.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The engine, data and losses come from the checkout's `engine_harness` (not shipped in the wheel); appended, so the
# trees under test and the installed packages stay in front. Here, so that every process importing gpuproof finds it
# (the script, each tree's side process, spawned ranks).
_REPO_ROOT = str(Path(__file__).resolve().parents[2])
if _REPO_ROOT not in sys.path:
    sys.path.append(_REPO_ROOT)
