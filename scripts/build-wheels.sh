#!/usr/bin/env bash
# Build patched wheels of the pinned releases into dist/: verl-0.8.0+patchset.N, trinity_rft-0.6.0+patchset.N
# (the default pins), or those named with --pin NAME==VERSION (e.g. --pin verl==0.9.1 -> verl-0.9.1+patchset.N).
# All logic lives in the patchset package (`python -m patchset wheels`); run with --help for options and exit codes.
set -euo pipefail

repo_root="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"
export PYTHONPATH="${repo_root}${PYTHONPATH:+:${PYTHONPATH}}"
exec python3 -P -m patchset wheels "$@"
