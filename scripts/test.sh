#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs every test: C++ (ctest + GoogleTest) and
# Python (pytest; arguments pass through to it). GPU tests run where a GPU is
# present and skip elsewhere. A build without GoogleTest has no C++ tests:
# that is said, and the Python tests still run.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$TC_ROOT"
echo "== C++ tests"
if [[ -f "$TC_BUILD/tests/cpp/CTestTestfile.cmake" ]]; then
  ctest --test-dir "$TC_BUILD" --output-on-failure -j"$(nproc)"
else
  echo "no C++ tests in this build (GoogleTest was not found when it was configured)"
fi
echo "== Python tests"
# -rs: every skipped test says why (no GPU, no Open MPI or mpi4py, a missing file)
TENSORCORE_LIB="$TC_BUILD/libtensorcore.so" "$TC_PY" -m pytest -q -rs tests/python "$@"
