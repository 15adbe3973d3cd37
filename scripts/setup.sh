#!/usr/bin/env bash
# Sets up everything tensorcore needs on a fresh machine, idempotently:
#   1. system packages (apt, only when missing and only as root),
#   2. a project-local virtual environment .venv (sees the system's Python
#      packages, so an offline GPU machine's NumPy/PyTorch are used as they are),
#   3. the native library in build/ (with CUDA when nvcc is present).
# Source it (`. scripts/setup.sh`) or run it; afterwards $TC_PY is the
# environment's python and `import tensorcore` works there.
set -euo pipefail

TC_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TC_BUILD="${TC_BUILD:-$TC_ROOT/build}"
log() { printf '[setup] %s\n' "$*" >&2; }

# -- 1. system packages ------------------------------------------------------
need_pkgs=()
command -v cmake >/dev/null || need_pkgs+=(cmake)
command -v ninja >/dev/null || need_pkgs+=(ninja-build)
command -v g++ >/dev/null || need_pkgs+=(g++)
command -v pkg-config >/dev/null || need_pkgs+=(pkg-config)
have_header() { echo "#include <$1>" | g++ -E -x c++ - $2 >/dev/null 2>&1; }
have_header gtest/gtest.h "" || need_pkgs+=(libgtest-dev)
python3 -c 'import venv, ensurepip' 2>/dev/null || need_pkgs+=(python3-venv)
if ((${#need_pkgs[@]})); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    log "installing ${need_pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
  else
    log "missing system packages: ${need_pkgs[*]} (install them, or run as root with apt)"; exit 1
  fi
fi

# Optional system packages: installed where apt can reach a mirror, skipped
# quietly elsewhere (an offline GPU machine builds without them).
#   libopenblas-dev  f32 GEMM and conv2d (without it: the scipy-openblas32 wheel if the
#                    Python has it, else tensorcore's own f32 kernels; CMakeLists.txt, TC_BLAS)
#   libgloo-dev  gloo collectives (src/dist; without it the gloo backend reports unsupported)
#   libssl-dev   libcrypto's headers (src/dist links the system libcrypto either way)
opt_pkgs=()
if ! have_header cblas.h "" && ! have_header cblas.h "-I/usr/include/x86_64-linux-gnu/openblas-pthread" \
   && ! ls /usr/lib/x86_64-linux-gnu/libopenblas.so >/dev/null 2>&1; then
  opt_pkgs+=(libopenblas-dev)
fi
have_header gloo/allreduce.h "" || opt_pkgs+=(libgloo-dev)
have_header openssl/hmac.h "" || opt_pkgs+=(libssl-dev)
if ((${#opt_pkgs[@]})) && [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
  log "installing optional ${opt_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq "${opt_pkgs[@]}"; } >/dev/null 2>&1 \
    || log "optional packages ${opt_pkgs[*]} unavailable; building without them"
fi

# -- 2. Python environment -----------------------------------------------------
# A python3 that already has the required packages (an offline GPU machine's
# environment) is used as it is; otherwise a project-local .venv that also sees
# the system's packages, with what is missing installed from PyPI.
required="numpy ml_dtypes pytest"
has_required() { "$1" -c "import ${required// /, }" 2>/dev/null; }
if [[ -x "$TC_ROOT/.venv/bin/python" ]]; then
  TC_PY="$TC_ROOT/.venv/bin/python"
elif has_required python3; then
  TC_PY="$(command -v python3)"
else
  log "creating .venv"
  python3 -m venv --system-site-packages "$TC_ROOT/.venv"
  TC_PY="$TC_ROOT/.venv/bin/python"
fi
missing=()
for mod in $required; do
  "$TC_PY" -c "import $mod" 2>/dev/null || missing+=("$mod")
done
if ((${#missing[@]})); then
  log "pip installing ${missing[*]}"
  "$TC_PY" -m pip install -q "${missing[@]}" || { log "could not install ${missing[*]}"; exit 1; }
fi
# Optional packages ("module:pip-name" pairs): used by cross-checks when
# present, never required; tests that need one skip without it.
for spec in ${TC_OPTIONAL_PY-sentencepiece:sentencepiece tokenizers:tokenizers gguf:gguf}; do
  "$TC_PY" -c "import ${spec%%:*}" 2>/dev/null || "$TC_PY" -m pip install -q "${spec#*:}" 2>/dev/null \
    || log "optional package ${spec#*:} unavailable; tests that need it will skip"
done
# The in-tree packages: importable from the project's .venv for good, and
# through PYTHONPATH for whatever these scripts run.
if [[ "$TC_PY" == "$TC_ROOT/.venv/bin/python" ]]; then
  site=$("$TC_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$TC_ROOT/python" > "$site/tensorcore-dev.pth"
fi
export PYTHONPATH="$TC_ROOT/python${PYTHONPATH:+:$PYTHONPATH}"

# -- 3. native library ---------------------------------------------------------
cuda=${TC_ENABLE_CUDA:-}
if [[ -z "$cuda" ]]; then
  if command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then cuda=ON; else cuda=OFF; fi
fi
[[ "$cuda" == ON && -z "$(command -v nvcc)" ]] && export PATH="/usr/local/cuda/bin:$PATH"
log "building $TC_BUILD (TC_ENABLE_CUDA=$cuda)"
cmake -S "$TC_ROOT" -B "$TC_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTC_ENABLE_CUDA="$cuda" \
  -DPython3_EXECUTABLE="$TC_PY" >/dev/null
cmake --build "$TC_BUILD" -j"$(nproc)"

export TC_ROOT TC_BUILD TC_PY
