#!/usr/bin/env bash
# Edit and check the patch series: make a maintainer checkout, export it back (--dry-run: fail on any change),
# lint the series. All logic lives in the patchset package; run with --help for commands and exit codes.
set -euo pipefail

repo_root="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"
export PYTHONPATH="${repo_root}${PYTHONPATH:+:${PYTHONPATH}}"
exec python3 -P -m patchset export "$@"
