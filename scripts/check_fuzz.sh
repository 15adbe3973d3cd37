#!/usr/bin/env bash
# The libFuzzer targets (fuzz/*_fuzz.cpp: the GGUF reader, the control
# connections' frames, the store's and the remote endpoint's requests, the
# handshake) built with clang in their own directory (build-fuzz;
# TC_FUZZ_BUILD changes it) and each run for a bounded time
# (TC_FUZZ_SECONDS, default 30) over its checked-in corpus, new inputs kept
# in a scratch directory. A crash, a leak, a trap or a timeout fails the
# run. Skips, saying why, where clang with libFuzzer is absent and cannot be
# installed (apt, as root).
set -euo pipefail
TC_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$TC_ROOT"
build="${TC_FUZZ_BUILD:-$TC_ROOT/build-fuzz}"
seconds="${TC_FUZZ_SECONDS:-30}"
fuzzers=(gguf_reader frame control_server handshake)
step() { printf '[check_fuzz] %s\n' "$*" >&2; }

have_libfuzzer() {
  command -v clang++ >/dev/null || return 1
  local t
  t="$(mktemp -d)"
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' >"$t/f.cpp"
  clang++ -fsanitize=fuzzer,address "$t/f.cpp" -o "$t/f" >/dev/null 2>&1
  local rc=$?
  rm -rf "$t"
  return $rc
}

if ! have_libfuzzer; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    step "clang with libFuzzer not found: installing clang and its runtime libraries with apt"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq -o Acquire::Retries=0 -o Acquire::http::Timeout=30 >/dev/null 2>&1 || true
    apt-get install -y -qq --no-install-recommends clang >/dev/null 2>&1 || true
    ver="$(clang++ --version 2>/dev/null | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)"
    [[ -n "$ver" ]] && apt-get install -y -qq --no-install-recommends "libclang-rt-$ver-dev" >/dev/null 2>&1 || true
  fi
  if ! have_libfuzzer; then
    step "SKIPPED: clang++ with libFuzzer (-fsanitize=fuzzer) is not available and could not be installed"
    exit 0
  fi
fi

step "building the fuzz targets in $build ($(clang++ --version | head -1))"
mkdir -p "$build"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S "$TC_ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DTC_ENABLE_CUDA=OFF -DTC_BUILD_TESTS=OFF -DTC_BUILD_FUZZERS=ON "${launcher[@]}" \
  >"$build/configure.log" 2>&1 || { cat "$build/configure.log" >&2; exit 1; }
# The shared library too: the one clang build CI makes of it.
cmake --build "$build" -j"$(nproc)" --target tensorcore "${fuzzers[@]/%/_fuzz}"

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for f in "${fuzzers[@]}"; do
  corpus="fuzz/corpus/${f%_reader}"  # the GGUF reader's seeds are fuzz/corpus/gguf
  step "running ${f}_fuzz for ${seconds} s over $corpus"
  mkdir -p "$scratch/$f"
  # New inputs go to the scratch directory; the checked-in corpus is read only.
  opts=(-max_len=65536 -malloc_limit_mb=512)
  [[ $f == gguf_reader ]] && opts=(-max_len=16384 -malloc_limit_mb=256)
  TC_NUM_THREADS=1 ASAN_OPTIONS="detect_leaks=1" "$build/${f}_fuzz" "$scratch/$f" "$corpus" \
    -max_total_time="$seconds" -timeout=20 "${opts[@]}" -print_final_stats=1 -artifact_prefix="$scratch/" \
    >"$scratch/$f.log" 2>&1 ||
    { tail -50 "$scratch/$f.log" >&2; step "${f}_fuzz FAILED"; exit 1; }
  grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::new_units_added)' "$scratch/$f.log" >&2 || true
done
step "every fuzz target ran clean"
