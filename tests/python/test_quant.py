"""Quantized weights: sizes, quantisers bit-identical to gguf-py's (which
reproduces ggml's reference quantisers), dequantisation equal to gguf-py's
for every format, and the GEMV against a float64 NumPy GEMV over the
dequantised weights, on every instruction-set path and every device (the
`ctx` fixture: cpu, and cuda where present, whose quantisers must produce the
CPU's bytes exactly). Outputs are poisoned first and every element checked;
bad arguments leave the buffers as they were.

gguf-py (PyPI `gguf`) is optional: the cross-checks skip without it.
"""

import numpy as np
import pytest

import tensorcore as tc
from conftest import TOLERANCE, assert_close, np_dtype, poison, random_array, to_f64

FORMATS = ["q4_0", "q8_0", "q4_1", "q4_k", "q5_k", "q6_k", "q8_k", "f16", "bf16", "f32", "q5_0", "q5_1"]
BLOCK = {"q4_0": (32, 18), "q8_0": (32, 34), "q4_1": (32, 20), "q4_k": (256, 144), "q5_k": (256, 176),
         "q6_k": (256, 210), "q8_k": (256, 292), "f16": (1, 2), "bf16": (1, 2), "f32": (1, 4), "q5_0": (32, 22),
         "q5_1": (32, 24)}
ISAS = ["", "avx512", "avx2", "portable"]  # "" = the best the processor has; avx512: without VNNI


def gguf_quants():
    return pytest.importorskip("gguf.quants")


def ggml_type(fmt):
    from gguf.constants import GGMLQuantizationType as T
    return {"q4_0": T.Q4_0, "q8_0": T.Q8_0, "q4_1": T.Q4_1, "q4_k": T.Q4_K, "q5_k": T.Q5_K, "q6_k": T.Q6_K,
            "q8_k": T.Q8_K, "f16": T.F16, "bf16": T.BF16, "f32": T.F32, "q5_0": T.Q5_0, "q5_1": T.Q5_1}[fmt]


def half_bytes(values):
    return np.asarray(values, np.float16).view(np.uint8).reshape(-1, 2)


def random_weights(rng, fmt, N, K, scale=0.01):
    """Random bytes of an N x K matrix with finite scales of about `scale`:
    every bit pattern of the quants is valid, so random bytes exercise every
    code path of the decoders."""
    if fmt == "f16":
        return (rng.standard_normal((N, K)) * 0.5).astype(np.float16).view(np.uint8).reshape(N, -1)
    if fmt == "bf16":
        bits = (rng.standard_normal((N, K)).astype(np.float32) * 0.5).view(np.uint32) >> 16
        return bits.astype(np.uint16).view(np.uint8).reshape(N, -1)
    if fmt == "f32":
        return (rng.standard_normal((N, K)) * 0.5).astype(np.float32).view(np.uint8).reshape(N, -1)
    be, bb = BLOCK[fmt]
    nb = N * K // be
    raw = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    d = half_bytes(rng.uniform(0.5, 1.5, nb) * scale)
    if fmt in ("q4_0", "q8_0", "q5_0"):
        raw[:, 0:2] = d
    elif fmt in ("q4_1", "q4_k", "q5_k", "q5_1"):
        raw[:, 0:2] = d
        raw[:, 2:4] = half_bytes(rng.uniform(0.0, 1.0, nb) * scale)
    elif fmt == "q6_k":
        raw[:, 208:210] = d
    elif fmt == "q8_k":
        raw[:, 0:4] = (rng.uniform(0.5, 1.5, nb) * scale).astype(np.float32).view(np.uint8).reshape(nb, 4)
    return raw.reshape(N, -1)


# Scale fields (byte offset of d, of m or None) of the 32-weight formats.
SCALES = {"q4_0": (0, None), "q8_0": (0, None), "q4_1": (0, 2), "q5_0": (0, None), "q5_1": (0, 2)}


def with_edge_blocks(w, fmt):
    """w with its first blocks set to the edge cases of a 32-weight format:
    scales of +-0, the smallest subnormal, the largest finite and negative
    halves, and quants (fifth bits included) all clear, all set or
    alternating."""
    if fmt not in SCALES:
        return w
    be, bb = BLOCK[fmt]
    blocks = w.reshape(-1, bb).copy()
    dpos, mpos = SCALES[fmt]
    first_q = max(dpos, mpos or 0) + 2
    scales = [0.0, -0.0, 2.0 ** -24, -2.0 ** -24, 65504.0, -65504.0, 1.0, -0.5]
    patterns = [0x00, 0xFF, 0x55, 0xAA]
    for i in range(min(len(blocks), len(scales) * len(patterns))):
        blocks[i, dpos:dpos + 2] = half_bytes([scales[i % len(scales)]])[0]
        if mpos is not None:
            blocks[i, mpos:mpos + 2] = half_bytes([scales[(i + 3) % len(scales)]])[0]
        blocks[i, first_q:] = patterns[(i // len(scales)) % len(patterns)]
    return blocks.reshape(w.shape)


def dequant_q8_k(w, N, K):
    """Q8_K by hand (gguf-py has no Q8_K decoder): f32 d, 256 int8, 16 int16 sums."""
    blocks = w.reshape(-1, 292)
    d = blocks[:, 0:4].copy().view(np.float32)
    q = blocks[:, 4:260].copy().view(np.int8).astype(np.float32)
    return (d * q).reshape(N, K)


def reference_weights(w, fmt, N, K):
    if fmt == "q8_k":
        return dequant_q8_k(w, N, K)
    gq = gguf_quants()
    if fmt == "bf16":
        return (w.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(N, K)
    return np.asarray(gq.dequantize(np.ascontiguousarray(w), ggml_type(fmt)), np.float32).reshape(N, K)


@pytest.fixture
def isa(request, monkeypatch):
    value = getattr(request, "param", "")
    if value:
        monkeypatch.setenv("TC_CPU_ISA", value)
    else:
        monkeypatch.delenv("TC_CPU_ISA", raising=False)
    return value


# ---- sizes and names -----------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_quantized_size_is_exact(fmt):
    be, bb = BLOCK[fmt]
    assert tc.quant_block_info(fmt) == (be, bb)
    for N, K in [(1, be), (3, 4 * be), (4096, 4096 if be <= 256 else be)]:
        assert tc.quantized_size(fmt, N, K) == N * (K // be) * bb
    assert tc.quantized_size(tc.QUANT_ALIASES[fmt], 2, 512) == tc.quantized_size(fmt.upper(), 2, 512)
    if be > 1:
        with pytest.raises(tc.TensorcoreError) as e:
            tc.quantized_size(fmt, 1, be + 1)
        assert e.value.status == tc.TC_ERR_INVALID_SHAPE and "multiple" in str(e.value)
    assert tc.quant_name(fmt) == fmt
    if fmt != "q8_k":
        assert tc.gguf_type_to_quant(tc.quant_to_gguf_type(fmt)) == tc.quant_code(fmt)


def test_quantized_size_errors():
    for N, K in [(0, 32), (1, 0), (-1, 32), (2**62, 2**20)]:
        with pytest.raises(tc.TensorcoreError) as e:
            tc.quantized_size("q4_0", N, K)
        assert e.value.status == tc.TC_ERR_INVALID_SHAPE
    with pytest.raises(tc.TensorcoreError) as e:
        tc.quantized_size("q3_k", 1, 256)
    assert e.value.status == tc.TC_ERR_UNSUPPORTED_DTYPE
    with pytest.raises(tc.TensorcoreError) as e:
        tc.quantized_size(99, 1, 32)
    assert e.value.status == tc.TC_ERR_UNSUPPORTED_DTYPE
    assert tc.quant_name(99) == "unknown"


# ---- quantisers -------------------------------------------------------------------------------

def edge_blocks(rng):
    """Rows of 32-element blocks covering the cases where a quantiser can go
    wrong: zeros, ties of +a/-a in both orders, repeated maxima, values on the
    rounding boundaries of the grid, large values (scales beyond f16), tiny
    values (subnormal scales) and wide dynamic range."""
    rows = [np.zeros(32), np.full(32, 3.0), np.full(32, -3.0)]
    tie = np.zeros(32)
    tie[3], tie[17] = 2.0, -2.0
    rows += [tie, -tie]
    base = rng.standard_normal(32)
    rows.append(np.where(np.arange(32) % 2 == 0, np.abs(base).max(), base))
    for sign in (1, -1):  # x = (k + 1/2) * amax/127 and multiples of d/2 for Q4_0
        r = np.arange(32) - 15.5
        r[0] = sign * 127
        rows.append(r / 127 * 7.0)
        q = (np.arange(32) % 17 - 8) * 0.5
        q[5] = sign * -8.0
        rows.append(q * 0.25)
    rows += [rng.standard_normal(32) * 1e5, rng.standard_normal(32) * 6e4, rng.standard_normal(32) * 1e-6,
             rng.standard_normal(32) * 1e-9, rng.standard_normal(32) * np.logspace(-6, 3, 32)]
    return np.array(rows, dtype=np.float32)


def quantize(ctx, src, fmt, N, K, dtype="f32"):
    """W_quant's bytes; on a device other than the CPU they must also equal
    the CPU's bytes for the same input."""
    W = ctx.buffer_from_array(np.ascontiguousarray(src))
    Q = ctx.buffer_from_array(poison(tc.quantized_size(fmt, N, K)))
    ctx.quantize_weights(W, Q, fmt, N, K, dtype=dtype)
    got = Q.to_numpy((tc.quantized_size(fmt, N, K),), np.uint8)
    if ctx.device not in (None, "cpu"):
        with tc.Context("cpu") as cpu:
            want = quantize(cpu, src, fmt, N, K, dtype)
        mismatch = np.flatnonzero(got != want)
        assert mismatch.size == 0, "%s on %s: %d bytes differ from the CPU's, first at %d" % (
            fmt, ctx.device, mismatch.size, mismatch[0])
    return got


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q4_1", "q5_0", "q5_1"])
def test_quantizers_match_gguf_bit_for_bit(ctx, rng, fmt):
    gq = gguf_quants()
    K = 256
    rows = [rng.standard_normal(K) * s for s in (1e-3, 1.0, 30.0)]
    rows += [rng.uniform(-1, 1, K), rng.integers(-8, 8, K) * 0.125]  # many exact ties
    edge = edge_blocks(rng).reshape(-1)
    edge = np.concatenate([edge, np.zeros((-edge.size) % K)]).reshape(-1, K)
    x = np.concatenate([np.array(rows), edge]).astype(np.float32)
    N = x.shape[0]
    ours = quantize(ctx, x, fmt, N, K)
    with np.errstate(over="ignore"):  # scales beyond f16 become inf, as in ggml
        theirs = np.asarray(gq.quantize(x, ggml_type(fmt)), np.uint8).reshape(-1)
    mismatch = np.flatnonzero(ours != theirs)
    assert mismatch.size == 0, "%d bytes differ, first at %d (block %d)" % (
        mismatch.size, mismatch[0], mismatch[0] // BLOCK[fmt][1])


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
@pytest.mark.parametrize("src", ["f16", "bf16"])
def test_quantizers_from_half_sources(ctx, rng, fmt, src):
    gq = gguf_quants()
    N, K = 16, 128
    x = random_array(rng, (N, K), src, scale=2.0)
    ours = quantize(ctx, x, fmt, N, K, dtype=src)
    theirs = np.asarray(gq.quantize(to_f64(x, src).astype(np.float32), ggml_type(fmt)), np.uint8).reshape(-1)
    assert np.array_equal(ours, theirs)


def test_plain_formats_round_like_numpy(ctx, rng):
    gq = gguf_quants()
    x = (rng.standard_normal((4, 64)) * 100).astype(np.float32)
    x[0, :4] = [np.inf, -np.inf, 1e-40, 70000.0]
    with np.errstate(over="ignore"):
        assert np.array_equal(quantize(ctx, x, "f16", 4, 64).view(np.float16), x.astype(np.float16).reshape(-1))
    assert np.array_equal(quantize(ctx, x, "bf16", 4, 64), np.asarray(gq.quantize(x, ggml_type("bf16")),
                                                                         np.uint8).reshape(-1))
    assert np.array_equal(quantize(ctx, x, "f32", 4, 64).view(np.float32), x.reshape(-1))


@pytest.mark.parametrize("fmt", ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q8_k", "f16", "bf16", "f32"])
@pytest.mark.parametrize("src", ["f32", "f16", "bf16"])
def test_quantizers_every_format_and_source(ctx, rng, fmt, src):
    # Every quantisable format from every source dtype, odd N, wide range of
    # magnitudes and exact ties; on a GPU, byte-equal to the CPU (quantize()).
    N, K = 7, 512
    x = random_array(rng, (N, K), src, scale=3.0)
    x[1] = (rng.integers(-8, 8, K) * 0.125).astype(x.dtype)
    x[2] = 0
    x[3] = (rng.standard_normal(K) * np.logspace(-6, 3, K)).astype(x.dtype)
    got = quantize(ctx, x, fmt, N, K, dtype=src)
    if fmt in ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0"):
        gq = gguf_quants()
        with np.errstate(over="ignore"):
            want = np.asarray(gq.quantize(to_f64(x, src).astype(np.float32), ggml_type(fmt)), np.uint8).reshape(-1)
        assert np.array_equal(got, want)


def test_quantize_unsupported_and_bad_arguments(ctx):
    cpu_ctx = ctx
    src = cpu_ctx.buffer_from_array(np.ones((2, 256), np.float16))
    dst = cpu_ctx.buffer_from_array(poison(2 * 210))
    for fmt, status in [("q6_k", tc.TC_ERR_UNSUPPORTED), ("q4_k", tc.TC_ERR_UNSUPPORTED)]:
        with pytest.raises(tc.TensorcoreError) as e:
            cpu_ctx.quantize_weights(src, dst, fmt, 2, 256)
        assert e.value.status == status
    small = cpu_ctx.buffer_from_array(poison(10))
    for args, status in [((src, small, "q8_0", 2, 256), tc.TC_ERR_INVALID_ARG),
                         ((small, dst, "q8_0", 2, 256), tc.TC_ERR_INVALID_ARG),
                         ((src, dst, "q8_0", 2, 250), tc.TC_ERR_INVALID_SHAPE),
                         ((src, dst, "q8_0", 0, 256), tc.TC_ERR_INVALID_SHAPE),
                         ((src, src, "q8_0", 1, 256), tc.TC_ERR_INVALID_ARG)]:  # output overlaps input
        with pytest.raises(tc.TensorcoreError) as e:
            cpu_ctx.quantize_weights(*args)
        assert e.value.status == status, args
    with pytest.raises(tc.TensorcoreError) as e:
        cpu_ctx.quantize_weights(src, dst, "q8_0", 2, 256, dtype="i8")
    assert e.value.status == tc.TC_ERR_UNSUPPORTED_DTYPE
    assert (dst.to_numpy((2 * 210,), np.uint8) == 0xFF).all()
    assert (src.to_numpy((2, 256), np.float16) == 1).all()


# ---- dequantisation -----------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantize_matches_gguf_bit_for_bit(ctx, rng, fmt):
    cpu_ctx = ctx
    N, K = 5, 512
    w = with_edge_blocks(random_weights(rng, fmt, N, K), fmt)
    ref = reference_weights(w, fmt, N, K)
    W = cpu_ctx.buffer_from_array(w)
    Y = cpu_ctx.buffer_from_array(poison(N * K * 4))
    cpu_ctx.dequantize_weights(W, Y, fmt, N, K)
    got = Y.to_numpy((N, K), np.float32)
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))
    # The whole matrix in f16 and bf16: the f32 weights rounded to nearest even.
    for dtype in ("f16", "bf16"):
        Yh = cpu_ctx.buffer_from_array(poison(N * K * 2))
        cpu_ctx.dequantize_weights(W, Yh, fmt, N, K, dtype=dtype)
        with np.errstate(over="ignore"):  # the largest edge scales overflow f16, as ours must
            want = ref.astype(np_dtype(dtype))
        assert np.array_equal(Yh.to_numpy((N, K), np_dtype(dtype)).view(np.uint16), want.view(np.uint16)), dtype
    # Sources at 4 and 8 bytes past an aligned start: a GPU's decoders load
    # them with narrower words than a 16-byte aligned K-quant block (offsets
    # below a format's own alignment: test_gemv_misaligned_buffers).
    for offset in (4, 8):
        base, view = view_at(cpu_ctx, w, offset)
        for dtype in ("f32", "f16"):
            Yo = cpu_ctx.buffer_from_array(poison(N * K * (4 if dtype == "f32" else 2)))
            cpu_ctx.dequantize_weights(view, Yo, fmt, N, K, dtype=dtype)
            with np.errstate(over="ignore"):
                want = ref.astype(np_dtype(dtype))
            got = Yo.to_numpy((N, K), np_dtype(dtype))
            assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), "%s at offset %d" % (dtype, offset)
            Yo.close()
        view.close()
        base.close()
    # One row from an offset (an embedding lookup), in f16 and bf16.
    for dtype in ("f16", "bf16"):
        Y2 = cpu_ctx.buffer_from_array(poison(K * 2))
        cpu_ctx.dequantize_weights(W, Y2, fmt, 1, K, dtype=dtype, row_offset=3)
        row = to_f64(Y2.to_numpy((1, K), np_dtype(dtype)), dtype)
        assert_close(row, ref[3:4], np.abs(ref[3:4]), 2.0 ** -8, "row 3 as %s" % dtype, out_dtype=dtype)
    with pytest.raises(tc.TensorcoreError) as e:
        cpu_ctx.dequantize_weights(W, Y, fmt, 1, K, row_offset=N)  # past the last row
    assert e.value.status == tc.TC_ERR_INVALID_ARG


def test_quantized_matrix_wrapper_dequantizes(ctx, rng):
    cpu_ctx = ctx
    N, K = 7, 64
    w = random_weights(rng, "q8_0", N, K)
    q = tc.QuantizedMatrix(N, K, "q8_0", buffer=cpu_ctx.buffer_from_array(w))
    ref = reference_weights(w, "q8_0", N, K)
    assert np.array_equal(q.dequantize(), ref)
    assert np.array_equal(q.dequantize(slice(2, 5)), ref[2:5])
    assert q.gguf_type == tc.TC_GGML_TYPE_Q8_0 and q.n_bytes == w.nbytes


# ---- GEMV ----------------------------------------------------------------------------------------

def run_gemv(ctx, rng, fmt, M, N, K, dtype, stream=None, fused=False):
    w = random_weights(rng, fmt, N, K)
    wd = reference_weights(w, fmt, N, K).astype(np.float64)
    x = random_array(rng, (M, K), dtype)
    x64 = to_f64(x, dtype)
    X, W = ctx.buffer_from_array(x), ctx.buffer_from_array(w)
    esize = 4 if dtype == "f32" else 2
    Y = ctx.buffer_from_array(poison(M * N * esize))
    if fused:
        gamma = random_array(rng, (K,), dtype, scale=0.5)
        g64 = to_f64(gamma, dtype)
        G = ctx.buffer_from_array(gamma)
        eps = 1e-5
        ctx.fused_rmsnorm_gemv_quantized(X, G, W, Y, fmt, M, N, K, eps=eps, dtype=dtype)
        rstd = 1.0 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + eps)
        x64 = x64 * rstd * g64
    elif stream is not None:
        ctx.gemv_quantized_async(X, W, Y, fmt, M, N, K, stream, dtype=dtype)
        stream.sync()
    else:
        ctx.gemv_quantized(X, W, Y, fmt, M, N, K, dtype=dtype)
    out = to_f64(Y.to_numpy((M, N), np_dtype(dtype)), dtype)
    ref = x64 @ wd.T
    scale = np.abs(x64) @ np.abs(wd).T
    assert_close(out, ref, scale, TOLERANCE[dtype], "%s M=%d N=%d K=%d %s" % (fmt, M, N, K, dtype))
    # Inputs are untouched.
    assert np.array_equal(W.to_numpy(w.shape, np.uint8), w)


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("fmt", FORMATS)
def test_gemv_every_format_against_float64(cpu_ctx, rng, isa, fmt):
    for M in (1, 2, 3, 4, 5, 9, 17):
        run_gemv(cpu_ctx, rng, fmt, M, 33, 512, "f32")
    for M in (1, 3, 17):
        run_gemv(cpu_ctx, rng, fmt, M, 17, 256, "f16")


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q4_k", "q6_k", "q5_0", "q5_1"])
def test_gemv_dtypes_and_threads(ctx, rng, fmt, dtype):
    # N large enough that the rows are split across threads; odd N.
    run_gemv(ctx, rng, fmt, 1, 771, 1024, dtype)
    run_gemv(ctx, rng, fmt, 4, 129, 1024, dtype)


@pytest.mark.parametrize("M", [1, 2, 9, 16, 37])
@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q4_k", "q6_k", "q5_0", "q4_1", "q5_1"])
def test_gemv_int8_activation_error_bound(ctx, rng, fmt, M):
    """f16 activations against Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q6_K may be quantised to 8 bits per block
    of 32 (the CPU's AVX512-VNNI path; on CUDA the one-row __dp4a kernels of
    Q4_0 / Q8_0 / Q4_K, the exact kernels otherwise): each
    activation moves by at most half a step of max|x| / 127 of its block.
    Outlier-heavy activations (one large value per block) make that error
    visible; it must stay within the bound, and the f32 path on the same data
    stays exact."""
    cpu_ctx = ctx
    N, K = 48, 1024
    w = random_weights(rng, fmt, N, K)
    wd = reference_weights(w, fmt, N, K).astype(np.float64)
    x = (rng.standard_normal((M, K)) * 0.05).astype(np.float16)
    x[:, ::32] = (rng.choice([-1, 1], (M, K // 32)) * rng.uniform(20, 40, (M, K // 32))).astype(np.float16)
    x64 = x.astype(np.float64)
    ref = x64 @ wd.T
    step = np.repeat(np.abs(x64).reshape(M, -1, 32).max(axis=2) / 127, 32, axis=1)  # per activation
    bound = (step / 2 * 1.0001) @ np.abs(wd).T + 2.0 ** -10 * np.abs(ref) + 1e-6 * (np.abs(x64) @ np.abs(wd).T)
    X, W = cpu_ctx.buffer_from_array(x), cpu_ctx.buffer_from_array(w)
    Y = cpu_ctx.buffer_from_array(poison(M * N * 2))
    cpu_ctx.gemv_quantized(X, W, Y, fmt, M, N, K)
    out = Y.to_numpy((M, N), np.float16).astype(np.float64)
    assert np.isfinite(out).all() and (np.abs(out - ref) <= bound).all(), np.max(np.abs(out - ref) / bound)
    X32 = cpu_ctx.buffer_from_array(x.astype(np.float32))
    Y32 = cpu_ctx.buffer_from_array(poison(M * N * 4))
    cpu_ctx.gemv_quantized(X32, W, Y32, fmt, M, N, K, dtype="f32")
    assert_close(Y32.to_numpy((M, N), np.float32), ref, np.abs(x64) @ np.abs(wd).T, TOLERANCE["f32"], "f32 path")


AMX_FORMATS = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k"]


@pytest.mark.parametrize("fmt", AMX_FORMATS)
def test_gemv_many_rows_int8_tiles(cpu_ctx, rng, fmt, monkeypatch):
    """f16/bf16 products of 8 or more rows of X take AMX-INT8 tiles of 16 rows
    where the processor has them (gemv_quantized/amx_int8): against the
    float64 reference, and against the 8-bit row kernels
    (TC_CPU_ISA=avx512_bf16) on the same inputs, which compute the same terms
    in another order. M covers a half tile, one tile, a tile plus 1 row and
    plus 15 rows, several tiles; N a partial panel of 16 rows, whole panels
    and a panel plus one row; K odd and even block counts (a super-block
    count for Q4_K)."""
    monkeypatch.delenv("TC_CPU_ISA", raising=False)
    Ks = (256, 768) if fmt == "q4_k" else (32, 96, 544)
    seen = set()
    for M, N, K in [(8, 17, Ks[0]), (16, 16, Ks[0]), (17, 15, Ks[1]), (31, 33, Ks[-1]), (70, 37, Ks[0]), (33, 1, Ks[1])]:
        for dtype in ("f16", "bf16"):
            w = random_weights(rng, fmt, N, K)
            wd = reference_weights(w, fmt, N, K).astype(np.float64)
            x = random_array(rng, (M, K), dtype)
            x64 = to_f64(x, dtype)
            X, W = cpu_ctx.buffer_from_array(x), cpu_ctx.buffer_from_array(w)
            outs = []
            for cap in ("", "avx512_bf16"):
                if cap:
                    monkeypatch.setenv("TC_CPU_ISA", cap)
                Y = cpu_ctx.buffer_from_array(poison(M * N * 2))
                cpu_ctx.gemv_quantized(X, W, Y, fmt, M, N, K, dtype=dtype)
                if not cap:
                    seen.add(tc.cpu_last_kernel_name())
                monkeypatch.delenv("TC_CPU_ISA", raising=False)
                out = to_f64(Y.to_numpy((M, N), np_dtype(dtype)), dtype)
                # The 8-bit contract (each activation within half a step of max|x| / 127 of its
                # block), then the output's rounding: a fixed share of sum |x| |w| is not a bound
                # when a block's largest |x| is far above its typical one (one block: K = 32).
                ref = x64 @ wd.T
                step = np.repeat(np.abs(x64).reshape(M, -1, 32).max(axis=2) / 127, 32, axis=1)
                bound = ((step / 2 * 1.0001) @ np.abs(wd).T + 2.0 ** (-10 if dtype == "f16" else -7) * np.abs(ref)
                         + 1e-5 * (np.abs(x64) @ np.abs(wd).T) + 1e-30)
                assert np.isfinite(out).all() and (np.abs(out - ref) <= bound).all(), (
                    "%s M=%d N=%d K=%d %s %s: %.3g of the 8-bit bound" % (
                        fmt, M, N, K, dtype, cap or "best", np.max(np.abs(out - ref) / bound)))
                outs.append(out)
            # The same 8-bit terms summed in another order: within f32
            # rounding before the output's own rounding (a step of it).
            ulp = 2.0 ** (-10 if dtype == "f16" else -7)
            assert (np.abs(outs[0] - outs[1]) <= ulp * np.maximum(np.abs(outs[0]), np.abs(outs[1])) + 1e-6 * (
                np.abs(x64) @ np.abs(wd).T)).all()
    # The fused RMS norm feeds the same path, and a stream runs it too.
    run_gemv(cpu_ctx, rng, fmt, 17, 19, Ks[-1], "f16", fused=True)
    seen.add(tc.cpu_last_kernel_name())
    stream = cpu_ctx.stream()
    run_gemv(cpu_ctx, rng, fmt, 24, 33, Ks[-1], "bf16", stream=stream)
    if "amx_int8" in cpu_ctx.device_info().features.split(","):
        assert seen == {"gemv_quantized/amx_int8"}, seen


@pytest.mark.parametrize("isa", ["", "avx512"], indirect=True)
@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q4_1", "q5_0", "q5_1"])
def test_gemv_odd_block_counts(cpu_ctx, rng, isa, fmt):
    # 1, 3, 17 and 33 blocks: odd pairs and partial groups of 16 blocks.
    for K in (32, 96, 544, 1056):
        for M in (1, 3, 5):
            run_gemv(cpu_ctx, rng, fmt, M, 7, K, "f16")
            run_gemv(cpu_ctx, rng, fmt, M, 7, K, "bf16")


def test_gemv_plain_formats_any_k(ctx, rng):
    for fmt in ("f16", "bf16", "f32"):
        for K in (1, 7, 15, 17, 33):
            run_gemv(ctx, rng, fmt, 3, 5, K, "f32")
            run_gemv(ctx, rng, fmt, 17, 5, K, "bf16")


def test_gemv_large_m_blocks(ctx, rng):
    run_gemv(ctx, rng, "q4_0", 70, 65, 2048, "f32")


@pytest.mark.parametrize("fmt", FORMATS)
def test_gemv_every_format_every_m(ctx, rng, fmt):
    # M of 1, a few, 16 (one pass over W) and 33 (tiles of M); odd N; K a
    # few whole blocks (256 covers the K formats' super-blocks).
    for M in (1, 3, 16, 33):
        run_gemv(ctx, rng, fmt, M, 37, 768, "f32")
    for dtype in ("f16", "bf16"):
        run_gemv(ctx, rng, fmt, 3, 19, 512, dtype)
        run_gemv(ctx, rng, fmt, 1, 19, 512, dtype, fused=True)
    run_gemv(ctx, rng, fmt, 16, 19, 256, "f32", fused=True)


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q4_k", "q6_k"])
def test_gemv_many_rows_two_stages(ctx, rng, fmt):
    # Enough rows that a GPU's streaming kernel gives each CTA several tiles
    # of rows (its pipeline runs across tile boundaries), N % 4 = 3 (a last,
    # partial tile), K of 19 super-blocks (two stages a row, the second
    # short; Q6_K rows 3990 bytes, not 16-byte aligned), M of 1 and 5 (a
    # pass of 4 rows of X and one of 1).
    for M, dtype in ((1, "f32"), (5, "f32"), (1, "f16")):
        run_gemv(ctx, rng, fmt, M, 1999, 4864, dtype)


def view_at(ctx, arr, offset):
    """A buffer over the bytes of `arr` placed `offset` bytes into a fresh
    allocation: misaligned data, as caller memory wrapped by buffer_from_ptr
    may be. Returns (allocation, view)."""
    raw = np.ascontiguousarray(arr).view(np.uint8).reshape(-1)
    base = ctx.buffer(raw.size + 64)
    view = ctx.buffer_from_ptr(base.device_ptr() + offset, raw.size)
    view.write(raw)
    return base, view


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q4_1", "q4_k", "q6_k", "q8_k", "f32", "q5_0", "q5_1"])
@pytest.mark.parametrize("offset", [1, 2, 6])
def test_gemv_misaligned_buffers(ctx, rng, fmt, offset):
    # W, X and Y at odd and half-word offsets take the byte-load / staging
    # paths of a GPU; the results are the same.
    M, N, K = 3, 21, 512
    for dtype in ("f16", "f32"):
        w = random_weights(rng, fmt, N, K)
        wd = reference_weights(w, fmt, N, K).astype(np.float64)
        x = random_array(rng, (M, K), dtype)
        keep = [view_at(ctx, w, offset), view_at(ctx, x, offset),
                view_at(ctx, poison(M * N * (4 if dtype == "f32" else 2)), offset)]
        W, X, Y = (v for _, v in keep)
        ctx.gemv_quantized(X, W, Y, fmt, M, N, K, dtype=dtype)
        x64 = to_f64(x, dtype)
        out = to_f64(Y.to_numpy((M, N), np_dtype(dtype)), dtype)
        assert_close(out, x64 @ wd.T, np.abs(x64) @ np.abs(wd).T, TOLERANCE[dtype], "%s offset %d" % (fmt, offset))
        # Dequantising from a misaligned W gives the reference bits.
        D = ctx.buffer_from_array(poison(N * K * 4))
        ctx.dequantize_weights(W, D, fmt, N, K, dtype="f32")
        assert np.array_equal(D.to_numpy((N, K), np.float32), reference_weights(w, fmt, N, K))
        D.close()
        for base, view in keep:
            view.close()
            base.close()


def test_gemv_async_and_fused(ctx, rng):
    cpu_ctx = ctx
    with cpu_ctx.stream() as s:
        run_gemv(cpu_ctx, rng, "q4_k", 3, 64, 512, "f16", stream=s)
        run_gemv(cpu_ctx, rng, "q8_0", 1, 64, 512, "f32", stream=s)
    for fmt in ("q4_0", "q6_k", "f16"):
        run_gemv(cpu_ctx, rng, fmt, 3, 40, 512, "f32", fused=True)
        run_gemv(cpu_ctx, rng, fmt, 1, 40, 512, "f16", fused=True)


def test_fused_does_not_write_x(ctx, rng):
    cpu_ctx = ctx
    M, N, K = 2, 8, 64
    x = random_array(rng, (M, K), "f16")
    X = cpu_ctx.buffer_from_array(x)
    G = cpu_ctx.buffer_from_array(np.ones(K, np.float16))
    W = cpu_ctx.buffer_from_array(random_weights(rng, "q4_0", N, K))
    Y = cpu_ctx.buffer_from_array(poison(M * N * 2))
    cpu_ctx.fused_rmsnorm_gemv_quantized(X, G, W, Y, "q4_0", M, N, K)
    assert np.array_equal(X.to_numpy((M, K), np.float16), x)


def test_gemv_bad_arguments_leave_buffers_untouched(ctx, rng):
    cpu_ctx = ctx
    M, N, K = 2, 4, 64
    w = random_weights(rng, "q4_0", N, K)
    X = cpu_ctx.buffer_from_array(random_array(rng, (M, K), "f16"))
    W = cpu_ctx.buffer_from_array(w)
    Y = cpu_ctx.buffer_from_array(poison(M * N * 2))
    G = cpu_ctx.buffer_from_array(np.ones(K, np.float16))
    small = cpu_ctx.buffer_from_array(poison(10))
    cases = [
        ((X, W, Y, "q4_0", 0, N, K), {}, tc.TC_ERR_INVALID_SHAPE),
        ((X, W, Y, "q4_0", M, 0, K), {}, tc.TC_ERR_INVALID_SHAPE),
        ((X, W, Y, "q4_0", M, N, 48), {}, tc.TC_ERR_INVALID_SHAPE),
        ((X, W, Y, "q4_0", M, N, 2**40), {}, tc.TC_ERR_INVALID_SHAPE),
        ((X, W, Y, "q4_0", M, N, 2**70), {}, tc.TC_ERR_INVALID_SHAPE),
        ((X, W, Y, "iq4_nl", M, N, K), {}, tc.TC_ERR_UNSUPPORTED_DTYPE),
        ((X, W, Y, 42, M, N, K), {}, tc.TC_ERR_UNSUPPORTED_DTYPE),
        ((X, W, Y, "q4_0", M, N, K), {"dtype": "i8"}, tc.TC_ERR_UNSUPPORTED_DTYPE),
        ((X, W, Y, "q8_0", M, N, K), {}, tc.TC_ERR_INVALID_ARG),          # W too small for q8_0
        ((X, W, Y, "q4_0", M, N, K), {"dtype": "f32"}, tc.TC_ERR_INVALID_ARG),  # X too small
        ((small, W, Y, "q4_0", M, N, K), {}, tc.TC_ERR_INVALID_ARG),
        ((X, W, small, "q4_0", M, N, K), {}, tc.TC_ERR_INVALID_ARG),
        ((X, W, X, "q4_0", M, N, K), {}, tc.TC_ERR_INVALID_ARG),          # Y overlaps X
        ((X, W, W, "q4_0", 1, 1, 32), {}, tc.TC_ERR_INVALID_ARG),         # Y overlaps W
        ((None, W, Y, "q4_0", M, N, K), {}, tc.TC_ERR_INVALID_ARG),
    ]
    for args, kw, status in cases:
        with pytest.raises(tc.TensorcoreError) as e:
            cpu_ctx.gemv_quantized(*args, **kw)
        assert e.value.status == status, (args[3:], kw, e.value)
    with pytest.raises(tc.TensorcoreError) as e:
        cpu_ctx.fused_rmsnorm_gemv_quantized(X, G, W, Y, "q4_0", M, N, K, eps=-1.0)
    assert e.value.status == tc.TC_ERR_INVALID_ARG
    with pytest.raises(tc.TensorcoreError) as e:
        cpu_ctx.fused_rmsnorm_gemv_quantized(X, small, W, Y, "q4_0", M, N, K)
    assert e.value.status == tc.TC_ERR_INVALID_ARG
    with tc.Context("cpu") as other:
        with pytest.raises(tc.TensorcoreError) as e:
            other.gemv_quantized(X, W, Y, "q4_0", M, N, K)
        assert e.value.status == tc.TC_ERR_INVALID_ARG and "another context" in str(e.value)
    assert (Y.to_numpy((M * N * 2,), np.uint8) == 0xFF).all()
    assert np.array_equal(W.to_numpy(w.shape, np.uint8), w)


def test_gemv_reports_backend_and_capabilities(ctx, device, rng):
    caps = ctx.runtime_capabilities()
    assert tc.capability_available(caps, tc.TC_CAPABILITY_QUANTIZED)
    assert tc.capability_available(caps, "gguf")
    run_gemv(ctx, rng, "q4_0", 1, 8, 64, "f16")
    if device == "cpu":
        assert ctx.last_backend_name() == "portable_cpu"
