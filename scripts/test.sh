#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs every test: C++ (ctest + GoogleTest) and
# Python (pytest). GPU tests run where a GPU is present and skip elsewhere.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$TC_ROOT"
echo "== C++ tests"
ctest --test-dir "$TC_BUILD" --output-on-failure -j"$(nproc)"
echo "== Python tests"
TENSORCORE_LIB="$TC_BUILD/libtensorcore.so" "$TC_PY" -m pytest -q tests/python "$@"
