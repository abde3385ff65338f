"""`python scripts/plot.py`: the end-to-end engine test's grad_norm figure.

A thin entry (its one line of code puts the checkout on the path): the code is `checkout_tools.e2e_plot`.
"""

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the checkout, after the installed packages

from checkout_tools.e2e_plot import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
