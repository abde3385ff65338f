#!/usr/bin/env bash
# Send a series upstream: make a PR branch (one commit per patch) in your checkout, run the upstream's own lint
# gates and CPU tests on it, print the PR title and body. All logic lives in the patchset package; see --help.
set -euo pipefail

repo_root="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"
export PYTHONPATH="${repo_root}${PYTHONPATH:+:${PYTHONPATH}}"
exec python3 -P -m patchset export-pr "$@"
