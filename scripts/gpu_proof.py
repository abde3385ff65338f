"""`python scripts/gpu_proof.py`: the proof on your own GPUs.

A thin entry: it appends the checkout to the path and runs `checkout_tools.gpu_proof.cli`.
"""

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the checkout, after the installed packages

from checkout_tools.gpu_proof.cli import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
