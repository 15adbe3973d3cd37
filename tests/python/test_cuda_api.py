"""CUDA management calls (consistent in every build), zero-copy interop
(DLPack on CPU and CUDA buffers, the CUDA Array Interface, wrapping other
libraries' arrays), write/read through pinned staging, the GEMM switches
(TC_DISABLE_CUDA_GEMM, TC_CUDA_GEMM, TC_USE_CUDA_GEMM) and the reporting of
kernel faults. Tests that need a GPU skip without one; torch and cupy tests
skip when those are not installed."""

import gc
import textwrap

import numpy as np
import pytest

import tensorcore as tc
from conftest import BF16, HAVE_CUDA, run_python
from tensorcore._api import interop


def test_counts_and_errors_agree(cpu_ctx):
    n = tc.cuda_device_count()
    assert n >= 0
    assert tc.cuda_is_active(cpu_ctx) is False
    with pytest.raises(tc.TensorcoreError) as e:
        tc.cuda_device_at(n)
    assert e.value.status == tc.TC_ERR_NO_DEVICE
    if n == 0:
        with pytest.raises(tc.TensorcoreError) as e:
            cpu_ctx.cuda_init()
        assert e.value.status == tc.TC_ERR_NO_DEVICE
        assert tc.cuda_last_kernel_name() == ""
    else:
        info = tc.cuda_device_at(0)
        assert info.backend == tc.TC_BACKEND_CUDA and info.name


@pytest.mark.skipif(tc.cuda_device_count() == 0, reason="no CUDA device")
def test_cpu_context_moves_to_cuda():
    with tc.Context("cpu") as ctx:
        ctx.cuda_init()
        assert ctx.cuda_is_active()
        assert ctx.device_info().backend == tc.TC_BACKEND_CUDA


# ---- interop: DLPack and the CUDA Array Interface ------------------------------------

needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="no usable CUDA device")


def dl_tensor_of(capsule, versioned=False):
    """The DLTensor inside a capsule (not consumed), for checking its fields."""
    name = interop._NAME_VERSIONED if versioned else interop._NAME
    address = interop._PyCapsule_GetPointer_obj(capsule, name)
    cls = interop.DLManagedTensorVersioned if versioned else interop.DLManagedTensor
    return cls.from_address(address)


@pytest.mark.parametrize("dtype", ["f32", "f16", "i8", "i32", "f64"])
def test_cpu_view_is_zero_copy_for_numpy(cpu_ctx, rng, dtype):
    ref = (rng.standard_normal((3, 5)) * 10).astype(tc.numpy_dtype(dtype))
    buf = cpu_ctx.buffer_from_array(np.concatenate([np.zeros(2, ref.dtype), ref.ravel()]))
    view = buf.view(dtype, (3, 5), offset=2 * ref.dtype.itemsize)
    assert view.__dlpack_device__() == (tc.kDLCPU, 0)
    arr = np.from_dlpack(view)
    assert arr.shape == (3, 5) and arr.dtype == ref.dtype
    np.testing.assert_array_equal(arr, ref)
    arr[1, 2] = 7  # the same memory both ways
    assert buf.to_numpy((17,), ref.dtype)[2 + 7] == 7
    buf.write(np.full(17, 3, ref.dtype))
    assert (arr == 3).all()


def test_cpu_buffer_exports_its_bytes(cpu_ctx):
    buf = cpu_ctx.buffer_from_array(np.arange(6, dtype=np.uint8))
    arr = np.from_dlpack(buf)
    assert arr.dtype == np.uint8 and arr.shape == (6,)
    np.testing.assert_array_equal(arr, np.arange(6))
    assert buf.__dlpack_device__() == (tc.kDLCPU, 0)
    assert not hasattr(buf, "__cuda_array_interface__")
    assert not hasattr(buf.view("f32", (1,)), "__cuda_array_interface__")


def test_capsule_fields_legacy_and_versioned(cpu_ctx):
    buf = cpu_ctx.buffer(64)
    view = buf.view("f16", (2, 4), offset=16)
    for versioned in (False, True):
        cap = view.__dlpack__(max_version=(1, 0)) if versioned else view.__dlpack__()
        m = dl_tensor_of(cap, versioned)
        t = m.dl_tensor
        assert t.data == buf.device_ptr() + 16 and t.byte_offset == 0
        assert (t.device.device_type, t.device.device_id) == (tc.kDLCPU, 0)
        assert t.ndim == 2 and [t.shape[0], t.shape[1]] == [2, 4] and not t.strides
        assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (2, 16, 1)
        if versioned:
            assert (m.version.major, m.version.minor, m.flags) == (1, 0, 0)
        del t, m, cap
    if BF16 is not None:
        m = dl_tensor_of(buf.view("bf16", (4,)).__dlpack__())
        assert (m.dl_tensor.dtype.code, m.dl_tensor.dtype.bits) == (4, 16)


def test_export_keeps_buffer_alive_and_is_released(cpu_ctx):
    before = len(interop._exported)
    buf = cpu_ctx.buffer_from_array(np.arange(4, dtype=np.float32))
    arr = np.from_dlpack(buf.view("f32", (4,)))
    del buf
    gc.collect()
    np.testing.assert_array_equal(arr, np.arange(4))  # the wrapper (and memory) lives on
    assert len(interop._exported) == before + 1
    del arr
    gc.collect()
    assert len(interop._exported) == before
    cap = cpu_ctx.buffer(16).__dlpack__()  # never consumed: its destructor releases it
    assert len(interop._exported) == before + 1
    del cap
    gc.collect()
    assert len(interop._exported) == before


def test_export_refusals(cpu_ctx):
    buf = cpu_ctx.buffer(64)
    with pytest.raises(BufferError):
        buf.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        buf.__dlpack__(dl_device=(tc.kDLCUDA, 0))
    with pytest.raises(BufferError):
        buf.__dlpack__(stream=1)
    for shape, offset in [((17,), 0), ((4, 4), 4), ((1,), 65)]:
        with pytest.raises(tc.TensorcoreError) as e:
            buf.view("f32", shape, offset)
        assert e.value.status == tc.TC_ERR_INVALID_ARG
    assert buf.view("f32").shape == (16,) and buf.view("f16", offset=2).shape == (31,)
    buf.close()
    with pytest.raises(tc.TensorcoreError):
        buf.view("f32")


class Producer:
    """A DLPack producer that is not a NumPy array (as torch or JAX tensors are)."""

    def __init__(self, arr):
        self.arr = arr

    def __dlpack__(self, **kw):
        return self.arr.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


def test_cpu_buffer_from_dlpack_producer(cpu_ctx):
    host = np.zeros(10, np.float32)
    buf = cpu_ctx.buffer_from_ptr(Producer(host))
    assert buf.nbytes == 40
    buf.write(np.arange(10, dtype=np.float32))
    np.testing.assert_array_equal(host, np.arange(10))  # no copy
    assert buf.device_ptr() == host.ctypes.data
    with pytest.raises(tc.TensorcoreError) as e:
        cpu_ctx.buffer_from_ptr(Producer(host[::2]))
    assert e.value.status == tc.TC_ERR_INVALID_ARG  # not contiguous
    with pytest.raises(tc.TensorcoreError) as e:
        cpu_ctx.buffer_from_ptr(Producer(host), 44)
    assert e.value.status == tc.TC_ERR_INVALID_ARG  # beyond the object


class FakeCudaArray:
    def __init__(self, address, shape, typestr="<f4", readonly=False):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (address, readonly),
                                         "version": 3, "strides": None}


def test_cpu_context_refuses_cuda_arrays(cpu_ctx):
    with pytest.raises(tc.TensorcoreError) as e:
        cpu_ctx.buffer_from_ptr(FakeCudaArray(1 << 40, (4,)))
    assert e.value.status == tc.TC_ERR_INVALID_ARG and "CUDA memory" in str(e.value)
    with pytest.raises(tc.TensorcoreError):
        cpu_ctx.buffer_from_ptr(1234)  # raw address without nbytes


@pytest.fixture
def cuda_ctx():
    with tc.Context("cuda") as c:
        yield c


@needs_cuda
def test_cuda_array_interface(cuda_ctx):
    buf = cuda_ctx.buffer_from_array(np.arange(32, dtype=np.float16))
    cai = buf.view("f16", (2, 8), offset=16).__cuda_array_interface__
    assert cai["version"] == 3 and cai["shape"] == (2, 8) and cai["typestr"] == "<f2"
    assert cai["data"] == (buf.device_ptr() + 16, False) and cai["strides"] is None
    assert buf.__dlpack_device__() == (tc.kDLCUDA, cuda_ctx.device_info().device_index)
    assert buf.__cuda_array_interface__["typestr"] == "|u1"
    if BF16 is not None:
        with pytest.raises(tc.TensorcoreError):
            buf.view("bf16").__cuda_array_interface__


@needs_cuda
def test_cuda_buffer_from_another_buffer(cuda_ctx):
    """buffer_from_ptr takes any __cuda_array_interface__ object without copying."""
    owner = cuda_ctx.buffer_from_array(np.zeros(16, np.float32))
    alias = cuda_ctx.buffer_from_ptr(owner.view("f32", (8,), offset=32))
    assert alias.nbytes == 32 and alias.device_ptr() == owner.device_ptr() + 32
    alias.write(np.arange(8, dtype=np.float32))
    np.testing.assert_array_equal(owner.to_numpy((16,), np.float32)[8:], np.arange(8))
    with pytest.raises(tc.TensorcoreError) as e:
        cuda_ctx.buffer_from_ptr(Producer(np.zeros(4, np.float32)))  # host memory on a CUDA context
    assert e.value.status == tc.TC_ERR_INVALID_ARG
    with pytest.raises(tc.TensorcoreError) as e:
        cuda_ctx.buffer_from_ptr(FakeCudaArray(owner.device_ptr(), (4,), readonly=True))
    assert e.value.status == tc.TC_ERR_INVALID_ARG


@needs_cuda
def test_torch_sees_our_memory_and_we_see_torch(cuda_ctx):
    torch = pytest.importorskip("torch")
    buf = cuda_ctx.buffer_from_array(np.arange(12, dtype=np.float32))
    t = torch.from_dlpack(buf.view("f32", (3, 4)))
    assert t.is_cuda and t.shape == (3, 4) and t.data_ptr() == buf.device_ptr()
    t.mul_(2)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(buf.to_numpy((12,), np.float32), np.arange(12) * 2)
    src = torch.arange(6, dtype=torch.float16, device="cuda")
    wrapped = cuda_ctx.buffer_from_ptr(src)
    assert wrapped.device_ptr() == src.data_ptr() and wrapped.nbytes == 12
    del src
    gc.collect()
    torch.cuda.synchronize()
    np.testing.assert_array_equal(wrapped.to_numpy((6,), np.float16), np.arange(6))  # kept alive
    if BF16 is not None:
        tb = torch.from_dlpack(cuda_ctx.buffer_from_array(np.ones(4, BF16)).view("bf16", (4,)))
        assert tb.dtype == torch.bfloat16 and float(tb.sum()) == 4.0


@needs_cuda
def test_cupy_sees_our_memory(cuda_ctx):
    cupy = pytest.importorskip("cupy")
    buf = cuda_ctx.buffer_from_array(np.arange(8, dtype=np.int32))
    c = cupy.asarray(buf.view("i32", (8,)))
    assert c.data.ptr == buf.device_ptr()
    c += 1
    cupy.cuda.Device().synchronize()
    np.testing.assert_array_equal(buf.to_numpy((8,), np.int32), np.arange(8) + 1)
    d = cupy.from_dlpack(buf.view("i32", (2, 4)))
    assert d.shape == (2, 4) and d.data.ptr == buf.device_ptr()


# ---- write / read through pinned staging -------------------------------------------

@needs_cuda
@pytest.mark.parametrize("nbytes,offset", [(100, 0), (300 << 10, 5), ((40 << 20) + 3, 1), (8 << 20, 0)])
def test_write_read_round_trip(cuda_ctx, rng, nbytes, offset):
    """Pageable host memory goes through the chunked pinned bounce buffer (8 MiB
    chunks); small copies go direct. Every byte must arrive, at any offset."""
    data = rng.integers(0, 256, nbytes, dtype=np.uint8)
    buf = cuda_ctx.buffer(nbytes + offset + 7)
    buf.write(np.full(nbytes + offset + 7, 0xAB, np.uint8))
    buf.write(data, offset)
    out = np.empty(nbytes + offset + 7, np.uint8)
    buf.read(out)
    np.testing.assert_array_equal(out[offset:offset + nbytes], data)
    assert (out[:offset] == 0xAB).all() and (out[offset + nbytes:] == 0xAB).all()
    part = np.empty(nbytes - 1, np.uint8)
    buf.read(part, offset + 1)
    np.testing.assert_array_equal(part, data[1:])


@needs_cuda
def test_write_read_pinned_host_memory(cuda_ctx, rng):
    torch = pytest.importorskip("torch")
    pinned = torch.empty(20 << 20, dtype=torch.uint8, pin_memory=True).numpy()
    pinned[:] = rng.integers(0, 256, pinned.size, dtype=np.uint8)
    buf = cuda_ctx.buffer(pinned.size)
    buf.write(pinned)
    back = torch.empty(pinned.size, dtype=torch.uint8, pin_memory=True).numpy()
    buf.read(back)
    np.testing.assert_array_equal(back, pinned)


# ---- TC_DISABLE_CUDA_GEMM and friends ------------------------------------------------

GEMM_SCRIPT = textwrap.dedent("""
    import numpy as np, tensorcore as tc
    with tc.Context(%(device)r) as ctx:
        rng = np.random.default_rng(0)
        a = rng.standard_normal((5, 7)).astype(np.float32)
        b = rng.standard_normal((7, 3)).astype(np.float32)
        A, B = ctx.buffer_from_array(a), ctx.buffer_from_array(b)
        C = ctx.buffer_from_array(np.full(15, np.nan, np.float32))
        ctx.gemm(A, B, C, 5, 3, 7, dtype="f32", accum="f32")
        assert np.allclose(C.to_numpy((5, 3), np.float32), a @ b, rtol=1e-5, atol=1e-5)
        sync_backend = ctx.last_backend_name()
        D = ctx.buffer_from_array(np.full(15, np.nan, np.float32))
        with ctx.stream() as s:
            ctx.gemm_async(A, B, D, 5, 3, 7, s, dtype="f32", accum="f32")
        assert np.allclose(D.to_numpy((5, 3), np.float32), a @ b, rtol=1e-5, atol=1e-5)
        print(sync_backend, ctx.last_backend_name())
""")

SWITCHES = [{"TC_DISABLE_CUDA_GEMM": "1"}, {"TC_CUDA_GEMM": "0"}, {"TC_USE_CUDA_GEMM": "0"},
            {"TC_USE_CUDA_GEMM": "off"}]
SWITCH_NAMES = ["TC_DISABLE_CUDA_GEMM", "TC_CUDA_GEMM", "TC_USE_CUDA_GEMM"]


def test_gemm_switches_leave_cpu_contexts_alone():
    r = run_python(GEMM_SCRIPT % {"device": "cpu"}, env={"TC_DISABLE_CUDA_GEMM": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["portable_cpu", "portable_cpu"]


@needs_cuda
@pytest.mark.parametrize("env", SWITCHES)
def test_gemm_switches_force_cpu_fallback(env):
    r = run_python(GEMM_SCRIPT % {"device": "cuda"}, env=env, unset=[n for n in SWITCH_NAMES if n not in env])
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["portable_cpu", "portable_cpu"]


@needs_cuda
@pytest.mark.parametrize("env", [{}, {"TC_DISABLE_CUDA_GEMM": "0"}, {"TC_CUDA_GEMM": "1"}, {"TC_USE_CUDA_GEMM": ""}])
def test_gemm_runs_on_cuda_without_switch(env):
    r = run_python(GEMM_SCRIPT % {"device": "cuda"}, env=env, unset=[n for n in SWITCH_NAMES if n not in env])
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["cuda", "cuda"]


# ---- kernel faults surface at the next sync, naming the kernel ------------------------

FAULT_SCRIPT = textwrap.dedent("""
    import numpy as np, tensorcore as tc
    ctx = tc.Context("cuda")
    B = ctx.buffer_from_array(np.ones(32, np.int8))
    C = ctx.buffer(2 * 16 * 4)
    small = ctx.buffer(256)
    # A buffer claiming 1 TiB over a 256-byte allocation: the second matrix of
    # a batched i8 GEMM (our own kernel for this layout) starts 1 TiB in. B
    # and C must lie below it, or the overlap check refuses the call first.
    if max(B.device_ptr(), C.device_ptr()) >= small.device_ptr():
        print("LAYOUT B and C above A")
        raise SystemExit(0)
    huge = ctx.buffer_from_ptr(small.device_ptr(), (1 << 40) + 64)
    kw = dict(dtype="i8", accum="i32", stride_a=1 << 40, stride_b=0)
    try:
        if %(use_stream)r:
            s = ctx.stream()
            ctx.gemm_batched(huge, B, C, 2, 4, 4, 4, stream=s, **kw)
            s.sync()
        else:
            ctx.gemm_batched(huge, B, C, 2, 4, 4, 4, **kw)
    except tc.TensorcoreError as e:
        print("STATUS", e.status)
        print("DETAIL", str(e))
    else:
        print("NO ERROR")
""")


@needs_cuda
@pytest.mark.parametrize("use_stream", [False, True])
def test_kernel_fault_is_reported_with_kernel_name(use_stream):
    """A faulting kernel leaves the CUDA context unusable, so it runs in a
    child process; the status is TC_ERR_DISPATCH and the detail names the
    kernel and the CUDA error."""
    r = run_python(FAULT_SCRIPT % {"use_stream": use_stream}, timeout=120)
    out = r.stdout
    if "LAYOUT" in out:
        pytest.skip("the allocator placed B and C above A; no non-overlapping fault layout")
    assert "STATUS %d" % tc.TC_ERR_DISPATCH in out, out + r.stderr
    assert "gemm_i8_tiled" in out and "cudaError" in out, out
    if use_stream:
        assert "stream work failed" in out, out
