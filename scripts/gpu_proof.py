"""`python scripts/gpu_proof.py`: the proof on your own GPUs, ``python -m patchset proof`` from this checkout.

A launcher that leaves the import path alone: it runs the command from the repository root, where ``-m`` finds this
checkout's ``patchset``, as if started in the folder it was started in (``-C``).
"""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    started_in = os.getcwd()
    os.chdir(Path(__file__).resolve().parents[1])
    os.execv(sys.executable, [sys.executable, "-m", "patchset", "-C", started_in, "proof", *sys.argv[1:]])
