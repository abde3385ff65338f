#!/usr/bin/env bash
# Apply the patch series: with no argument to the pinned releases in .cache/, else to the checkouts given.
# All logic lives in the patchset package; run with --help for options and exit codes.
set -euo pipefail

repo_root="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"
export PYTHONPATH="${repo_root}${PYTHONPATH:+:${PYTHONPATH}}"
exec python3 -P -m patchset apply "$@"
