#!/usr/bin/env bash
# Build patched wheels of the pinned releases into dist/ (or those named with --pin). See --help.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec python3 -m patchset -C "$OLDPWD" wheels "$@"
