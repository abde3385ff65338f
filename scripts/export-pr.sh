#!/usr/bin/env bash
# Send a series upstream: one gated PR branch per concern in your checkout. See --help.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec python3 -m patchset -C "$OLDPWD" export-pr "$@"
