#!/usr/bin/env bash
# llama.cpp, the peer of the LLaMA benchmarks, built from the source package
# llama-cpp-python ships on PyPI, pinned, so that every comparison in
# bench/results runs the same llama.cpp (0.3.36 vendors build 0c1e570):
#
#   scripts/build_llamacpp.sh DEST [cpu|cuda]
#
#   cpu   the CPU build for this machine (GGML_NATIVE): llama-bench,
#         llama-batched-bench, llama-completion, llama-quantize in DEST/bin,
#         libllama.so beside them (llama-cpp-python's binding loads it
#         through LLAMA_CPP_LIB_PATH=DEST/bin, as bench/llama_logits_vs_llamacpp.py
#         and bench/tokenizer_vs_llamacpp.py do)
#   cuda  the same with the CUDA backend for sm_90a (H100 / H200) and a
#         generic x86-64 CPU part, to be carried to a GPU machine with the
#         shared libraries of DEST/bin (bench/llama_cuda.py --llama-bench
#         DEST/bin/llama-bench); about 20 minutes of nvcc on 2 cores
#
# The programs report their build as LLAMA_BUILD_LABEL, by default
# llama-cpp-python-VERSION (a source package has no git metadata, which
# llama.cpp's build would otherwise read, printing "unknown").
#
# The package comes from PyPI (pip download), or from LLAMA_CPP_SDIST (a
# llama_cpp_python-VERSION.tar.gz already here); LLAMA_CPP_PYTHON_VERSION
# overrides the pin. LLAMA_CPP_SRC instead names an unpacked llama.cpp source
# tree (the package's vendor/llama.cpp): for a machine without network,
# carry that tree without its docs, benches and models/*.gguf (about 9 MB
# as .tar.xz; `scripts/build_llamacpp.sh --source-tarball OUT.tar.xz`
# makes it). Needs cmake, ninja (or make) and a C++ compiler (and nvcc for
# cuda), all of which scripts/setup.sh installs or checks.
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
usage="usage: scripts/build_llamacpp.sh DEST [cpu|cuda] | --source-tarball OUT.tar.xz"
dest="${1:?$usage}"
kind="${2:-cpu}"
log() { printf '[build_llamacpp] %s\n' "$*" >&2; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
src="${LLAMA_CPP_SRC:-}"
if [[ -z "$src" ]]; then
  sdist="${LLAMA_CPP_SDIST:-}"
  if [[ -z "$sdist" ]]; then
    log "downloading llama-cpp-python $VERSION (source)"
    python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$work" ||
      { log "could not download llama-cpp-python $VERSION; set LLAMA_CPP_SDIST to its .tar.gz"; exit 1; }
    sdist="$(ls "$work"/llama_cpp_python-*.tar.gz)"
  fi
  tar -xzf "$sdist" -C "$work"
  src="$(ls -d "$work"/llama_cpp_python-*/vendor/llama.cpp)"
fi
[[ -f "$src/CMakeLists.txt" ]] || { log "no llama.cpp source tree at $src"; exit 1; }
if [[ "$dest" == --source-tarball ]]; then
  out="$(realpath -m "${2:?$usage}")"
  top="$(basename "$src")"
  tar -cJf "$out" --exclude="$top/docs" --exclude="$top/benches" --exclude="$top/media" \
    --exclude="$top/models/*.gguf" --exclude="$top/.git*" -C "$(dirname "$src")" "$top"
  log "wrote $out ($(du -h "$out" | cut -f1)); unpack it and set LLAMA_CPP_SRC to its llama.cpp folder"
  exit 0
fi
[[ "$kind" == cpu || "$kind" == cuda ]] || { echo "build_llamacpp: the kind is cpu or cuda, not '$kind'" >&2; exit 2; }

flags=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF
       -DLLAMA_BUILD_COMMIT="${LLAMA_BUILD_LABEL:-llama-cpp-python-$VERSION}"
       -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=OFF -DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$(realpath -m "$dest")/bin"
       -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$(realpath -m "$dest")/bin")
if [[ "$kind" == cuda ]]; then
  command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
  flags+=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_NATIVE=OFF)
  # Without a driver (a build machine with the toolkit alone) libggml-cuda
  # links against the libcuda.so the toolkit ships for linking, and the
  # programs' link cannot find its libcuda.so.1: leave that to the machine
  # that runs them.
  ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' || flags+=(-DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined)
else
  flags+=(-DGGML_NATIVE=ON)
fi
# Ninja when there is one; a machine with cmake alone still builds with make.
generator=Ninja
command -v ninja >/dev/null || generator="Unix Makefiles"
log "configuring $kind build in $dest ($generator)"
cmake -S "$src" -B "$dest" -G "$generator" "${flags[@]}" >"$work/configure.log" 2>&1 || { cat "$work/configure.log" >&2; exit 1; }
cmake --build "$dest" -j"$(nproc)" --target llama-bench llama-batched-bench llama-completion llama-quantize
log "built: $(cd "$dest/bin" && ls llama-bench llama-batched-bench llama-completion llama-quantize libllama.so | tr '\n' ' ')"
log "$("$dest/bin/llama-completion" --version 2>&1 | grep -m1 -i version || true)"
