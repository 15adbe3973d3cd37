#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the main job: LLaMA decoding with
# `python -m tensorcore.llama` (arguments pass through: a GGUF file,
# --prompt, -n, --bench; with no file, the embedded default model, written
# deterministically on first use).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
exec "$TC_PY" -m tensorcore.llama "$@"
