#!/usr/bin/env bash
# Run every test of the patchset (see `scripts/test.sh --help`). Builds its own .venv on first use.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec python3 -m patchset test "$@"
