"""Shared fixtures and helpers of the Python suite.

Fixtures: `device` / `ctx` (parametrised over "cpu" and "cuda"; cuda is
skipped when no CUDA device is usable), `cpu_ctx` (host-memory tests), `rng`
(fresh seed each test, printed so a failure can be replayed with
TC_TEST_SEED=<seed>).

Helpers for numerical tests in every area: poison(), random_array() and the
rand_* makers, to_f64(), bf16 bit conversion, assert_close(), TOLERANCE.
"""

import os
import secrets
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
# Test this checkout's package (its library is found in build/ or through
# TENSORCORE_LIB); TC_TEST_INSTALLED=1 tests whatever `import tensorcore` finds.
if (REPO / "python" / "tensorcore" / "__init__.py").exists() and not os.environ.get("TC_TEST_INSTALLED"):
    sys.path.insert(0, str(REPO / "python"))

import tensorcore as tc  # noqa: E402

try:
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    ml_dtypes = None
    BF16 = None


def _cuda_usable():
    try:
        tc.Context("cuda").close()
        return True
    except tc.TensorcoreError:
        return False


HAVE_CUDA = _cuda_usable()


def _cpu_reads_rows8():
    with tc.Context("cpu") as c:
        return "avx512_vnni" in c.device_info().features.split(",")


# Tests of a host LLaMA model's f16 products on its copy with rows
# interleaved by eight (AVX512-VNNI; TC_LLAMA_ROWS8).
NEEDS_ROWS8 = pytest.mark.skipif(not _cpu_reads_rows8(),
                                 reason="no AVX512-VNNI: the host products read the file's rows only")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not HAVE_CUDA, reason="no usable CUDA device"))]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture
def ctx(device):
    with tc.Context(device) as c:
        yield c


@pytest.fixture
def cpu_ctx():
    with tc.Context("cpu") as c:
        yield c


@pytest.fixture
def rng():
    seed = int(os.environ.get("TC_TEST_SEED", secrets.randbits(32)))
    print("rng seed %d (replay with TC_TEST_SEED=%d)" % (seed, seed))
    return np.random.default_rng(seed)


# ---- poison and sentinels ----------------------------------------------------------

POISON_BYTE = 0xFF    # NaN as f16, bf16, f32 and f64
SENTINEL_BYTE = 0x7F  # 0x7F7F7F7F as i32 (2139062143), a value no small integer GEMM produces


def poison(nbytes, byte=POISON_BYTE):
    """`nbytes` bytes of `byte` (default 0xFF: NaN in every float dtype) as a uint8 array."""
    return np.full(int(nbytes), byte, dtype=np.uint8)


def poison_byte(dtype):
    """The poison byte for outputs of `dtype`: NaN for floats, the sentinel for integers."""
    return SENTINEL_BYTE if dtype_name(dtype) in ("i8", "i32") else POISON_BYTE


# ---- dtypes ------------------------------------------------------------------------

ELEMENT_SIZE = {"f16": 2, "bf16": 2, "f32": 4, "i8": 1, "i32": 4, "f64": 8}


def dtype_name(dtype):
    """Canonical tensorcore name ("f16", ...) of a name, constant or NumPy dtype."""
    return tc.DTYPE_NAMES[tc.dtype_code(dtype)]


def np_dtype(dtype):
    """NumPy dtype holding `dtype` (bf16: ml_dtypes.bfloat16, or uint16 bits without it)."""
    return tc.numpy_dtype(dtype_name(dtype))


def f32_to_bf16_bits(x):
    """Round-to-nearest-even of float32 values to bf16 bit patterns (uint16); NaN stays NaN."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)


def bf16_bits_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def to_f64(arr, dtype=None):
    """float64 values of `arr`, decoding bf16 held as ml_dtypes.bfloat16 or as
    uint16 bit patterns (pass dtype="bf16" for the latter)."""
    arr = np.asarray(arr)
    if dtype is not None and dtype_name(dtype) == "bf16" and arr.dtype == np.uint16:
        return bf16_bits_to_f32(arr).astype(np.float64)
    return arr.astype(np.float64)


# ---- random inputs -----------------------------------------------------------------

def random_array(rng, shape, dtype, scale=1.0):
    """Fresh random values of `dtype`, already rounded to it (so a float64
    reference from to_f64() sees exactly what the library reads)."""
    name = dtype_name(dtype)
    if name == "i8":
        return rng.integers(-128, 128, size=shape, dtype=np.int8)
    if name == "i32":
        return rng.integers(-1000, 1000, size=shape, dtype=np.int32)
    values = rng.standard_normal(size=shape) * scale
    if name == "bf16":
        if BF16 is not None:
            return values.astype(np.float32).astype(BF16)
        return f32_to_bf16_bits(values.astype(np.float32))
    return values.astype(np_dtype(name))


def rand_f32(rng, shape, scale=1.0):
    return random_array(rng, shape, "f32", scale)


def rand_f16(rng, shape, scale=1.0):
    return random_array(rng, shape, "f16", scale)


def rand_bf16(rng, shape, scale=1.0):
    return random_array(rng, shape, "bf16", scale)


def rand_i8(rng, shape):
    return random_array(rng, shape, "i8")


# ---- comparisons -------------------------------------------------------------------

# Relative tolerance against the output's scale (e.g. |alpha| |A| @ |B| + |beta| |C|).
TOLERANCE = {"f32": 1e-5, "f16": 1e-2, "bf16": 1e-2, "f64": 1e-12, "i8": 0, "i32": 0}


# Half of the spacing of the smallest numbers an output dtype holds: a result
# rounded into f16's subnormal range is off by up to this much, whatever its
# relative error.
SUBNORMAL_HALF_STEP = {"f16": 2.0 ** -25, "bf16": 2.0 ** -134, "f32": 2.0 ** -150}


def assert_close(out, ref, scale, rtol, what="", out_dtype=None):
    """Every element finite (nothing left poisoned) and |out - ref| <= rtol * scale
    (plus the rounding floor of out_dtype's subnormals, when given)."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert out.shape == ref.shape, "%s: shape %s != %s" % (what, out.shape, ref.shape)
    bad = ~np.isfinite(out)
    assert not bad.any(), "%s: %d non-finite outputs (unwritten?), first at %s" % (
        what, bad.sum(), np.argwhere(bad)[0])
    err = np.abs(out - ref)
    limit = rtol * np.broadcast_to(scale, out.shape) + SUBNORMAL_HALF_STEP.get(out_dtype, 0.0) + 1e-30
    worst = np.unravel_index(np.argmax(err / limit), out.shape) if out.size else None
    assert (err <= limit).all(), "%s: %d elements off; worst at %s: got %r want %r (limit %g)" % (
        what, (err > limit).sum(), worst, out[worst], ref[worst], limit[worst])


def expect_status(status, fn, *args, text=None):
    """fn(*args) raises TensorcoreError with this status (and this text in its detail)."""
    with pytest.raises(tc.TensorcoreError) as e:
        fn(*args)
    assert e.value.status == status, str(e.value)
    if text:
        assert text in str(e.value), str(e.value)


# ---- subprocesses ------------------------------------------------------------------

def llama_cpp_or_skip():
    """llama-cpp-python, the peer of the comparisons with llama.cpp, or a skip
    saying why: not installed, or installed without a library it can load (a
    package built without llama.cpp wants LLAMA_CPP_LIB_PATH, and its import
    raises FileNotFoundError or RuntimeError without it)."""
    try:
        import llama_cpp
    except ImportError:
        pytest.skip("llama-cpp-python is not installed")
    except (OSError, RuntimeError) as e:
        pytest.skip("llama-cpp-python cannot load libllama: %s" % e)
    return llama_cpp


def run_python(code, env=None, unset=(), timeout=60):
    """Runs `code` in a fresh interpreter that imports this tensorcore (same
    package and library); returns the CompletedProcess."""
    e = dict(os.environ)
    pkg_parent = str(Path(tc.__file__).resolve().parents[1])
    e["PYTHONPATH"] = pkg_parent + os.pathsep + e.get("PYTHONPATH", "")
    e.setdefault("TENSORCORE_LIB", tc.library_path)
    e.update(env or {})
    for name in unset:
        e.pop(name, None)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=timeout)


# ---- tests that may leave the process's GPU context unusable ------------------------
# A device fault (or a profiler that loses its counters) makes CUDA's primary
# context of the whole process unusable: every later test in that process,
# e.g. the rest of a pytest-xdist worker's share, would fail to open the
# device. Tests marked `own_process` run in a child pytest instead; the
# parent reports the child's outcome (pass, skip with its reason, or the
# child's output as the failure).

_IN_CHILD = "TC_TEST_OWN_PROCESS_CHILD"


def pytest_configure(config):
    config.addinivalue_line("markers", "own_process(exclusive=None): run this test in a child process (it may "
                            "fault the device); with exclusive=NAME, one such test at a time across processes")


def _run_in_child(item):
    exclusive = item.get_closest_marker("own_process").kwargs.get("exclusive")
    if exclusive:  # e.g. CUPTI's profiler: one session per device, whichever process asks
        import fcntl
        import tempfile
        with open(os.path.join(tempfile.gettempdir(), "tensorcore-tests-%s.lock" % exclusive), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return _run_child(item)
    return _run_child(item)


def _run_child(item):
    env = dict(os.environ, **{_IN_CHILD: "1"})
    env["PYTHONPATH"] = str(Path(tc.__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TENSORCORE_LIB", tc.library_path)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:xdist",
                        "-p", "no:randomly", item.nodeid], cwd=str(item.config.rootpath), env=env,
                       capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    if r.returncode == 0 and " skipped" in out and " passed" not in out:
        reasons = [line.split("] ", 1)[-1] for line in out.splitlines() if line.startswith("SKIPPED")]
        pytest.skip("in a child process: " + (reasons[0] if reasons else "skipped"))
    if r.returncode != 0:
        pytest.fail("in a child process (exit %d):\n%s" % (r.returncode, out[-6000:]), pytrace=False)


def pytest_collection_modifyitems(config, items):
    if os.environ.get(_IN_CHILD):
        return
    for item in items:
        if item.get_closest_marker("own_process"):
            item.runtest = (lambda it: (lambda: _run_in_child(it)))(item)
