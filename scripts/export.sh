#!/usr/bin/env bash
# Edit and check the patch series: check out, export back, lint. See --help.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec python3 -m patchset -C "$OLDPWD" export "$@"
