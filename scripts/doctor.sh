#!/usr/bin/env bash
# Is my run affected? scripts/doctor.sh [--json] -- python3 -m verl.trainer.main_ppo ...  (or: TRINITY.yaml)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec python3 -m patchset -C "$OLDPWD" doctor "$@"
