#!/usr/bin/env bash
# Apply the patch series: to the pinned releases in .cache/, or to the checkouts given. See --help.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec python3 -m patchset -C "$OLDPWD" apply "$@"
