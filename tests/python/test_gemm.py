"""GEMM against float64 NumPy references on fresh random inputs.

Every output is poisoned first (NaN for floats, a sentinel for i32) and every
element is checked; padding of pitched matrices and gaps between batches are
checked to be untouched. f16/bf16 references use the rounded inputs.
"""

import numpy as np
import pytest

import tensorcore as tc
from conftest import (ELEMENT_SIZE, TOLERANCE, assert_close, np_dtype, poison_byte, random_array,
                      to_f64)

# (dtype, accum) pairs the ABI supports.
CONFIGS = [("f32", "f32"), ("f16", "f32"), ("f16", "f16"), ("bf16", "f32"), ("i8", "i32")]
ODD = [1, 7, 33, 129]


def out_dtype(dtype):
    return "i32" if dtype == "i8" else dtype


def rtol(dtype, accum, K):
    if accum == "f16":  # f16 accumulation may round every partial sum (GPUs do)
        return TOLERANCE["f16"] + K * 2.0 ** -11
    return TOLERANCE[dtype]


def wrap_i32(x):
    return ((np.asarray(x, dtype=np.int64) + 2**31) % 2**32) - 2**31


def stored(rng, rows, cols, ld, dtype, fill=None):
    """A rows x cols matrix at pitch ld (>= cols): returns (values, padded
    storage). Padding and unfilled values hold the dtype's poison bytes."""
    pitch = ld or cols
    raw = np.full(rows * pitch * ELEMENT_SIZE[dtype], poison_byte(dtype), dtype=np.uint8)
    storage = raw.view(np_dtype(dtype)).reshape(rows, pitch)
    values = random_array(rng, (rows, cols), dtype) if fill is None else fill
    if values is not False:
        storage[:, :cols] = values
    return values, storage


def reference(dtype, a, b, c, alpha, beta, ta, tb):
    """alpha * op(A) @ op(B) + beta * C in float64 (exact int64 then int32 wrap for i8)."""
    if dtype == "i8":
        opa = np.asarray(a, np.int64).T if ta else np.asarray(a, np.int64)
        opb = np.asarray(b, np.int64).T if tb else np.asarray(b, np.int64)
        acc = wrap_i32(opa @ opb)
        res = int(alpha) * acc + (int(beta) * np.asarray(c, np.int64) if beta else 0)
        return wrap_i32(res), None
    a64, b64 = to_f64(a, dtype), to_f64(b, dtype)
    opa, opb = (a64.T if ta else a64), (b64.T if tb else b64)
    ref = alpha * (opa @ opb)
    scale = abs(alpha) * (np.abs(opa) @ np.abs(opb))
    if beta:
        c64 = to_f64(c, dtype)
        ref = ref + beta * c64
        scale = scale + abs(beta) * np.abs(c64)
    return ref, scale


def run_case(ctx, rng, dtype, accum, M, N, K, ta=False, tb=False, alpha=1.0, beta=0.0, pad=(0, 0, 0),
             entry="gemm", stream=None):
    """Runs one GEMM through `entry` and checks every element and the padding."""
    odt = out_dtype(dtype)
    a_rows, a_cols = (K, M) if ta else (M, K)
    b_rows, b_cols = (N, K) if tb else (K, N)
    lda, ldb, ldc = (cols + p if p else 0 for cols, p in zip((a_cols, b_cols, N), pad))
    a, a_store = stored(rng, a_rows, a_cols, lda, dtype)
    b, b_store = stored(rng, b_rows, b_cols, ldb, dtype)
    # beta == 0 must not read C: leave it poisoned (NaN / sentinel).
    c, c_store = stored(rng, M, N, ldc, odt, fill=None if beta else False)
    A, B, C = (ctx.buffer_from_array(x) for x in (a_store, b_store, c_store))
    kw = dict(dtype=dtype, accum=accum, alpha=alpha, beta=beta, transpose_a=ta, transpose_b=tb,
              lda=lda, ldb=ldb, ldc=ldc)
    if entry == "gemm":
        ctx.gemm(A, B, C, M, N, K, **kw)
    elif entry == "raw":
        tc.gemm(ctx, A, B, C, M, N, K, **kw)
    elif entry == "async":
        ctx.gemm_async(A, B, C, M, N, K, stream, **kw)
        stream.sync()
    else:
        ctx.gemm_batched(A, B, C, 1, M, N, K, **kw)
    out = C.to_numpy(c_store.shape, np_dtype(odt))
    ref, scale = reference(dtype, a, b, c, alpha, beta, ta, tb)
    what = "%s %s/%s M=%d N=%d K=%d ta=%d tb=%d alpha=%g beta=%g pad=%s" % (
        entry, dtype, accum, M, N, K, ta, tb, alpha, beta, pad)
    if dtype == "i8":
        np.testing.assert_array_equal(out[:, :N], ref, err_msg=what)
    else:
        assert_close(to_f64(out[:, :N], odt), ref, scale, rtol(dtype, accum, K), what, out_dtype=odt)
    if ldc:  # padding untouched, bit for bit
        assert out[:, N:].tobytes() == c_store[:, N:].tobytes(), what + ": C padding written"
    for x in (A, B, C):
        x.close()


def shapes(rng, n):
    """n (M, N, K) triples: odd sizes plus one random size each."""
    out = [tuple(int(v) for v in rng.choice(ODD, 3)) for _ in range(n - 1)]
    out.append(tuple(int(v) for v in rng.integers(1, 70, 3)))
    return out


def scalars(rng, dtype):
    if dtype == "i8":
        return int(rng.integers(-3, 4)) or 2, int(rng.integers(-3, 4)) or -1
    return float(rng.uniform(-2, 2)), float(rng.uniform(-2, 2))


@pytest.mark.parametrize("dtype,accum", CONFIGS)
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm(ctx, rng, dtype, accum, ta, tb):
    alpha, beta = scalars(rng, dtype)
    cases = shapes(rng, 3)
    run_case(ctx, rng, dtype, accum, *cases[0], ta, tb)                       # alpha 1, beta 0, packed
    run_case(ctx, rng, dtype, accum, *cases[1], ta, tb, alpha, beta)          # alpha, beta
    pad = tuple(int(p) for p in rng.integers(1, 6, 3))
    run_case(ctx, rng, dtype, accum, *cases[2], ta, tb, alpha, beta, pad)     # pitched
    run_case(ctx, rng, dtype, accum, *cases[2], ta, tb, alpha, 0.0, pad)      # pitched, C poisoned


@pytest.mark.parametrize("dtype,accum", CONFIGS)
def test_gemm_entry_points_agree(ctx, rng, dtype, accum):
    """The raw function, gemm_batched with batch 1 and gemm_async give the same results."""
    M, N, K = shapes(rng, 1)[0]
    alpha, beta = scalars(rng, dtype)
    run_case(ctx, rng, dtype, accum, M, N, K, alpha=alpha, beta=beta, entry="raw")
    run_case(ctx, rng, dtype, accum, M, N, K, alpha=alpha, beta=beta, entry="batched")
    with ctx.stream() as s:
        run_case(ctx, rng, dtype, accum, M, N, K, True, False, alpha, beta, (2, 0, 3), entry="async", stream=s)


def test_gemm_larger_f32(ctx, rng):
    """A size where OpenBLAS blocks and threads (not just the small-matrix path)."""
    run_case(ctx, rng, "f32", "f32", 300, 257, 511, alpha=0.5, beta=-1.5)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_gemm_own_f32_kernels(cpu_ctx, rng, monkeypatch, dtype):
    """TC_CPU_BLAS=0 (read at every call): the f32 products run on tensorcore's own kernels, as in a build
    without a BLAS, whatever this build links; f16/bf16 reach them where they are widened to f32."""
    monkeypatch.setenv("TC_CPU_BLAS", "0")
    alpha, beta = scalars(rng, dtype)
    for ta, tb in [(False, False), (True, False), (False, True), (True, True)]:
        M, N, K = shapes(rng, 1)[0]
        pad = tuple(int(p) for p in rng.integers(0, 6, 3))
        run_case(cpu_ctx, rng, dtype, "f32", M, N, K, ta, tb, alpha, beta, pad)
        run_case(cpu_ctx, rng, dtype, "f32", M, N, K, ta, tb, alpha, 0.0, pad)   # C poisoned
    run_case(cpu_ctx, rng, dtype, "f32", 300, 257, 511, alpha=0.5, beta=-1.5)     # threaded, several blocks


@pytest.mark.parametrize("dtype,accum", CONFIGS)
def test_k_zero_gives_beta_c(ctx, rng, dtype, accum):
    odt = out_dtype(dtype)
    M, N = 5, 9
    A, B = ctx.buffer(8), ctx.buffer(8)  # not read: K == 0 needs no A/B storage
    c = random_array(rng, (M, N), odt)
    C = ctx.buffer_from_array(c)
    beta = 3 if dtype == "i8" else 0.5
    ctx.gemm(A, B, C, M, N, 0, dtype=dtype, accum=accum, alpha=2, beta=beta)
    out = C.to_numpy((M, N), np_dtype(odt))
    if dtype == "i8":
        np.testing.assert_array_equal(out, wrap_i32(3 * c.astype(np.int64)))
    else:
        assert_close(to_f64(out, odt), beta * to_f64(c, odt), np.abs(to_f64(c, odt)), TOLERANCE[odt])
    # beta == 0 with K == 0 writes zeros without reading C (NaN / sentinel in C).
    C.write(np.full(C.nbytes, poison_byte(odt), np.uint8))
    ctx.gemm(A, B, C, M, N, 0, dtype=dtype, accum=accum, beta=0)
    assert not to_f64(C.to_numpy((M, N), np_dtype(odt)), odt).any()


def test_i8_wraps_like_int32(ctx):
    """Products past int32 wrap (two's complement), the same for K > 0 and K == 0."""
    K = 64
    a = np.full((1, K), -128, np.int8)
    b = np.full((K, 1), -128, np.int8)  # dot = 64 * 16384 = 2^20
    alpha = 2**12 + 1                   # alpha * dot = 2^32 + 2^20 -> wraps to 2^20
    c = np.array([[2**30 + 3]], np.int32)
    A, B, C = ctx.buffer_from_array(a), ctx.buffer_from_array(b), ctx.buffer_from_array(c)
    ctx.gemm(A, B, C, 1, 1, K, dtype="i8", accum="i32", alpha=alpha, beta=5)
    want = wrap_i32(alpha * 2**20 + 5 * (2**30 + 3))
    assert C.to_numpy((1, 1), np.int32)[0, 0] == want
    beta = 2**30 + 1
    C.write(c)
    ctx.gemm(A, B, C, 1, 1, 0, dtype="i8", accum="i32", alpha=1, beta=beta)
    assert C.to_numpy((1, 1), np.int32)[0, 0] == wrap_i32(beta * (2**30 + 3))


def test_allow_tf32_is_accepted(ctx, rng):
    """allow_tf32 may speed f32 up on a GPU; results stay within TF32 error (exact f32 on the CPU)."""
    M, N, K = 33, 17, 65
    a, b = random_array(rng, (M, K), "f32"), random_array(rng, (K, N), "f32")
    A, B, C = ctx.buffer_from_array(a), ctx.buffer_from_array(b), ctx.buffer(M * N * 4)
    ctx.gemm(A, B, C, M, N, K, dtype="f32", accum="f32", allow_tf32=True)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    tol = TOLERANCE["f32"] if ctx.device_info().family == "cpu" else 2e-3
    assert_close(C.to_numpy((M, N), np.float32), ref, scale, tol)


@pytest.mark.parametrize("dtype,accum", CONFIGS)
def test_gemm_async_chain_on_stream(ctx, rng, dtype, accum):
    """Several async GEMMs on one stream run in order: each reads the previous output."""
    if dtype == "i8":
        pytest.skip("the chain feeds an output back as an input; i8 outputs are i32")
    n, steps = 24, 5
    x0 = random_array(rng, (n, n), dtype, scale=0.5)
    mats = [random_array(rng, (n, n), dtype, scale=1 / np.sqrt(n)) for _ in range(steps)]
    X = [ctx.buffer_from_array(x0)] + [ctx.buffer(n * n * ELEMENT_SIZE[dtype]) for _ in range(steps)]
    Ms = [ctx.buffer_from_array(m) for m in mats]
    for X_ in X[1:]:
        X_.write(np.full(X_.nbytes, 0xFF, np.uint8))
    with ctx.stream() as s:
        for i in range(steps):
            ctx.gemm_async(X[i], Ms[i], X[i + 1], n, n, n, s, dtype=dtype, accum=accum)
        s.sync()
        # reference, rounding every intermediate to the dtype as the library stores it
        x = x0
        for i in range(steps):
            prev = to_f64(x, dtype)
            ref = prev @ to_f64(mats[i], dtype)
            scale = np.abs(prev) @ np.abs(to_f64(mats[i], dtype))
            out = X[i + 1].to_numpy((n, n), np_dtype(dtype))
            assert_close(to_f64(out, dtype), ref, scale, rtol(dtype, accum, n), "step %d" % i, out_dtype=dtype)
            x = out
    assert ctx.last_backend_name() in ("portable_cpu", "cuda")


@pytest.mark.parametrize("dtype,accum", CONFIGS)
@pytest.mark.parametrize("layout", ["packed", "strided"])
def test_gemm_batched(ctx, rng, dtype, accum, layout):
    odt = out_dtype(dtype)
    batch = int(rng.integers(2, 5))
    M, N, K = (int(v) for v in rng.choice([1, 7, 33], 3))
    ta, tb = bool(rng.integers(2)), bool(rng.integers(2))
    alpha, beta = scalars(rng, dtype)
    a_shape = (K, M) if ta else (M, K)
    b_shape = (N, K) if tb else (K, N)
    if layout == "packed":
        sa = sb = sc = 0
        ga = gb = gc = 0
    else:  # gaps between batches, poisoned; C's must stay untouched
        ga, gb, gc = (int(g) for g in rng.integers(1, 9, 3))
        sa, sb, sc = M * K + ga, K * N + gb, M * N + gc
    a = [random_array(rng, a_shape, dtype) for _ in range(batch)]
    b = [random_array(rng, b_shape, dtype) for _ in range(batch)]
    c = [random_array(rng, (M, N), odt) for _ in range(batch)]

    def pack(mats, gap, dt, fill_values=True):
        per = mats[0].size + gap
        raw = np.full(per * len(mats) * ELEMENT_SIZE[dt], poison_byte(dt), np.uint8).view(np_dtype(dt))
        if fill_values:
            for i, m in enumerate(mats):
                raw[i * per:i * per + m.size] = m.ravel()
        return raw

    c_store = pack(c, gc, odt, fill_values=bool(beta))
    A, B, C = ctx.buffer_from_array(pack(a, ga, dtype)), ctx.buffer_from_array(pack(b, gb, dtype)), \
        ctx.buffer_from_array(c_store)
    kw = dict(dtype=dtype, accum=accum, alpha=alpha, beta=beta, transpose_a=ta, transpose_b=tb,
              stride_a=sa, stride_b=sb, stride_c=sc)
    if layout == "strided":  # also the async form on a stream
        with ctx.stream() as s:
            ctx.gemm_batched(A, B, C, batch, M, N, K, stream=s, **kw)
    else:
        ctx.gemm_batched(A, B, C, batch, M, N, K, **kw)
    out = C.to_numpy(c_store.shape, np_dtype(odt))
    per = M * N + gc
    for i in range(batch):
        got = out[i * per:i * per + M * N].reshape(M, N)
        ref, scale = reference(dtype, a[i], b[i], c[i], alpha, beta, ta, tb)
        what = "batch %d of %d (%s, M=%d N=%d K=%d)" % (i, batch, layout, M, N, K)
        if dtype == "i8":
            np.testing.assert_array_equal(got, ref, err_msg=what)
        else:
            assert_close(to_f64(got, odt), ref, scale, rtol(dtype, accum, K), what, out_dtype=odt)
        gap = out[i * per + M * N:(i + 1) * per]
        assert gap.tobytes() == c_store[i * per + M * N:(i + 1) * per].tobytes(), what + ": gap written"


def test_string_aliases_and_constants(ctx, rng):
    """dtype/accum accept TC_DTYPE_* constants, any-case names and NumPy dtypes alike."""
    M, N, K = 7, 5, 3
    a, b = random_array(rng, (M, K), "f16"), random_array(rng, (K, N), "f16")
    A, B = ctx.buffer_from_array(a), ctx.buffer_from_array(b)
    results = []
    for dtype, accum in [("f16", "f32"), ("F16", "FP32"), (tc.TC_DTYPE_F16, tc.TC_DTYPE_F32),
                         (np.float16, np.float32), ("TC_DTYPE_F16", "float32")]:
        C = ctx.buffer(M * N * 2)
        ctx.gemm(A, B, C, M, N, K, dtype=dtype, accum=accum)
        results.append(C.to_numpy((M, N), "f16"))
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])
