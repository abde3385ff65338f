#!/usr/bin/env bash
# Run every test of the patchset (see `scripts/test.sh --help`). Builds its own .venv on first use.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
export PYTHONPATH="$repo_root${PYTHONPATH:+:$PYTHONPATH}"
exec python3 -P -m patchset.testcommand.testsuite "$@"
