"""Diagnostics, contexts, buffers, streams and the ownership rules of the
wrappers; TC_TRACE and the library search in subprocesses."""

import ctypes
import gc
import re
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

import tensorcore as tc
from conftest import BF16, assert_close, bf16_bits_to_f32, random_array, run_python

STATUS_STRINGS = {
    0: "ok", -1: "context not initialized", -2: "context already initialized", -3: "no device available",
    -4: "operation unsupported on this device", -5: "dtype unsupported", -6: "invalid_shape",
    -7: "invalid argument", -8: "allocation failure", -9: "kernel not found",
    -10: "kernel pipeline creation failed", -11: "dispatch failed", -12: "i/o error",
    -13: "corrupt or truncated data", -14: "timed out", -15: "authentication failed",
    -16: "unsupported feature", -99: "internal error",
}


def in_fresh_thread(fn):
    result = []
    t = threading.Thread(target=lambda: result.append(fn()))
    t.start()
    t.join()
    return result[0]


# ---- diagnostics --------------------------------------------------------------------------

def test_version():
    v = tc.version()
    assert re.fullmatch(r"tensorcore \d+\.\d+\.\d+ \(.+\)", v), v
    # the build names the f32 GEMM it carries: a BLAS, or tensorcore's own kernels
    assert re.search(r"\(portable_cpu\((openblas|scipy-openblas|own-sgemm)\)", v), v
    assert tc.__version__ == v.split()[1]


def test_status_strings():
    for code, text in STATUS_STRINGS.items():
        assert tc.status_string(code) == text
    for code in (1, -17, -98, -100, 2**31 - 1, -2**31, 2**32 - 6, 2**70):  # 2^32-6 must not wrap to -6
        assert tc.status_string(code) == "unknown status"
    assert tc.TC_ERR_INVALID_SHAPE == -6 and tc.TC_ERR_UNSUPPORTED == -16 and tc.TC_ERR_INTERNAL == -99


def test_dtype_and_backend_names():
    names = {tc.TC_DTYPE_F16: "f16", tc.TC_DTYPE_BF16: "bf16", tc.TC_DTYPE_F32: "f32", tc.TC_DTYPE_I8: "i8",
             tc.TC_DTYPE_I32: "i32", tc.TC_DTYPE_F64: "f64"}
    for code, name in names.items():
        assert tc.dtype_name(code) == name == tc.DTYPE_NAMES[code]
        assert tc.dtype_code(name) == tc.dtype_code(name.upper()) == code
    for code in (6, 9, -1, 2**32):
        assert tc.dtype_name(code) == "unknown"
    backends = {0: "none", 7: "portable_cpu", 9: "cuda", 10: "hip"}
    for code, name in backends.items():
        assert tc.backend_name(code) == name
    for code in (1, 6, 8, 11, -1):
        assert tc.backend_name(code) == "unknown"
    assert tc.dtype_code(np.float16) == tc.TC_DTYPE_F16 and tc.dtype_code("TC_DTYPE_BF16") == tc.TC_DTYPE_BF16
    if BF16 is not None:
        assert tc.dtype_code(BF16) == tc.TC_DTYPE_BF16
    with pytest.raises(ValueError):
        tc.dtype_code(np.complex64)
    with pytest.raises(TypeError):
        tc.dtype_code(True)


# ---- contexts -------------------------------------------------------------------------------

def test_device_info(ctx, device):
    info = ctx.device_info()
    assert isinstance(info, tc.TCDeviceInfo) and info == info
    assert isinstance(info.name, str) and info.name
    assert isinstance(info.family, str) and isinstance(info.features, str)
    assert info.compute_units >= 1 and info.memory_bytes > 0
    if device == "cpu":
        assert info.family == "cpu" and info.backend == tc.TC_BACKEND_PORTABLE_CPU
        assert info.backend_name == "portable_cpu" and info.compute_capability == 0
    else:
        assert info.backend == tc.TC_BACKEND_CUDA and info.compute_capability >= 50
    assert all(f and "," not in f for f in info.feature_list)
    raw = tc.device_info(ctx)  # raw function, same record
    assert raw.as_dict() == info.as_dict()
    assert tc.device_info(ctx.handle).name == info.name  # raw handle accepted
    assert "name=" in repr(info)


def test_runtime_capabilities(ctx, device):
    caps = ctx.runtime_capabilities()
    assert caps.version == tc.TC_CAPABILITIES_VERSION
    assert caps.struct_size == ctypes.sizeof(tc.TCRuntimeCapabilities)
    assert caps.available & ~caps.known == 0
    for bit in (tc.TC_CAPABILITY_GEMM_F32, tc.TC_CAPABILITY_GEMM_F16, tc.TC_CAPABILITY_GEMM_BF16,
                tc.TC_CAPABILITY_GEMM_I8, tc.TC_CAPABILITY_GEMM_BATCHED, tc.TC_CAPABILITY_STREAMS):
        assert caps.known & bit
        assert tc.capability_available(caps, bit)
    assert tc.capability_available(caps, "gemm_f32") and tc.capability_available(caps, "TC_CAPABILITY_STREAMS")
    assert caps.is_available(tc.TC_CAPABILITY_GEMM_I8)
    if device == "cpu":
        assert not tc.capability_available(caps, tc.TC_CAPABILITY_GEMM_TF32)
    # fail closed: unknown bits, several bits, zero, out of range
    for cap in (1 << 40, 1 << 63, tc.TC_CAPABILITY_GEMM_F32 | tc.TC_CAPABILITY_GEMM_F16, 0, -1, 2**64, 2**64 + 1):
        assert not tc.capability_available(caps, cap), cap
    # a bit claimed available but not known (a newer library's bit) fails closed
    forged = tc.TCRuntimeCapabilities(struct_size=caps.struct_size, version=caps.version,
                                      known=caps.known, available=caps.available | (1 << 50))
    assert not tc.capability_available(forged, 1 << 50)
    forged.known &= ~tc.TC_CAPABILITY_GEMM_F32
    assert not tc.capability_available(forged, tc.TC_CAPABILITY_GEMM_F32)


def test_init_and_shutdown_raw():
    ctx = tc.init()
    assert isinstance(ctx, tc.Context) and not ctx.closed
    tc.shutdown(ctx)
    assert ctx.closed
    ctx.close()  # idempotent
    ctx = tc.init("cpu")
    assert ctx.device == "cpu" and tc.device_info(ctx).family == "cpu"
    tc.shutdown(ctx.handle)  # through the raw handle: the wrapper learns it is closed
    assert ctx.closed


def test_tc_device_env(monkeypatch):
    monkeypatch.setenv("TC_DEVICE", "cpu")
    with tc.Context() as ctx:
        assert ctx.device_info().family == "cpu"


# ---- buffers ---------------------------------------------------------------------------------

def test_buffer_alloc_and_sizes(ctx):
    buf = ctx.buffer(100)
    assert buf.size() == 100 == tc.buffer_size(buf) == tc.buffer_size(buf.handle)
    assert buf.nbytes == 100 and buf.nbytes() == 100 and isinstance(buf.nbytes, int)
    assert buf.context is ctx
    raw = tc.buffer_alloc(ctx, 24)
    assert isinstance(raw, tc.Buffer) and raw.nbytes == 24
    tc.buffer_free(raw)
    assert raw.closed and raw.nbytes == 24  # the size stays known


def test_write_read_offsets(ctx, rng):
    data = random_array(rng, 64, "f32")
    buf = ctx.buffer_from_array(data)
    np.testing.assert_array_equal(buf.to_numpy(64, np.float32), data)
    part = np.arange(5, dtype=np.float32)
    buf.write(part, offset=40)
    out = np.empty(7, np.float32)
    assert buf.read(out, offset=36) is out
    np.testing.assert_array_equal(out, np.r_[data[9], part, data[15]])
    tc.buffer_write(buf, b"\0\0\0\0", 0)  # any buffer-protocol object
    assert buf.to_numpy((1,), "f32")[0] == 0
    ba = bytearray(8)
    tc.buffer_read(buf, ba, 4)
    assert bytes(ba) == data[1:3].tobytes()
    np.testing.assert_array_equal(buf.to_numpy((2, 3), np.float32, offset=8), data[2:8].reshape(2, 3))
    buf.write(np.zeros(0, np.float32), offset=256)  # empty copy at the end is fine
    assert buf.to_numpy((0,), np.float32).shape == (0,)


@pytest.mark.parametrize("dtype,npdtype", [("f16", np.float16), ("f32", np.float32), ("i8", np.int8),
                                           ("i32", np.int32), ("f64", np.float64)])
def test_to_numpy_dtype_names(ctx, rng, dtype, npdtype):
    data = random_array(rng, (3, 5), dtype)
    buf = ctx.buffer_from_array(data)
    for spec in (dtype, dtype.upper(), npdtype, getattr(tc, "TC_DTYPE_" + dtype.upper())):
        out = buf.to_numpy((3, 5), spec)
        assert out.dtype == npdtype and out.shape == (3, 5)
        np.testing.assert_array_equal(out, data)


def test_bf16_arrays(ctx, rng):
    values = rng.standard_normal(16).astype(np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)  # truncation: exact bf16 values
    buf = ctx.buffer_from_array(bits)  # uint16 views are always accepted
    out = buf.to_numpy(16, "bf16")
    if BF16 is not None:
        assert out.dtype == BF16
        np.testing.assert_array_equal(out.astype(np.float32), bf16_bits_to_f32(bits))
        buf2 = ctx.buffer_from_array(out)  # ml_dtypes arrays too
        np.testing.assert_array_equal(buf2.to_numpy(16, np.uint16), bits)
    else:
        assert out.dtype == np.uint16
        np.testing.assert_array_equal(out, bits)


def test_map_and_device_ptr(cpu_ctx):
    buf = cpu_ctx.buffer_from_array(np.arange(16, dtype=np.int32))
    ptr = buf.map()
    assert ptr and ptr % 64 == 0 and tc.buffer_map(buf) == ptr == buf.device_ptr()
    view = np.ctypeslib.as_array((ctypes.c_int32 * 16).from_address(ptr))
    np.testing.assert_array_equal(view, np.arange(16))
    view[3] = -7  # writes through the mapping are what read() sees
    assert buf.to_numpy(16, np.int32)[3] == -7


def test_buffer_from_ptr_shares_memory(cpu_ctx):
    arr = np.arange(8, dtype=np.float32)
    buf = cpu_ctx.buffer_from_ptr(arr.ctypes.data, arr.nbytes)  # the reference's form
    assert buf.map() == arr.ctypes.data
    arr[2] = 42
    assert buf.to_numpy(8, np.float32)[2] == 42  # sees the array's changes
    buf.write(np.array([-1.0], np.float32), offset=4)
    assert arr[1] == -1  # and the array sees the buffer's
    buf.close()
    assert arr[2] == 42  # not owned: freeing leaves the memory alone


def test_buffer_from_ptr_keeps_objects_alive(cpu_ctx):
    arr = np.arange(1024, dtype=np.float64)
    buf = tc.buffer_from_ptr(cpu_ctx, arr, arr.nbytes)
    del arr
    gc.collect()
    np.testing.assert_array_equal(buf.to_numpy(1024, np.float64), np.arange(1024))
    block = (ctypes.c_uint8 * 32)()
    buf2 = cpu_ctx.buffer_from_ptr(block, 32)
    buf2.write(np.full(32, 9, np.uint8))
    assert bytes(block) == b"\x09" * 32
    buf3 = cpu_ctx.buffer_from_ptr(ctypes.c_void_p(ctypes.addressof(block)), 16)
    assert buf3.to_numpy(16, np.uint8).tolist() == [9] * 16


def test_buffer_from_ptr_gemm_writes_caller_memory(cpu_ctx, rng):
    a, b = random_array(rng, (4, 3), "f32"), random_array(rng, (3, 5), "f32")
    c = np.full((4, 5), np.nan, np.float32)
    A, B = cpu_ctx.buffer_from_array(a), cpu_ctx.buffer_from_array(b)
    C = cpu_ctx.buffer_from_ptr(c, c.nbytes)
    cpu_ctx.gemm(A, B, C, 4, 5, 3, dtype="f32")
    assert_close(c, a.astype(np.float64) @ b, np.abs(a.astype(np.float64)) @ np.abs(b), 1e-6)


# ---- streams ---------------------------------------------------------------------------------

def test_streams_run_in_order(ctx, rng):
    n = 32
    x = random_array(rng, (n, n), "f32", scale=0.3)
    m = random_array(rng, (n, n), "f32", scale=1 / np.sqrt(n))
    X, M = ctx.buffer_from_array(x), ctx.buffer_from_array(m)
    Y = ctx.buffer(n * n * 4)
    s = tc.stream_create(ctx)
    for i in range(8):  # ping-pong: each step reads the previous step's output
        src, dst = (X, Y) if i % 2 == 0 else (Y, X)
        tc.gemm_async(ctx, src, M, dst, n, n, n, s, dtype="f32")
    tc.stream_sync(s)
    ref = x.astype(np.float64)
    for _ in range(8):
        ref = ref @ m
    np.testing.assert_allclose(X.to_numpy((n, n), np.float32), ref, rtol=1e-4, atol=1e-6)
    tc.stream_sync(s)  # nothing pending: ok
    tc.stream_destroy(s)
    assert s.closed


def test_stream_context_manager_syncs_and_closes(ctx, rng):
    a = random_array(rng, (16, 16), "f16")
    A, C = ctx.buffer_from_array(a), ctx.buffer(16 * 16 * 2)
    with ctx.stream() as s:
        ctx.gemm_async(A, A, C, M=16, N=16, K=16, stream=s)
    assert s.closed
    ref = a.astype(np.float64) @ a.astype(np.float64)
    np.testing.assert_allclose(C.to_numpy((16, 16), "f16"), ref, rtol=1e-2, atol=1e-2 * np.abs(ref).max())


def test_stream_keeps_caller_memory_until_sync(cpu_ctx, rng):
    """A buffer over caller memory used by queued work stays alive even if
    the caller drops every reference before sync."""
    n = 64
    a = random_array(rng, (n, n), "f32")
    A = cpu_ctx.buffer_from_array(a)
    s = cpu_ctx.stream()
    outs = []
    for _ in range(4):
        host = np.full((n, n), np.nan, np.float32)
        C = cpu_ctx.buffer_from_ptr(host, host.nbytes)
        cpu_ctx.gemm_async(A, A, C, n, n, n, s, dtype="f32")
        outs.append(host.ctypes.data)
        del C, host
    gc.collect()
    assert len(s._pending) == 4
    s.sync()
    assert s._pending == []
    s.close()


def test_last_backend_is_per_thread(ctx):
    assert in_fresh_thread(tc.last_backend) == tc.TC_BACKEND_NONE
    assert in_fresh_thread(tc.last_backend_name) == "none"

    def run():
        A = ctx.buffer_from_array(np.ones((2, 2), np.float32))
        C = ctx.buffer(16)
        ctx.gemm(A, A, C, 2, 2, 2, dtype="f32")
        return ctx.last_backend(), ctx.last_backend_name()

    code, name = in_fresh_thread(run)
    want = "portable_cpu" if ctx.device_info().family == "cpu" else "cuda"
    assert name == want and tc.backend_name(code) == want
    assert in_fresh_thread(tc.last_backend_name) == "none"


def test_last_error_detail_follows_calls(ctx):
    with pytest.raises(tc.TensorcoreError):
        ctx.buffer(0)
    assert tc.last_error() == tc.TC_ERR_INVALID_ARG and "nbytes" in tc.last_error_detail()
    ctx.buffer(8).close()
    assert tc.last_error() == 0 and tc.last_error_detail() == ""


# ---- ownership -------------------------------------------------------------------------------

def test_context_close_closes_children(device, rng):
    ctx = tc.Context(device)
    bufs = [ctx.buffer(64) for _ in range(3)] + [tc.buffer_alloc(ctx, 8), tc.buffer_alloc(ctx.handle, 8)]
    a = random_array(rng, (64, 64), "f32")
    A, C = ctx.buffer_from_array(a), ctx.buffer(64 * 64 * 4)
    s1, s2 = ctx.stream(), tc.stream_create(ctx)
    for _ in range(3):
        ctx.gemm_async(A, A, C, 64, 64, 64, s1, dtype="f32")  # work still queued at close
    ctx.close()
    assert ctx.closed and s1.closed and s2.closed and A.closed and C.closed
    assert all(b.closed for b in bufs)
    ctx.close()  # idempotent
    with pytest.raises(tc.TensorcoreError):
        bufs[0].write(np.zeros(4, np.uint8))


def test_context_with_statement_and_children_outliving_it(device):
    with tc.Context(device) as ctx:
        buf = ctx.buffer(32)
        s = ctx.stream()
    assert ctx.closed and buf.closed and s.closed
    buf.close()
    s.close()


def test_garbage_collection_releases_handles(device):
    live = tc._objects._live
    before = len(live)
    ctx = tc.Context(device)
    buf = ctx.buffer(16)
    ctx_ref = __import__("weakref").ref(ctx)
    del ctx
    gc.collect()
    assert ctx_ref() is not None  # the buffer keeps its context alive
    del buf
    gc.collect()
    assert ctx_ref() is None and len(live) == before
    # a reference cycle through a buffer: collected, context shut down after its child
    ctx = tc.Context(device)
    buf = ctx.buffer(16)
    ctx.cycle, buf.cycle = buf, ctx
    del ctx, buf
    gc.collect()
    assert len(live) == before


def test_raw_handles_are_accepted_everywhere(ctx, rng):
    a = random_array(rng, (3, 3), "f32")
    A = ctx.buffer_from_array(a)
    C = tc.buffer_alloc(ctx.handle, 36)  # made through the raw context handle: still a child of ctx
    s = tc.stream_create(ctypes.c_void_p(ctx.handle))
    tc.gemm_async(ctx.handle, A.handle, ctypes.c_void_p(A.handle), C.handle, 3, 3, 3, s.handle, dtype="f32")
    tc.stream_sync(s.handle)
    a64 = a.astype(np.float64)
    assert_close(C.to_numpy((3, 3), np.float32), a64 @ a64, np.abs(a64) @ np.abs(a64), 1e-6)
    assert C in ctx._buffers and s in ctx._streams
    # ctypes sees the wrappers as handles directly
    size = ctypes.c_size_t()
    assert tc._lib.tc_buffer_size(C, ctypes.byref(size)) == 0 and size.value == 36


def test_wrapper_methods_mirror_raw_functions():
    import inspect

    for name in ("gemm", "gemm_async", "gemm_batched", "device_info", "runtime_capabilities",
                 "buffer_from_ptr", "buffer_from_array"):
        raw = list(inspect.signature(getattr(tc, name)).parameters)
        method = list(inspect.signature(getattr(tc.Context, name)).parameters)
        assert method == raw[1:], name
    assert list(inspect.signature(tc.Context.buffer).parameters) == ["nbytes"]
    assert list(inspect.signature(tc.gemm_async).parameters)[:8] == ["ctx", "A", "B", "C", "M", "N", "K", "stream"]
    params = inspect.signature(tc.gemm_batched).parameters
    assert list(params)[:8] == ["ctx", "A", "B", "C", "batch", "M", "N", "K"]
    assert params["dtype"].default == "f16" and params["accum"].default == "f32"
    assert params["allow_tf32"].kind is inspect.Parameter.KEYWORD_ONLY


# ---- subprocesses ----------------------------------------------------------------------------

TRACE_SCRIPT = """
import numpy as np, tensorcore as tc
with tc.Context("cpu") as ctx:
    A = ctx.buffer_from_array(np.ones((3, 4), np.float32))
    B = ctx.buffer_from_array(np.ones((4, 5), np.float32))
    C = ctx.buffer(60)
    ctx.gemm(A, B, C, 3, 5, 4, dtype="f32")
    with ctx.stream() as s:
        ctx.gemm_async(A, B, C, 3, 5, 4, s, dtype="f32")
    ctx.gemm_batched(A, B, C, 1, 3, 5, 4, dtype="f32")
    try:
        ctx.gemm(A, B, C, 0, 5, 4, dtype="f32")
    except tc.TensorcoreError:
        pass
print("done")
"""


def test_trace_prints_one_line_per_op():
    r = run_python(TRACE_SCRIPT, env={"TC_TRACE": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("[tensorcore] settings:") == 1, r.stderr  # the resolved switches, once
    lines = [l for l in r.stderr.splitlines() if l.startswith("[tensorcore] op=")]
    assert len(lines) == 3, r.stderr  # the refused call ran no op
    pattern = (r"\[tensorcore\] op=(gemm|gemm_batched) shapes=M=3,N=5,K=4,batch=1,dtype=f32,accum=f32,ta=0,tb=0 "
               r"status=0\(ok\) backend=portable_cpu us=\d+\.\d")
    for line in lines:
        assert re.fullmatch(pattern, line), line
    assert [re.search(r"op=(\w+)", l).group(1) for l in lines] == ["gemm", "gemm", "gemm_batched"]
    quiet = run_python(TRACE_SCRIPT, unset=("TC_TRACE",))
    assert quiet.returncode == 0 and "[tensorcore]" not in quiet.stderr


def test_missing_library_names_the_searched_path(tmp_path):
    missing = str(tmp_path / "nowhere" / "libtensorcore.so")
    r = run_python("import tensorcore", env={"TENSORCORE_LIB": missing})
    assert r.returncode != 0
    assert "TensorcoreLibraryError" in r.stderr and "tensorcore error -12" in r.stderr
    assert missing in r.stderr and "TENSORCORE_LIB: not found" in r.stderr
    check = ("try:\n    import tensorcore\nexcept ImportError as e:\n"
             "    from tensorcore._errors import TensorcoreError\n"
             "    print(isinstance(e, TensorcoreError), e.status)\n")
    r = run_python(check, env={"TENSORCORE_LIB": missing})
    assert r.stdout.split() == ["True", "-12"], r.stderr


def test_unloadable_library_reports_dlopen_error(tmp_path):
    bogus = tmp_path / "libtensorcore.so"
    bogus.write_bytes(b"not an ELF file")
    r = run_python("import tensorcore", env={"TENSORCORE_LIB": str(bogus)})
    assert r.returncode != 0 and "dlopen failed" in r.stderr and str(bogus) in r.stderr


def test_library_search_order(tmp_path):
    """Without TENSORCORE_LIB: next to the package first, then the standard
    prefixes, then <repo>/build; the import error names every path tried."""
    pkg = tmp_path / "python" / "tensorcore"
    shutil.copytree(Path(tc.__file__).parent, pkg, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    load = "import sys; sys.path.insert(0, %r); import tensorcore as tc; print(tc.library_path)" % str(pkg.parent)
    r = run_python(load, unset=("TENSORCORE_LIB", "PYTHONPATH"))
    if r.returncode == 0:
        pytest.skip("a libtensorcore is installed in a standard prefix: %s" % r.stdout.strip())
    searched = re.findall(r"^  (\S+) \((package|standard prefix|build tree): not found\)$", r.stderr, flags=re.M)
    assert [p for p, _ in searched] == [
        str(pkg / "libtensorcore.so"),
        "/opt/tensorcore/lib/libtensorcore.so", "/usr/local/lib/libtensorcore.so",
        "/usr/lib/libtensorcore.so", "/usr/lib/x86_64-linux-gnu/libtensorcore.so",
        str(tmp_path / "build" / "libtensorcore.so"),
    ], r.stderr
    # the build tree is found ...
    (tmp_path / "build").mkdir()
    shutil.copy(tc.library_path, tmp_path / "build" / "libtensorcore.so")
    r = run_python(load, unset=("TENSORCORE_LIB", "PYTHONPATH"))
    assert r.returncode == 0 and r.stdout.strip() == str(tmp_path / "build" / "libtensorcore.so"), r.stderr
    # ... but a package-local library wins over it
    shutil.copy(tc.library_path, pkg / "libtensorcore.so")
    r = run_python(load, unset=("TENSORCORE_LIB", "PYTHONPATH"))
    assert r.returncode == 0 and r.stdout.strip() == str(pkg / "libtensorcore.so"), r.stderr


def test_tensorcore_lib_may_name_a_directory():
    r = run_python("import tensorcore as tc; print(tc.library_path)",
                   env={"TENSORCORE_LIB": str(Path(tc.library_path).parent)})
    assert r.returncode == 0 and r.stdout.strip() == tc.library_path


def test_python_m_tensorcore():
    r = run_python("import runpy; runpy.run_module('tensorcore', run_name='__main__')")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("tensorcore ") and "cpu " in r.stdout and "gemm_f32" in r.stdout
