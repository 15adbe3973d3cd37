#!/usr/bin/env bash
# The C++ suite, then the Python tests of the dist, runtime and GGUF code,
# under AddressSanitizer (with LeakSanitizer for the C++ suite) and
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

# The Python tests that drive the native code's network, runtime and file
# surfaces, on the same sanitized libraries: the sanitizer runtimes are
# preloaded into the interpreter (which is not built with them; its child
# processes inherit them), and leak checking is off because the
# interpreter's own allocations outlive it by design.
step "running the dist, runtime and GGUF Python tests on the sanitized libraries"
cxx="$(grep -E '^CMAKE_CXX_COMPILER:' "$build/CMakeCache.txt" | cut -d= -f2)"
preload="$("${cxx:-c++}" -print-file-name=libasan.so) $("${cxx:-c++}" -print-file-name=libubsan.so)"
LD_PRELOAD="$preload" ASAN_OPTIONS="detect_leaks=0" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
  TENSORCORE_LIB="$build/libtensorcore.so" "$TC_PY" -m pytest -q -p no:cacheprovider \
  tests/python/test_dist.py tests/python/test_gguf.py tests/python/test_tokenizer.py \
  tests/python/test_simpler_api.py tests/python/test_simpler_depmap.py tests/python/test_simpler_failures.py \
  tests/python/test_simpler_level3.py tests/python/test_simpler_level4.py tests/python/test_simpler_l4_copies.py
