"""`python scripts/lock.py`: regenerate requirements/lock.txt.

A thin entry: it appends the checkout to the path and runs `checkout_tools.lock`.
"""

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the checkout, after the installed packages

from checkout_tools.lock import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
