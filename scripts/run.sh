#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the main job: the GEMM benchmark table.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
exec "$TC_PY" "$TC_ROOT/bench/gemm.py" "$@"
