"""Bad input to every entry point: the documented status, a detail message,
and the caller's buffers left exactly as they were."""

import ctypes

import numpy as np
import pytest

import tensorcore as tc
from conftest import random_array

SHAPE, ARG, DTYPE = tc.TC_ERR_INVALID_SHAPE, tc.TC_ERR_INVALID_ARG, tc.TC_ERR_UNSUPPORTED_DTYPE
ENTRIES = ["gemm", "gemm_async", "gemm_batched"]


def raises(status, fn, *args, **kwargs):
    with pytest.raises(tc.TensorcoreError) as info:
        fn(*args, **kwargs)
    e = info.value
    assert e.status == status, "expected status %d, got %r" % (status, e)
    assert str(e).startswith("tensorcore error %d: %s" % (status, tc.status_string(status)))
    assert e.detail, "no detail for %r" % e
    return e


class Operands:
    """A, B, C f32 buffers of M x K, K x N, M x N with random contents, plus a
    snapshot to prove a failing call left them untouched."""

    def __init__(self, ctx, rng, M=8, N=6, K=5, dtype="f32", c_dtype=None):
        self.ctx = ctx
        self.M, self.N, self.K = M, N, K
        self.arrays = [random_array(rng, s, d) for s, d in
                       (((M, K), dtype), ((K, N), dtype), ((M, N), c_dtype or dtype))]
        self.A, self.B, self.C = (ctx.buffer_from_array(a) for a in self.arrays)
        self.dtype = dtype

    def untouched(self):
        for buf, arr in zip((self.A, self.B, self.C), self.arrays):
            if not buf.closed:
                assert buf.to_numpy(arr.nbytes, np.uint8).tobytes() == arr.tobytes(), "buffer changed"


def call(entry, ctx, A, B, C, M, N, K, stream=None, batch=1, **kw):
    """One GEMM through `entry` (async ones use `stream`, then sync)."""
    kw.setdefault("dtype", "f32")
    kw.setdefault("accum", "i32" if kw["dtype"] == "i8" else "f32")
    if entry == "gemm":
        tc.gemm(ctx, A, B, C, M, N, K, **kw)
    elif entry == "gemm_async":
        tc.gemm_async(ctx, A, B, C, M, N, K, stream, **kw)
        tc.stream_sync(stream)
    else:
        tc.gemm_batched(ctx, A, B, C, batch, M, N, K, **kw)


@pytest.fixture
def ops(ctx, rng):
    return Operands(ctx, rng)


@pytest.fixture
def stream(ctx):
    with ctx.stream() as s:
        yield s


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("dims", [(0, 6, 5), (8, 0, 5), (-1, 6, 5), (8, -2, 5), (8, 6, -1), (2**31, 6, 5)])
def test_bad_dims(ops, stream, entry, dims):
    e = raises(SHAPE, call, entry, ops.ctx, ops.A, ops.B, ops.C, *dims, stream=stream)
    assert "M" in e.detail or "K" in e.detail
    ops.untouched()


@pytest.mark.parametrize("batch", [0, -3])
def test_bad_batch(ops, batch):
    raises(SHAPE, call, "gemm_batched", ops.ctx, ops.A, ops.B, ops.C, ops.M, ops.N, ops.K, batch=batch)
    ops.untouched()


@pytest.mark.parametrize("entry", ENTRIES)
def test_dims_beyond_int64_are_refused_before_c(ops, stream, entry):
    """ctypes would wrap 2^64 + 8 to 8; the binding refuses it."""
    e = raises(SHAPE, call, entry, ops.ctx, ops.A, ops.B, ops.C, 2**64 + ops.M, ops.N, ops.K, stream=stream)
    assert isinstance(e, ValueError)
    raises(SHAPE, call, entry, ops.ctx, ops.A, ops.B, ops.C, ops.M, ops.N, ops.K, stream=stream, ldc=-2**70)
    ops.untouched()


@pytest.mark.parametrize("kw", [
    dict(lda=2**62),                                    # (rows-1) * lda * 4 overflows
    dict(batch=2**40, stride_a=2**40, stride_b=2**40, stride_c=2**40),
    dict(batch=3, stride_a=2**62),                      # (batch-1) * stride overflows
    dict(batch=2**62, stride_c=2**30),
])
def test_sizes_overflowing_64_bits(ops, kw):
    raises(SHAPE, call, "gemm_batched", ops.ctx, ops.A, ops.B, ops.C, ops.M, ops.N, ops.K, **kw)
    ops.untouched()


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("which", ["A", "B", "C"])
def test_buffers_too_small(ctx, rng, stream, entry, which):
    o = Operands(ctx, rng)
    args = [o.A, o.B, o.C]
    short = o.arrays["ABC".index(which)].ravel()[:-1]  # one element short
    args["ABC".index(which)] = small = ctx.buffer_from_array(short)
    e = raises(ARG, call, entry, ctx, *args, o.M, o.N, o.K, stream=stream)
    assert which + " needs" in e.detail and "bytes" in e.detail
    assert small.to_numpy(short.shape, short.dtype).tobytes() == short.tobytes()
    o.untouched()


def test_batched_last_batch_out_of_range(ops):
    raises(ARG, call, "gemm_batched", ops.ctx, ops.A, ops.B, ops.C, ops.M, ops.N, 1, batch=2,
           stride_a=ops.M * ops.K, stride_b=1, stride_c=ops.M * ops.N)
    ops.untouched()


def test_batches_of_c_may_not_overlap(ctx, rng):
    o = Operands(ctx, rng, M=4, N=4, K=2)
    big = ctx.buffer_from_array(np.zeros(64, np.float32))
    raises(ARG, call, "gemm_batched", ctx, o.A, o.B, big, 4, 4, 2, batch=2, stride_a=0, stride_b=0, stride_c=8)
    assert not big.to_numpy(64, np.float32).any()


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("dtype,accum", [("f32", "f16"), ("bf16", "f16"), ("i8", "f32"), ("f16", "i32"),
                                         ("f64", "f64"), ("i32", "i32"), (7, 2), (-1, 2), (2, 99)])
def test_unsupported_dtype_pairs(ops, stream, entry, dtype, accum):
    e = raises(DTYPE, call, entry, ops.ctx, ops.A, ops.B, ops.C, ops.M, ops.N, ops.K, stream=stream,
               dtype=dtype, accum=accum)
    assert "accum" in e.detail
    ops.untouched()


def test_unknown_dtype_names_are_value_errors(ops):
    for kw in (dict(dtype="f8"), dict(dtype="float128"), dict(accum="q4"), dict(dtype=None)):
        with pytest.raises(tc.TensorcoreError) as info:
            call("gemm", ops.ctx, ops.A, ops.B, ops.C, ops.M, ops.N, ops.K, **kw)
        assert info.value.status == DTYPE and isinstance(info.value, (ValueError, TypeError))
    with pytest.raises(ValueError, match="f16, .*bf16"):
        tc.dtype_code("nope")
    ops.untouched()


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("alpha,beta", [(0.5, 0), (1, 1.5), (float("inf"), 0), (float("nan"), 0), (2**31, 0),
                                        (1, -2**31 - 1)])
def test_i8_needs_integer_scalars(ctx, rng, stream, entry, alpha, beta):
    o = Operands(ctx, rng, dtype="i8", c_dtype="i32")
    e = raises(ARG, call, entry, ctx, o.A, o.B, o.C, o.M, o.N, o.K, stream=stream, dtype="i8", accum="i32",
               alpha=alpha, beta=beta)
    assert "integer" in e.detail
    o.untouched()


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("kw", [dict(lda=4), dict(ldb=5), dict(ldc=5), dict(lda=-1), dict(ldc=-6),
                                dict(transpose_a=True, lda=7), dict(transpose_b=True, ldb=4)])
def test_pitch_smaller_than_row(ops, stream, entry, kw):
    e = raises(SHAPE, call, entry, ops.ctx, ops.A, ops.B, ops.C, ops.M, ops.N, ops.K, stream=stream, **kw)
    assert "ld" in e.detail
    ops.untouched()


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("which", ["A", "B", "C"])
def test_buffer_of_another_context(ctx, rng, device, stream, entry, which):
    o = Operands(ctx, rng)
    with tc.Context(device) as other:
        foreign = other.buffer_from_array(o.arrays["ABC".index(which)])
        args = [o.A, o.B, o.C]
        args["ABC".index(which)] = foreign
        e = raises(ARG, call, entry, ctx, *args, o.M, o.N, o.K, stream=stream)
        assert "another context" in e.detail
        o.untouched()


def test_stream_of_another_context(ops, device):
    with tc.Context(device) as other, other.stream() as s:
        e = raises(ARG, tc.gemm_async, ops.ctx, ops.A, ops.B, ops.C, ops.M, ops.N, ops.K, s, dtype="f32")
        assert "another context" in e.detail
    ops.untouched()


def test_missing_stream(ops):
    raises(ARG, tc.gemm_async, ops.ctx, ops.A, ops.B, ops.C, ops.M, ops.N, ops.K, None, dtype="f32")
    ops.untouched()


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("which", ["A", "B", "C"])
def test_freed_buffer_handle(ctx, rng, stream, entry, which):
    o = Operands(ctx, rng)
    args = [o.A, o.B, o.C]
    victim = args["ABC".index(which)]
    raw = victim.handle
    tc.buffer_free(raw)  # raw free through the handle closes the wrapper too
    assert victim.closed
    args["ABC".index(which)] = raw
    e = raises(ARG, call, entry, ctx, *args, o.M, o.N, o.K, stream=stream)
    assert "not a live tensorcore buffer" in e.detail
    # The closed wrapper itself is refused by the binding (its address may be reused).
    args["ABC".index(which)] = victim
    e = raises(ARG, call, entry, ctx, *args, o.M, o.N, o.K, stream=stream)
    assert "closed" in e.detail
    o.untouched()


def test_freed_stream_handle(ops):
    s = ops.ctx.stream()
    raw = s.handle
    tc.stream_destroy(raw)
    assert s.closed
    for fn, args in ((tc.gemm_async, (ops.ctx, ops.A, ops.B, ops.C, ops.M, ops.N, ops.K, raw)),
                     (tc.stream_sync, (raw,)), (tc.stream_destroy, (raw,))):
        e = raises(ARG, fn, *args, **({"dtype": "f32"} if fn is tc.gemm_async else {}))
        assert "not a live tensorcore stream" in e.detail
    raises(ARG, s.sync)
    ops.untouched()


def test_freed_context_handle(device, rng):
    ctx = tc.init(device)
    raw = ctx.handle
    a = random_array(rng, (4, 4), "f32")
    A = ctx.buffer_from_array(a)
    ctx.close()  # closes A too
    assert A.closed and ctx.closed
    for fn, args in ((tc.buffer_alloc, (raw, 16)), (tc.device_info, (raw,)), (tc.runtime_capabilities, (raw,)),
                     (tc.stream_create, (raw,)), (tc.shutdown, (raw,)), (tc.buffer_from_ptr, (raw, a, 16)),
                     (tc.gemm, (raw, 1, 2, 3, 4, 4, 4))):
        e = raises(ARG, fn, *args)
        assert "context" in e.detail
    raises(ARG, tc.device_info, ctx)  # closed wrapper
    raises(ARG, tc.gemm, ctx, A, A, A, 4, 4, 4)
    raises(ARG, tc.device_info, None)


@pytest.mark.parametrize("entry", ENTRIES)
def test_output_overlapping_an_input(ctx, rng, stream, entry):
    n = 6
    a = random_array(rng, (n, n), "f32")
    A, B = ctx.buffer_from_array(a), ctx.buffer_from_array(a)
    for args in ((A, B, A), (A, B, B), (A, A, A)):
        e = raises(ARG, call, entry, ctx, *args, n, n, n, stream=stream)
        assert "overlaps" in e.detail
    assert A.to_numpy((n, n), np.float32).tobytes() == a.tobytes()
    assert B.to_numpy((n, n), np.float32).tobytes() == a.tobytes()


@pytest.mark.parametrize("entry", ENTRIES)
def test_output_aliasing_an_input_through_caller_memory(cpu_ctx, rng, entry):
    """Two buffers wrapping the same (or overlapping) caller memory count as overlapping."""
    n = 8
    mem = random_array(rng, (3 * n, n), "f32")
    keep = mem.copy()
    B = cpu_ctx.buffer_from_array(random_array(rng, (n, n), "f32"))
    A = cpu_ctx.buffer_from_ptr(mem, n * n * 4)
    with cpu_ctx.stream() as s:
        for c_start in (0, n * n - 1, n * n // 2):  # same start, last element shared, halfway
            C = cpu_ctx.buffer_from_ptr(mem.ctypes.data + 4 * c_start, n * n * 4)
            e = raises(ARG, call, entry, cpu_ctx, A, B, C, n, n, n, stream=s)
            assert "same memory" in e.detail
        C = cpu_ctx.buffer_from_ptr(mem.ctypes.data + 4 * n * n, n * n * 4)  # adjacent: fine
        call(entry, cpu_ctx, A, B, C, n, n, n, stream=s)
    np.testing.assert_array_equal(mem[:n], keep[:n])


def test_wrong_kinds_of_objects(ops, stream):
    e = raises(ARG, call, "gemm", ops.ctx, ops.A, stream, ops.C, ops.M, ops.N, ops.K)  # a stream as B
    assert "not a live tensorcore buffer" in e.detail
    with pytest.raises(TypeError):
        call("gemm", ops.ctx, ops.arrays[0], ops.B, ops.C, ops.M, ops.N, ops.K)  # an ndarray as A
    with pytest.raises(TypeError):
        call("gemm", ops.ctx, ops.A, ops.B, ops.C, "8", ops.N, ops.K)
    with pytest.raises(TypeError):
        call("gemm", ops.ctx, ops.A, ops.B, ops.C, ops.M, ops.N, ops.K, alpha="x")
    raises(ARG, call, "gemm", ops.A, ops.A, ops.B, ops.C, ops.M, ops.N, ops.K)  # a buffer as the context
    ops.untouched()


def test_failed_async_call_enqueues_nothing(ops, stream):
    raises(SHAPE, tc.gemm_async, ops.ctx, ops.A, ops.B, ops.C, 0, ops.N, ops.K, stream, dtype="f32")
    stream.sync()  # nothing failed on the stream itself
    ops.untouched()


# ---- buffers -----------------------------------------------------------------------------

def test_zero_size_buffers(ctx, cpu_ctx):
    raises(ARG, ctx.buffer, 0)
    raises(ARG, tc.buffer_alloc, ctx, 0)
    raises(ARG, ctx.buffer_from_array, np.zeros(0, np.float32))
    arr = np.zeros(4, np.float32)
    raises(ARG, cpu_ctx.buffer_from_ptr, arr.ctypes.data, 0)
    raises(ARG, cpu_ctx.buffer_from_ptr, 0, 16)
    raises(ARG, cpu_ctx.buffer_from_ptr, None, 16)
    with pytest.raises(ValueError):
        cpu_ctx.buffer_from_ptr(arr, arr.nbytes + 1)  # beyond the array
    with pytest.raises(ValueError):
        cpu_ctx.buffer_from_ptr(np.zeros(4, np.float32)[::2], 8)  # not contiguous
    with pytest.raises(ValueError):
        cpu_ctx.buffer_from_ptr(b"read-only bytes!", 16)


def test_negative_and_huge_sizes(ctx):
    raises(ARG, ctx.buffer, -1)
    raises(tc.TC_ERR_ALLOC, ctx.buffer, 2**63)
    raises(ARG, ctx.buffer, 2**64)


@pytest.mark.parametrize("offset,n", [(0, 17), (1, 16), (16, 1), (17, 0), (2**40, 1)])
def test_read_write_out_of_range(ctx, rng, offset, n):
    data = random_array(rng, 16, "i8")
    buf = ctx.buffer_from_array(data)
    src, dst = np.ones(n, np.uint8), np.zeros(n, np.uint8)
    for fn, arr in ((buf.write, src), (buf.read, dst), (tc.buffer_write, src), (tc.buffer_read, dst)):
        args = (arr, offset) if fn in (buf.write, buf.read) else (buf, arr, offset)
        e = raises(ARG, fn, *args)
        assert isinstance(e, ValueError) and "outside the buffer of 16 bytes" in e.detail
    with pytest.raises(ValueError):
        buf.to_numpy(17, np.uint8)
    with pytest.raises(ValueError):
        buf.to_numpy((4,), np.float32, offset=4)
    # the library checks the same range itself (raw ctypes call, no Python check)
    raw = tc._lib.tc_buffer_write(buf.handle, offset, src.ctypes.data, n)
    assert raw == ARG and "outside the buffer" in tc.last_error_detail()
    raw = tc._lib.tc_buffer_read(buf.handle, offset, dst.ctypes.data, n)
    assert raw == ARG
    assert buf.to_numpy(16, np.int8).tobytes() == data.tobytes()
    assert not dst.any()


def test_bad_offsets_and_host_arrays(ctx):
    buf = ctx.buffer_from_array(np.arange(4, dtype=np.float32))
    raises(ARG, buf.write, np.zeros(1, np.float32), -4)
    raises(ARG, buf.read, np.zeros(1, np.float32), -1)
    with pytest.raises(ValueError, match="C-contiguous"):
        buf.write(np.zeros((4, 2), np.float32)[:, 0])
    with pytest.raises(ValueError, match="C-contiguous"):
        ctx.buffer_from_array(np.zeros((4, 4), np.float32).T)
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        buf.read(ro)
    with pytest.raises(ValueError, match="read-only"):
        buf.read(b"\0" * 16)
    with pytest.raises(TypeError):
        buf.write([1.0, 2.0])
    np.testing.assert_array_equal(buf.to_numpy(4, np.float32), np.arange(4, dtype=np.float32))


def test_freed_buffer_entry_points(ctx):
    buf = ctx.buffer(16)
    raw = buf.handle
    tc.buffer_free(buf)
    assert buf.closed
    raises(ARG, tc.buffer_free, buf)  # a raw double free is an error; buf.close() is idempotent
    buf.close()
    arr = np.zeros(4, np.uint8)
    for fn, args in ((tc.buffer_free, (raw,)), (tc.buffer_map, (raw,)), (tc.buffer_size, (raw,)),
                     (tc.buffer_write, (raw, arr)), (tc.buffer_read, (raw, arr)), (tc.buffer_device_ptr, (raw,))):
        e = raises(ARG, fn, *args)
        assert "not a live tensorcore buffer" in e.detail
    for method, args in ((buf.map, ()), (buf.size, ()), (buf.write, (arr,)), (buf.read, (arr,)),
                         (buf.to_numpy, (4, np.uint8))):
        e = raises(ARG, method, *args)
        assert "closed" in e.detail


# ---- contexts and streams ----------------------------------------------------------------

def test_shutdown_with_live_children_is_refused(device):
    ctx = tc.init(device)
    buf = tc.buffer_alloc(ctx, 64)
    e = raises(ARG, tc.shutdown, ctx)
    assert "1 live buffer(s)" in e.detail
    tc.buffer_free(buf)
    s = tc.stream_create(ctx)
    e = raises(ARG, tc.shutdown, ctx)
    assert "1 stream(s)" in e.detail
    tc.stream_destroy(s)
    tc.shutdown(ctx)
    assert ctx.closed


def test_bad_devices():
    e = raises(ARG, tc.Context, "tpu")
    assert "tpu" in e.detail
    for spec in ("cuda:", "cuda:x", "cuda:-1", "CPU "):
        raises(ARG, tc.init, spec)
    raises(tc.TC_ERR_NO_DEVICE, tc.Context, "cuda:4096")
    with pytest.raises(TypeError):
        tc.Context(0)


def test_bad_device_env(monkeypatch):
    monkeypatch.setenv("TC_DEVICE", "quantum")
    e = raises(ARG, tc.init)
    assert "quantum" in e.detail


def test_capabilities_input(ctx):
    caps = ctx.runtime_capabilities()
    with pytest.raises(TypeError):
        tc.capability_available({"known": 1}, tc.TC_CAPABILITY_GEMM_F32)
    with pytest.raises(ValueError):
        tc.capability_available(caps, "warp_drive")
    # struct_size smaller than the record the library fills is refused
    small = tc.TCRuntimeCapabilities(struct_size=8)
    st = tc._api.context._tc_runtime_capabilities(ctx.handle, ctypes.byref(small))
    assert st == ARG and "struct_size" in tc.last_error_detail()


def test_error_is_picklable_and_catchable():
    import pickle

    e = tc.TensorcoreError(-6, "M must be > 0")
    assert str(e) == "tensorcore error -6: invalid_shape: M must be > 0"
    e2 = pickle.loads(pickle.dumps(e))
    assert (e2.status, e2.detail, str(e2)) == (e.status, e.detail, str(e))
    assert str(tc.TensorcoreError(-42)) == "tensorcore error -42: unknown status"
    assert issubclass(tc.TensorcoreValueError, tc.TensorcoreError) and issubclass(tc.TensorcoreValueError, ValueError)
