#!/usr/bin/env bash
# The C++ suite under AddressSanitizer (with LeakSanitizer) and
# UndefinedBehaviorSanitizer, CPU backend only: a separate build in
# build-sanitize (TC_SANITIZE_BUILD changes it). Any report fails the run
# (UBSan does not recover). The tests link the library's objects instead of
# libtensorcore.so (TC_TESTS_LINK_OBJECTS), so every class has one type
# info and UBSan's vptr check (part of -fsanitize=undefined) runs too.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$TC_ROOT"
build="${TC_SANITIZE_BUILD:-$TC_ROOT/build-sanitize}"
flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
step() { printf '[check_sanitizers] %s\n' "$*" >&2; }
step "building $build (CPU backend, $flags)"
mkdir -p "$build"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$TC_ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTC_ENABLE_CUDA=OFF \
  -DTC_TESTS_LINK_OBJECTS=ON "${launcher[@]}" \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" -DPython3_EXECUTABLE="$TC_PY" >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log" >&2; exit 1; }
cmake --build "$build" -j"$(nproc)"
if [[ ! -f "$build/tests/cpp/CTestTestfile.cmake" ]]; then
  step "no C++ tests in this build (GoogleTest was not found): nothing to run"
  exit 0
fi
step "running the C++ suite"
ASAN_OPTIONS="detect_leaks=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
  ctest --test-dir "$build" --output-on-failure -j"$(nproc)" --timeout 900
