"""`python scripts/bench.py`: what the patches cost in one loss call.

A thin entry: it appends the checkout to the path and runs `checkout_tools.bench.loss_call`.
"""

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the checkout, after the installed packages

from checkout_tools.bench.loss_call import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
