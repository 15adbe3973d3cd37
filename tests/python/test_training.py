"""Training kernels (RMSNorm, LayerNorm, RoPE, SwiGLU, softmax, AdamW, fused
norm + GEMV) against float64 NumPy references.

Inputs are fresh random values already rounded to the op's dtype; outputs are
poisoned (NaN) first and every element is checked against a tolerance
relative to the magnitude of the terms that make it up (TOLERANCE: f32 1e-5,
f16/bf16 1e-2). Every numerical test runs on each device present: on each instruction-set
path of the CPU kernels (TC_CPU_ISA caps the path: the machine's best,
AVX-512 without its BF16 conversions, AVX2, portable) and on CUDA.
Backward passes are also checked against central finite differences of the
float64 forward and of the library's own f32 forward. Bad arguments give the
documented status and leave every buffer byte as it was.
"""

import secrets

import numpy as np
import pytest

import tensorcore as tc
from conftest import HAVE_CUDA, TOLERANCE, assert_close, np_dtype, poison, random_array, to_f64

DTYPES = ["f32", "f16", "bf16"]
ISAS = ["native", "avx512", "avx2", "portable"]  # native: AVX-512 with BF16 conversions here
# Row lengths: 1, below/above one vector, odd tails, and a model-sized row.
DIMS = [1, 7, 16, 65, 4096]


def rows_for(D):
    return 2 if D >= 4096 else 5


# Where a numerical test runs: the CPU on each instruction-set path, and the
# GPU (which has one path).
TARGETS = [pytest.param(("cpu", isa), id="cpu-" + isa) for isa in ISAS] + [
    pytest.param(("cuda", None), id="cuda", marks=pytest.mark.skipif(not HAVE_CUDA, reason="no usable CUDA device"))]


@pytest.fixture(params=TARGETS)
def tctx(request, monkeypatch):
    """A context of the target device; for the CPU, with its ISA forced."""
    device, isa = request.param
    if isa == "native":
        monkeypatch.delenv("TC_CPU_ISA", raising=False)
    elif isa:
        monkeypatch.setenv("TC_CPU_ISA", isa)
    with tc.Context(device) as c:
        yield c


# ---- buffers ------------------------------------------------------------------------

def up(ctx, arr):
    return ctx.buffer_from_array(np.ascontiguousarray(arr))


def out(ctx, n, dtype):
    """A buffer of n elements of dtype, every byte 0xFF (NaN)."""
    return ctx.buffer_from_array(poison(n * np.dtype(np_dtype(dtype)).itemsize))


def get(buf, shape, dtype):
    return to_f64(buf.to_numpy(shape, np_dtype(dtype)), dtype)


def rnd(rng, shape, dtype, scale=1.0, shift=0.0):
    """Random values of dtype (rounded) and their float64 values."""
    a = random_array(rng, shape, "f32", scale)
    if shift:
        a = (a + np.float32(shift)).astype(np.float32)
    a = a.astype(np_dtype(dtype))
    return a, to_f64(a, dtype)


def f32(a):
    return np.ascontiguousarray(a, dtype=np.float32)


# ---- references (float64) ----------------------------------------------------------------

def rmsnorm_ref(x, g, eps):
    r = 1.0 / np.sqrt((x * x).mean(axis=1) + eps)
    return x * r[:, None] * g, r


def rmsnorm_bwd_ref(x, g, dy, r):
    D = x.shape[1]
    dot = (dy * g * x).sum(axis=1)
    dx = r[:, None] * (g * dy - x * (r * r * dot / D)[:, None])
    dx_scale = r[:, None] * (np.abs(g * dy) + np.abs(x) * (r * r * np.abs(dy * g * x).sum(axis=1) / D)[:, None])
    dg = (dy * x * r[:, None]).sum(axis=0)
    return dx, dx_scale, dg, np.abs(dy * x * r[:, None]).sum(axis=0)


def layernorm_ref(x, g, b, eps):
    mu = x.mean(axis=1)
    r = 1.0 / np.sqrt(((x - mu[:, None]) ** 2).mean(axis=1) + eps)
    xhat = (x - mu[:, None]) * r[:, None]
    return xhat * g + b, mu, r


def layernorm_scale(x, g, b, mu, r):
    """Term size of each LayerNorm output: x - mu is formed in f32, so its
    error is relative to |x| + |mu|, not to |x - mu|."""
    return (np.abs(x) + np.abs(mu[:, None])) * r[:, None] * np.abs(g) + np.abs(b)


def layernorm_bwd_ref(x, g, dy, mu, r):
    xhat = (x - mu[:, None]) * r[:, None]
    dxhat = dy * g
    m1 = dxhat.mean(axis=1)[:, None]
    m2 = (dxhat * xhat).mean(axis=1)[:, None]
    dx = r[:, None] * (dxhat - m1 - xhat * m2)
    # xhat is formed from x - mu in f32: its error scales with (|x| + |mu|) rstd
    axhat = (np.abs(x) + np.abs(mu[:, None])) * r[:, None]
    scale = r[:, None] * (np.abs(dxhat) + np.abs(dxhat).mean(axis=1)[:, None]
                          + axhat * (np.abs(dxhat) * axhat).mean(axis=1)[:, None])
    return dx, scale, (dy * xhat).sum(axis=0), np.abs(dy * axhat).sum(axis=0), dy.sum(axis=0), np.abs(dy).sum(axis=0)


def rope_tables(seq, head_dim, base=10000.0):
    inv = base ** (-np.arange(0, head_dim // 2) * 2.0 / head_dim)
    theta = np.arange(seq)[:, None] * inv[None, :]
    return f32(np.cos(theta)), f32(np.sin(theta))


def rope_ref(x, cos, sin, interleaved, inverse=False):
    """x [B, H, S, D] float64; returns the rotated copy and the term scale."""
    c = cos.astype(np.float64)[None, None]
    s = sin.astype(np.float64)[None, None] * (-1.0 if inverse else 1.0)
    D = x.shape[-1]
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
    else:
        a, b = x[..., : D // 2], x[..., D // 2:]
    y, scale = np.empty_like(x), np.empty_like(x)
    ya, yb = a * c - b * s, b * c + a * s
    sa, sb = np.abs(a * c) + np.abs(b * s), np.abs(b * c) + np.abs(a * s)
    if interleaved:
        y[..., 0::2], y[..., 1::2], scale[..., 0::2], scale[..., 1::2] = ya, yb, sa, sb
    else:
        y[..., : D // 2], y[..., D // 2:], scale[..., : D // 2], scale[..., D // 2:] = ya, yb, sa, sb
    return y, scale


def sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # = 1 / (1 + exp(-x)), without overflow


def swiglu_ref(g, u):
    return g * sigmoid(g) * u


def swiglu_bwd_ref(g, u, d):
    s = sigmoid(g)
    dgate = d * u * s * (1 + g * (1 - s))
    dgate_scale = np.abs(d * u) * s * (1 + np.abs(g) * (1 - s))
    return dgate, dgate_scale, d * g * s


GELU_C = np.sqrt(2.0 / np.pi)


def gelu_tanh(g):
    return 0.5 * g * (1.0 + np.tanh(GELU_C * (g + 0.044715 * g ** 3)))


def geglu_ref(g, u):
    return gelu_tanh(g) * u


def geglu_bwd_ref(g, u, d):
    t = np.tanh(GELU_C * (g + 0.044715 * g ** 3))
    dgelu = 0.5 * (1 + t) + 0.5 * g * (1 - t * t) * GELU_C * (1 + 3 * 0.044715 * g * g)
    # magnitudes of the terms, for the tolerance of values that cancel
    dgelu_scale = 0.5 * (1 + np.abs(t)) + 0.5 * np.abs(g) * (1 - t * t) * GELU_C * (1 + 3 * 0.044715 * g * g)
    return d * u * dgelu, np.abs(d * u) * dgelu_scale, d * gelu_tanh(g)


def softmax_ref(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def softmax_bwd_ref(y, dy):
    dot = (dy * y).sum(axis=1, keepdims=True)
    return y * (dy - dot), np.abs(y) * (np.abs(dy) + np.abs(dy * y).sum(axis=1, keepdims=True))


def tol(dtype):
    return TOLERANCE[dtype]


# Below its normal range a dtype has a fixed spacing: f16 cannot hold values
# under 2^-24 at all, so its outputs get that much absolute slack; bf16
# conversion by AVX512-BF16 flushes values under 2^-126 to zero.
UNDERFLOW = {"f32": 2.0 ** -149, "f16": 2.0 ** -24, "bf16": 2.0 ** -126}


def check(got, ref, scale, dtype, what, rtol=None):
    """assert_close with the dtype's tolerance plus its underflow spacing."""
    rtol = tol(dtype) if rtol is None else rtol
    assert_close(got, ref, np.asarray(scale) + UNDERFLOW[dtype] / rtol, rtol, what)


# ---- RMSNorm ---------------------------------------------------------------------------

@pytest.mark.parametrize("D", DIMS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rmsnorm_forward(tctx, rng, dtype, D):
    N, eps = rows_for(D), 1e-5
    x, x64 = rnd(rng, (N, D), dtype, scale=2.0)
    g, g64 = rnd(rng, (D,), dtype, shift=1.0)
    Y, R = out(tctx, N * D, dtype), out(tctx, N, "f32")
    tc.rmsnorm_forward(tctx, up(tctx, x), up(tctx, g), Y, R, N, D, eps=eps, dtype=dtype)
    y, r = rmsnorm_ref(x64, g64, eps)
    check(get(Y, (N, D), dtype), y, np.abs(y), dtype, "Y")
    assert_close(get(R, N, "f32"), r, r, 1e-5, "rstd")


@pytest.mark.parametrize("D", DIMS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rmsnorm_backward(tctx, rng, dtype, D):
    N = rows_for(D)
    x, x64 = rnd(rng, (N, D), dtype)
    g, g64 = rnd(rng, (D,), dtype, shift=1.0)
    dy, dy64 = rnd(rng, (N, D), dtype)
    r = f32(rmsnorm_ref(x64, g64, 1e-5)[1])
    dX, dG = out(tctx, N * D, dtype), out(tctx, D, "f32")
    tc.rmsnorm_backward(tctx, up(tctx, x), up(tctx, g), up(tctx, dy), up(tctx, r), dX, dG, N, D,
                        dtype=dtype)
    dx, dx_scale, dg, dg_scale = rmsnorm_bwd_ref(x64, g64, dy64, r.astype(np.float64))
    check(get(dX, (N, D), dtype), dx, dx_scale, dtype, "dX")
    assert_close(get(dG, D, "f32"), dg, dg_scale, 1e-5, "dgamma")


# ---- LayerNorm ---------------------------------------------------------------------------

@pytest.mark.parametrize("D", DIMS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_layernorm_forward(tctx, rng, dtype, D):
    N, eps = rows_for(D), 1e-5
    x, x64 = rnd(rng, (N, D), dtype, scale=2.0, shift=3.0)  # a mean well away from 0
    g, g64 = rnd(rng, (D,), dtype, shift=1.0)
    b, b64 = rnd(rng, (D,), dtype)
    Y, Mu, R = out(tctx, N * D, dtype), out(tctx, N, "f32"), out(tctx, N, "f32")
    tc.layernorm_forward(tctx, up(tctx, x), up(tctx, g), up(tctx, b), Y, Mu, R, N, D, eps=eps,
                         dtype=dtype)
    y, mu, r = layernorm_ref(x64, g64, b64, eps)
    check(get(Y, (N, D), dtype), y, layernorm_scale(x64, g64, b64, mu, r), dtype, "Y")
    assert_close(get(Mu, N, "f32"), mu, np.abs(x64).mean(axis=1), 1e-5, "mean")
    assert_close(get(R, N, "f32"), r, r, 1e-5, "rstd")


def test_layernorm_forward_optional_outputs(ctx, rng):
    N, D = 3, 20
    x, x64 = rnd(rng, (N, D), "f32")
    g, g64 = rnd(rng, (D,), "f32", shift=1.0)
    Y = out(ctx, N * D, "f32")
    tc.layernorm_forward(ctx, up(ctx, x), up(ctx, g), None, Y, None, None, N, D, dtype="f32")
    y, mu, r = layernorm_ref(x64, g64, 0.0, 1e-5)
    assert_close(get(Y, (N, D), "f32"), y, layernorm_scale(x64, g64, 0.0, mu, r), 1e-5, "Y without beta")


@pytest.mark.parametrize("D", DIMS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_layernorm_backward(tctx, rng, dtype, D):
    N = rows_for(D)
    x, x64 = rnd(rng, (N, D), dtype, shift=1.0)
    g, g64 = rnd(rng, (D,), dtype, shift=1.0)
    dy, dy64 = rnd(rng, (N, D), dtype)
    _, mu, r = layernorm_ref(x64, g64, 0.0, 1e-5)
    mu, r = f32(mu), f32(r)
    dX, dG, dB = out(tctx, N * D, dtype), out(tctx, D, "f32"), out(tctx, D, "f32")
    tc.layernorm_backward(tctx, up(tctx, x), up(tctx, g), up(tctx, dy), up(tctx, mu), up(tctx, r),
                          dX, N, D, dgamma=dG, dbeta=dB, dtype=dtype)
    dx, dxs, dg, dgs, db, dbs = layernorm_bwd_ref(x64, g64, dy64, mu.astype(np.float64), r.astype(np.float64))
    check(get(dX, (N, D), dtype), dx, dxs, dtype, "dX")
    assert_close(get(dG, D, "f32"), dg, dgs, 1e-5, "dgamma")
    assert_close(get(dB, D, "f32"), db, dbs, 1e-5, "dbeta")


def test_layernorm_backward_without_weight_gradients(ctx, rng):
    N, D = 4, 33
    x, x64 = rnd(rng, (N, D), "f32")
    g, g64 = rnd(rng, (D,), "f32", shift=1.0)
    dy, dy64 = rnd(rng, (N, D), "f32")
    _, mu, r = layernorm_ref(x64, g64, 0.0, 1e-5)
    dX = out(ctx, N * D, "f32")
    tc.layernorm_backward(ctx, up(ctx, x), up(ctx, g), up(ctx, dy), up(ctx, f32(mu)),
                          up(ctx, f32(r)), dX, N, D, dtype="f32")
    dx, dxs, *_ = layernorm_bwd_ref(x64, g64, dy64, f32(mu).astype(np.float64), f32(r).astype(np.float64))
    assert_close(get(dX, (N, D), "f32"), dx, dxs, 1e-5, "dX")


# ---- RoPE -----------------------------------------------------------------------------------

@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("head_dim", [2, 6, 30, 64, 128])
@pytest.mark.parametrize("dtype", DTYPES)
def test_rope(tctx, rng, dtype, head_dim, interleaved):
    B, H, S = 2, 3, 7
    x, x64 = rnd(rng, (B, H, S, head_dim), dtype)
    cos, sin = rope_tables(S, head_dim)
    X, C, Sn = up(tctx, x), up(tctx, cos), up(tctx, sin)
    tc.rope_forward(tctx, X, C, Sn, B, H, S, head_dim, dtype=dtype, interleaved=interleaved)
    y, scale = rope_ref(x64, cos, sin, interleaved)
    got = get(X, x.shape, dtype)
    check(got, y, scale, dtype, "rope forward")
    # backward of an independent gradient: the transposed rotation
    g, g64 = rnd(rng, x.shape, dtype)
    G = up(tctx, g)
    tc.rope_backward(tctx, G, C, Sn, B, H, S, head_dim, dtype=dtype, interleaved=interleaved)
    dx, dscale = rope_ref(g64, cos, sin, interleaved, inverse=True)
    check(get(G, x.shape, dtype), dx, dscale, dtype, "rope backward")
    # forward then backward is the identity, up to two roundings to dtype of
    # values of the size of each pair (|a| + |b|)
    tc.rope_backward(tctx, X, C, Sn, B, H, S, head_dim, dtype=dtype, interleaved=interleaved)
    ones = np.ones_like(cos)
    pair = rope_ref(np.abs(x64), ones, ones, interleaved)[1]
    check(get(X, x.shape, dtype), x64, pair, dtype, "forward then backward", 2 * tol(dtype))


def test_rope_matches_the_published_conventions(ctx, rng):
    """Half rotation is HF's x * cos + rotate_half(x) * sin with the tables
    concatenated; interleaved is the complex product (x0 + i x1) e^{i theta}."""
    B, H, S, D = 1, 2, 9, 16
    x = f32(rng.standard_normal((B, H, S, D)))
    cos, sin = rope_tables(S, D)
    X = up(ctx, x)
    tc.rope_forward(ctx, X, up(ctx, cos), up(ctx, sin), B, H, S, D, dtype="f32")
    c2, s2 = np.concatenate([cos, cos], axis=1), np.concatenate([sin, sin], axis=1)
    x64 = x.astype(np.float64)
    rotate_half = np.concatenate([-x64[..., D // 2:], x64[..., : D // 2]], axis=-1)
    hf = x64 * c2 + rotate_half * s2
    assert_close(get(X, x.shape, "f32"), hf, np.abs(x64) + np.abs(rotate_half), 1e-5, "HF rotate_half")
    X = up(ctx, x)
    tc.rope_forward(ctx, X, up(ctx, cos), up(ctx, sin), B, H, S, D, dtype="f32", interleaved=True)
    z = (x64[..., 0::2] + 1j * x64[..., 1::2]) * np.exp(1j * np.arctan2(sin, cos))
    meta = np.stack([z.real, z.imag], axis=-1).reshape(x.shape)
    partner = x64.reshape(x.shape[:-1] + (D // 2, 2))[..., ::-1].reshape(x.shape)  # x[2k] <-> x[2k+1]
    assert_close(get(X, x.shape, "f32"), meta, np.abs(x64) + np.abs(partner), 1e-5, "complex product")


def test_rope_uses_the_table_row_of_each_position(ctx, rng):
    """Rows of the table are positions: a table with different rows per
    position rotates each position by its own angle."""
    B, H, S, D = 2, 2, 5, 8
    x = f32(rng.standard_normal((B, H, S, D)))
    theta = rng.uniform(-3, 3, size=(S, D // 2))
    cos, sin = f32(np.cos(theta)), f32(np.sin(theta))
    X = up(ctx, x)
    tc.rope_forward(ctx, X, up(ctx, cos), up(ctx, sin), B, H, S, D, dtype="f32")
    y, scale = rope_ref(x.astype(np.float64), cos, sin, False)
    assert_close(get(X, x.shape, "f32"), y, scale, 1e-5, "per-position angles")


# [batch, heads, seq, head_dim]: one pair; rows below, at and above a GPU
# block's row count for head_dim 128 (32 rows of 8 vectors in bf16/f16, 16
# of 16 in f32) and its vector width; head_dim 96 and 80 (vector counts that
# are not powers of two), 6 (no 16-byte vectors), 256 and 512 (a row wider
# than a block's x extent in f32), and 1024 rows of 128 (the shape whose
# freshly written tables were once read stale on the GPU).
ROPE_SHAPES = [(1, 1, 1, 2), (1, 1, 31, 128), (1, 1, 33, 128), (2, 8, 64, 128), (3, 2, 17, 96), (1, 5, 9, 80),
               (2, 3, 11, 6), (1, 2, 40, 256), (1, 1, 3, 512)]


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("shape", ROPE_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_shapes(ctx, rng, dtype, shape, interleaved):
    B, H, S, D = shape
    x, x64 = rnd(rng, shape, dtype)
    cos, sin = rope_tables(S, D)
    for inverse in (False, True):
        X = up(ctx, x)
        fn = tc.rope_backward if inverse else tc.rope_forward
        fn(ctx, X, up(ctx, cos), up(ctx, sin), B, H, S, D, dtype=dtype, interleaved=interleaved)
        y, scale = rope_ref(x64, cos, sin, interleaved, inverse=inverse)
        check(get(X, shape, dtype), y, scale, dtype, "rope %s %s interleaved=%s" % (
            "backward" if inverse else "forward", shape, interleaved))


def test_rope_reads_the_tables_just_written(ctx, rng):
    """The tables are rewritten with new angles right before each call, into
    the same buffers: the op must see the new values, never the previous
    call's (a host-to-device copy must have landed when tc_buffer_write
    returns, whatever stream the next kernel runs on)."""
    B, H, S, D = 2, 8, 64, 128
    x = f32(rng.standard_normal((B, H, S, D)))
    C, Sn = up(ctx, np.zeros((S, D // 2), np.float32)), up(ctx, np.zeros((S, D // 2), np.float32))
    X = up(ctx, x)
    for i in range(8):
        theta = rng.uniform(-3, 3, size=(S, D // 2))
        cos, sin = f32(np.cos(theta)), f32(np.sin(theta))
        C.write(cos)
        Sn.write(sin)
        X.write(x)
        tc.rope_forward(ctx, X, C, Sn, B, H, S, D, dtype="f32")
        y, scale = rope_ref(x.astype(np.float64), cos, sin, False)
        assert_close(get(X, x.shape, "f32"), y, scale, 1e-5, "round %d" % i)


# ---- SwiGLU ------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 7, 16, 65, 4099, 100000])
@pytest.mark.parametrize("dtype", DTYPES)
def test_swiglu(tctx, rng, dtype, n):
    g, g64 = rnd(rng, (n,), dtype, scale=4.0)
    u, u64 = rnd(rng, (n,), dtype)
    d, d64 = rnd(rng, (n,), dtype)
    G, U, Dd = up(tctx, g), up(tctx, u), up(tctx, d)
    O, dG, dU = out(tctx, n, dtype), out(tctx, n, dtype), out(tctx, n, dtype)
    tc.swiglu_forward(tctx, G, U, O, n, dtype=dtype)
    ref = swiglu_ref(g64, u64)
    check(get(O, n, dtype), ref, np.abs(ref), dtype, "out")
    tc.swiglu_backward(tctx, G, U, Dd, dG, dU, n, dtype=dtype)
    dgate, dgate_scale, dup = swiglu_bwd_ref(g64, u64, d64)
    check(get(dG, n, dtype), dgate, dgate_scale, dtype, "dgate")
    check(get(dU, n, dtype), dup, np.abs(dup), dtype, "dup")


def test_swiglu_extreme_gates(tctx):
    """Large |gate| saturates the sigmoid to 0 or 1 without inf or NaN."""
    g = f32([-1e4, -200.0, -88.0, -20.0, 0.0, 20.0, 88.0, 200.0, 1e4])
    u = np.ones_like(g)
    O = out(tctx, g.size, "f32")
    tc.swiglu_forward(tctx, up(tctx, g), up(tctx, u), O, g.size, dtype="f32")
    ref = swiglu_ref(g.astype(np.float64), 1.0)
    assert_close(get(O, g.size, "f32"), ref, np.abs(ref) + 1e-30, 1e-5, "saturated silu")


# ---- GEGLU (GELU, tanh form) -----------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 7, 16, 65, 4099, 100000])
@pytest.mark.parametrize("dtype", DTYPES)
def test_geglu(tctx, rng, dtype, n):
    g, g64 = rnd(rng, (n,), dtype, scale=4.0)
    u, u64 = rnd(rng, (n,), dtype)
    d, d64 = rnd(rng, (n,), dtype)
    G, U, Dd = up(tctx, g), up(tctx, u), up(tctx, d)
    O, dG, dU = out(tctx, n, dtype), out(tctx, n, dtype), out(tctx, n, dtype)
    tc.geglu_forward(tctx, G, U, O, n, dtype=dtype)
    ref = geglu_ref(g64, u64)
    check(get(O, n, dtype), ref, np.abs(0.5 * g64 * 2 * u64), dtype, "out")
    tc.geglu_backward(tctx, G, U, Dd, dG, dU, n, dtype=dtype)
    dgate, dgate_scale, dup = geglu_bwd_ref(g64, u64, d64)
    check(get(dG, n, dtype), dgate, dgate_scale, dtype, "dgate")
    check(get(dU, n, dtype), dup, np.abs(d64 * g64), dtype, "dup")


def test_geglu_extreme_gates(tctx):
    """Large |gate| saturates tanh to +-1 without inf or NaN: gelu(g) -> g or 0."""
    g = f32([-1e4, -200.0, -88.0, -20.0, -3.0, 0.0, 3.0, 20.0, 88.0, 200.0, 1e4])
    u = np.ones_like(g)
    O, dG, dU = out(tctx, g.size, "f32"), out(tctx, g.size, "f32"), out(tctx, g.size, "f32")
    tc.geglu_forward(tctx, up(tctx, g), up(tctx, u), O, g.size, dtype="f32")
    ref = geglu_ref(g.astype(np.float64), 1.0)
    assert_close(get(O, g.size, "f32"), ref, np.abs(g.astype(np.float64)) + 1e-30, 1e-5, "saturated gelu")
    tc.geglu_backward(tctx, up(tctx, g), up(tctx, u), up(tctx, u), dG, dU, g.size, dtype="f32")
    dgate, scale, _ = geglu_bwd_ref(g.astype(np.float64), 1.0, 1.0)
    assert np.isfinite(get(dG, g.size, "f32")).all()
    assert_close(get(dG, g.size, "f32"), dgate, scale + 1e-30, 1e-5, "saturated gelu'")


def test_geglu_finite_differences(ctx, rng):
    n = 96
    g64, u64, d64 = (rng.standard_normal(n) * 2 for _ in range(3))
    g, u, d = f32(g64), f32(u64), f32(d64)
    g64, u64, d64 = g.astype(np.float64), u.astype(np.float64), d.astype(np.float64)
    dG, dU = out(ctx, n, "f32"), out(ctx, n, "f32")
    tc.geglu_backward(ctx, up(ctx, g), up(ctx, u), up(ctx, d), dG, dU, n, dtype="f32")
    for got, fd, what in ((get(dG, n, "f32"), central_diff(lambda a: (geglu_ref(a, u64) * d64).sum(), g64.copy()),
                           "geglu dgate"),
                          (get(dU, n, "f32"), central_diff(lambda a: (geglu_ref(g64, a) * d64).sum(), u64.copy()),
                           "geglu dup")):
        assert_close(got, fd, np.abs(fd).max() + 1e-12, 1e-5, what)


def test_geglu_in_place(ctx, rng):
    """out may be gate; dgate may be gate and dup dout, as the header allows."""
    n = 50
    g, u, d = (f32(rng.standard_normal(n)) for _ in range(3))
    g64, u64, d64 = g.astype(np.float64), u.astype(np.float64), d.astype(np.float64)
    Gt = up(ctx, g)
    tc.geglu_forward(ctx, Gt, up(ctx, u), Gt, n, dtype="f32")
    ref = geglu_ref(g64, u64)
    assert_close(get(Gt, n, "f32"), ref, np.abs(g64 * u64) + 1e-30, 1e-5, "geglu out is gate")
    Gt, Dd = up(ctx, g), up(ctx, d)
    tc.geglu_backward(ctx, Gt, up(ctx, u), Dd, Gt, Dd, n, dtype="f32")
    dgate, scale, dup = geglu_bwd_ref(g64, u64, d64)
    assert_close(get(Gt, n, "f32"), dgate, scale + 1e-30, 1e-5, "geglu dgate is gate")
    assert_close(get(Dd, n, "f32"), dup, np.abs(d64 * g64) + 1e-30, 1e-5, "geglu dup is dout")


# ---- softmax -------------------------------------------------------------------------------------

@pytest.mark.parametrize("D", DIMS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax(tctx, rng, dtype, D):
    N = rows_for(D)
    x, x64 = rnd(rng, (N, D), dtype, scale=5.0, shift=40.0)  # large logits: needs the max shift
    Y = out(tctx, N * D, dtype)
    tc.softmax_forward(tctx, up(tctx, x), Y, N, D, dtype=dtype)
    y = softmax_ref(x64)
    check(get(Y, (N, D), dtype), y, y, dtype, "Y")
    # backward from a Y the caller holds (rounded to dtype)
    yk = y.astype(np.float32).astype(np_dtype(dtype))
    yk64 = to_f64(yk, dtype)
    dy, dy64 = rnd(rng, (N, D), dtype)
    dX = out(tctx, N * D, dtype)
    tc.softmax_backward(tctx, up(tctx, yk), up(tctx, dy), dX, N, D, dtype=dtype)
    dx, scale = softmax_bwd_ref(yk64, dy64)
    check(get(dX, (N, D), dtype), dx, scale, dtype, "dX")


def test_softmax_masked_entries(tctx):
    """-inf logits (masks) get exactly 0; a row of all -inf is NaN (0/0)."""
    x = f32([[0.0, -np.inf, 1.0, -np.inf], [-np.inf] * 4, [3.0, 3.0, 3.0, 3.0]])
    Y = out(tctx, x.size, "f32")
    tc.softmax_forward(tctx, up(tctx, x), Y, 3, 4, dtype="f32")
    y = get(Y, (3, 4), "f32")
    assert y[0, 1] == 0.0 and y[0, 3] == 0.0
    assert_close(y[0], softmax_ref(np.array([[0.0, -np.inf, 1.0, -np.inf]]))[0], 1.0, 1e-6, "masked row")
    assert np.isnan(y[1]).all()
    assert_close(y[2], np.full(4, 0.25), 1.0, 1e-7, "uniform row")


# ---- AdamW ------------------------------------------------------------------------------------------

def adamw_ref(p, m, v, grads, lr, b1, b2, eps, wd):
    """Several AdamW steps in float64; also the magnitude scales of p, m."""
    sp, sm = np.abs(p).copy(), np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        m = b1 * m + (1 - b1) * g
        sm = b1 * sm + (1 - b1) * np.abs(g)
        v = b2 * v + (1 - b2) * g * g
        upd = (m / bc1) / (np.sqrt(v / bc2) + eps) + wd * p
        sp = sp + lr * (np.abs(m / bc1) / (np.sqrt(v / bc2) + eps) + wd * np.abs(p))
        p = p - lr * upd
    return p, m, v, sp, sm


@pytest.mark.parametrize("n", [1, 15, 1000, 65537])
@pytest.mark.parametrize("grad_dtype", DTYPES)
def test_adamw_steps(tctx, rng, grad_dtype, n):
    lr, b1, b2, eps, wd, steps = 1e-2, 0.9, 0.999, 1e-8, 0.1, 4
    p0 = f32(rng.standard_normal(n))
    grads = [rnd(rng, (n,), grad_dtype)[0] for _ in range(steps)]
    P, M, V = up(tctx, p0), up(tctx, np.zeros(n, np.float32)), up(tctx, np.zeros(n, np.float32))
    for t, g in enumerate(grads, start=1):
        tc.adamw_step(tctx, P, M, V, up(tctx, g), grad_dtype, n, lr, b1, b2, eps, wd, 1 - b1 ** t,
                      1 - b2 ** t)
    p, m, v, sp, sm = adamw_ref(p0.astype(np.float64), 0.0, 0.0, [to_f64(g, grad_dtype) for g in grads],
                                lr, b1, b2, eps, wd)
    assert_close(get(P, n, "f32"), p, sp, 1e-5, "params")
    assert_close(get(M, n, "f32"), m, sm, 1e-5, "m")
    assert_close(get(V, n, "f32"), v, v, 1e-5, "v")


def test_adamw_context_method_and_constant_dtype(ctx, rng):
    n = 9
    p0, g = f32(rng.standard_normal(n)), f32(rng.standard_normal(n))
    P, M, V = up(ctx, p0), up(ctx, np.zeros(n, np.float32)), up(ctx, np.zeros(n, np.float32))
    ctx.adamw_step(P, M, V, up(ctx, g), tc.TC_DTYPE_F32, n, 1e-3, 0.9, 0.95, 1e-6, 0.0, 0.1, 0.05)
    p, *_ = adamw_ref(p0.astype(np.float64), 0.0, 0.0, [g.astype(np.float64)], 1e-3, 0.9, 0.95, 1e-6, 0.0)
    assert_close(get(P, n, "f32"), p, np.abs(p) + 1e-3, 1e-5, "params")


# ---- fused normalisation + GEMV ---------------------------------------------------------------------

# (9, 40, 256): more rows of X than one GPU warp takes (8), and several blocks of W rows.
FUSED_SHAPES = [(1, 1, 1), (1, 5, 7), (1, 33, 4096), (3, 9, 65), (4, 17, 130), (7, 6, 31), (9, 40, 256)]


@pytest.mark.parametrize("layernorm", [False, True])
@pytest.mark.parametrize("M,N,K", FUSED_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_norm_gemv(tctx, rng, dtype, M, N, K, layernorm):
    eps = 1e-5
    x, x64 = rnd(rng, (M, K), dtype, shift=2.0 if layernorm else 0.0)
    g, g64 = rnd(rng, (K,), dtype, shift=1.0)
    b, b64 = rnd(rng, (K,), dtype)
    w, w64 = rnd(rng, (N, K), dtype)
    Y = out(tctx, M * N, dtype)
    if layernorm:
        tc.fused_layernorm_gemv(tctx, up(tctx, x), up(tctx, g), up(tctx, b), up(tctx, w), Y, M, N, K,
                                eps=eps, dtype=dtype)
        xn, mu, r = layernorm_ref(x64, g64, b64, eps)
        xn_scale = layernorm_scale(x64, g64, b64, mu, r)
    else:
        tc.fused_rmsnorm_gemv(tctx, up(tctx, x), up(tctx, g), up(tctx, w), Y, M, N, K, eps=eps,
                              dtype=dtype)
        xn = rmsnorm_ref(x64, g64, eps)[0]
        xn_scale = np.abs(xn)
    ref, scale = xn @ w64.T, xn_scale @ np.abs(w64).T
    check(get(Y, (M, N), dtype), ref, scale, dtype, "Y")


def test_fused_equals_norm_then_gemm(ctx, rng):
    """f32: the fused op agrees with the library's own rmsnorm_forward followed by gemm."""
    M, N, K = 3, 40, 96
    x, g, w = f32(rng.standard_normal((M, K))), f32(rng.standard_normal(K)), f32(rng.standard_normal((N, K)))
    X, G, W = up(ctx, x), up(ctx, g), up(ctx, w)
    Xn, Y1, Y2 = out(ctx, M * K, "f32"), out(ctx, M * N, "f32"), out(ctx, M * N, "f32")
    tc.rmsnorm_forward(ctx, X, G, Xn, None, M, K, dtype="f32")
    tc.gemm(ctx, Xn, W, Y1, M, N, K, dtype="f32", transpose_b=True)
    tc.fused_rmsnorm_gemv(ctx, X, G, W, Y2, M, N, K, dtype="f32")
    xn = rmsnorm_ref(x.astype(np.float64), g.astype(np.float64), 1e-5)[0]
    assert_close(get(Y2, (M, N), "f32"), get(Y1, (M, N), "f32"), np.abs(xn) @ np.abs(w.astype(np.float64)).T,
                 1e-5, "fused vs composed")


def test_fused_layernorm_without_beta(ctx, rng):
    M, N, K = 2, 5, 20
    x, g, w = f32(rng.standard_normal((M, K))), f32(rng.standard_normal(K)), f32(rng.standard_normal((N, K)))
    Y = out(ctx, M * N, "f32")
    tc.fused_layernorm_gemv(ctx, up(ctx, x), up(ctx, g), None, up(ctx, w), Y, M, N, K, dtype="f32")
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    xn, mu, r = layernorm_ref(x64, g64, 0.0, 1e-5)
    assert_close(get(Y, (M, N), "f32"), xn @ w.T.astype(np.float64),
                 layernorm_scale(x64, g64, 0.0, mu, r) @ np.abs(w.T), 1e-5, "Y")


# ---- shapes large enough to be split over threads ---------------------------------------------------

@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_row_kernels_split_over_threads(ctx, rng, dtype):
    """N * D well above the single-thread cut-off: rows go to several
    threads and the weight gradients are summed over blocks of rows."""
    N, D, eps = 300, 301, 1e-5
    x, x64 = rnd(rng, (N, D), dtype, shift=0.5)
    g, g64 = rnd(rng, (D,), dtype, shift=1.0)
    b, b64 = rnd(rng, (D,), dtype)
    dy, dy64 = rnd(rng, (N, D), dtype)
    X, G, Bt, DY = up(ctx, x), up(ctx, g), up(ctx, b), up(ctx, dy)
    Y, R, Mu = out(ctx, N * D, dtype), out(ctx, N, "f32"), out(ctx, N, "f32")
    tc.rmsnorm_forward(ctx, X, G, Y, R, N, D, eps=eps, dtype=dtype)
    y, r = rmsnorm_ref(x64, g64, eps)
    check(get(Y, (N, D), dtype), y, np.abs(y), dtype, "rmsnorm Y")
    dX, dG, dB = out(ctx, N * D, dtype), out(ctx, D, "f32"), out(ctx, D, "f32")
    R = up(ctx, f32(r))
    tc.rmsnorm_backward(ctx, X, G, DY, R, dX, dG, N, D, dtype=dtype)
    dx, dxs, dg, dgs = rmsnorm_bwd_ref(x64, g64, dy64, f32(r).astype(np.float64))
    check(get(dX, (N, D), dtype), dx, dxs, dtype, "rmsnorm dX")
    assert_close(get(dG, D, "f32"), dg, dgs, 1e-5, "rmsnorm dgamma")
    tc.layernorm_forward(ctx, X, G, Bt, Y, Mu, out(ctx, N, "f32"), N, D, eps=eps, dtype=dtype)
    y, mu, r = layernorm_ref(x64, g64, b64, eps)
    check(get(Y, (N, D), dtype), y, layernorm_scale(x64, g64, b64, mu, r), dtype, "layernorm Y")
    tc.layernorm_backward(ctx, X, G, DY, up(ctx, f32(mu)), up(ctx, f32(r)), dX, N, D, dgamma=dG,
                          dbeta=dB, dtype=dtype)
    dx, dxs, dg, dgs, db, dbs = layernorm_bwd_ref(x64, g64, dy64, f32(mu).astype(np.float64),
                                                  f32(r).astype(np.float64))
    check(get(dX, (N, D), dtype), dx, dxs, dtype, "layernorm dX")
    assert_close(get(dG, D, "f32"), dg, dgs, 1e-5, "layernorm dgamma")
    assert_close(get(dB, D, "f32"), db, dbs, 1e-5, "layernorm dbeta")
    tc.softmax_forward(ctx, X, Y, N, D, dtype=dtype)
    y = softmax_ref(x64)
    check(get(Y, (N, D), dtype), y, y, dtype, "softmax Y")
    yk = y.astype(np.float32).astype(np_dtype(dtype))
    tc.softmax_backward(ctx, up(ctx, yk), DY, dX, N, D, dtype=dtype)
    dx, scale = softmax_bwd_ref(to_f64(yk, dtype), dy64)
    check(get(dX, (N, D), dtype), dx, scale, dtype, "softmax dX")
    # RoPE over 1024 rows of 128
    B, H, S, hd = 2, 8, 64, 128
    xr, xr64 = rnd(rng, (B, H, S, hd), dtype)
    cos, sin = rope_tables(S, hd)
    for interleaved in (False, True):
        XR = up(ctx, xr)
        tc.rope_forward(ctx, XR, up(ctx, cos), up(ctx, sin), B, H, S, hd, dtype=dtype,
                        interleaved=interleaved)
        yr, sr = rope_ref(xr64, cos, sin, interleaved)
        check(get(XR, xr.shape, dtype), yr, sr, dtype, "rope interleaved=%s" % interleaved)


# ---- row lengths the GPU kernels treat differently ------------------------------------------------

# (N, D): one row of 8192 (a model width); a row of 3 (no 16-byte vectors);
# 1000 (vectors of 8 f16/bf16 or 4 f32, with idle threads); 3001 and 20000
# (slices too long for registers on the GPU: its looping kernels).
ROW_SHAPES = [(1, 8192), (1, 3), (3, 1000), (2, 3001), (2, 20000)]


@pytest.mark.parametrize("N,D", ROW_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_row_ops_at_device_shapes(ctx, rng, dtype, N, D):
    eps = 1e-5
    x, x64 = rnd(rng, (N, D), dtype, shift=0.5)
    g, g64 = rnd(rng, (D,), dtype, shift=1.0)
    b, b64 = rnd(rng, (D,), dtype)
    dy, dy64 = rnd(rng, (N, D), dtype)
    X, G, Bt, DY = up(ctx, x), up(ctx, g), up(ctx, b), up(ctx, dy)
    # RMSNorm
    Y, R = out(ctx, N * D, dtype), out(ctx, N, "f32")
    tc.rmsnorm_forward(ctx, X, G, Y, R, N, D, eps=eps, dtype=dtype)
    y, r = rmsnorm_ref(x64, g64, eps)
    check(get(Y, (N, D), dtype), y, np.abs(y), dtype, "rmsnorm Y")
    assert_close(get(R, N, "f32"), r, r, 1e-5, "rmsnorm rstd")
    r32 = f32(r)
    dX, dG = out(ctx, N * D, dtype), out(ctx, D, "f32")
    tc.rmsnorm_backward(ctx, X, G, DY, up(ctx, r32), dX, dG, N, D, dtype=dtype)
    dx, dxs, dg, dgs = rmsnorm_bwd_ref(x64, g64, dy64, r32.astype(np.float64))
    check(get(dX, (N, D), dtype), dx, dxs, dtype, "rmsnorm dX")
    assert_close(get(dG, D, "f32"), dg, dgs, 1e-5, "rmsnorm dgamma")
    # LayerNorm
    Y, Mu, R = out(ctx, N * D, dtype), out(ctx, N, "f32"), out(ctx, N, "f32")
    tc.layernorm_forward(ctx, X, G, Bt, Y, Mu, R, N, D, eps=eps, dtype=dtype)
    y, mu, r = layernorm_ref(x64, g64, b64, eps)
    check(get(Y, (N, D), dtype), y, layernorm_scale(x64, g64, b64, mu, r), dtype, "layernorm Y")
    assert_close(get(Mu, N, "f32"), mu, np.abs(x64).mean(axis=1), 1e-5, "layernorm mean")
    assert_close(get(R, N, "f32"), r, r, 1e-5, "layernorm rstd")
    mu32, r32 = f32(mu), f32(r)
    dX, dG, dB = out(ctx, N * D, dtype), out(ctx, D, "f32"), out(ctx, D, "f32")
    tc.layernorm_backward(ctx, X, G, DY, up(ctx, mu32), up(ctx, r32), dX, N, D, dgamma=dG, dbeta=dB, dtype=dtype)
    dx, dxs, dg, dgs, db, dbs = layernorm_bwd_ref(x64, g64, dy64, mu32.astype(np.float64), r32.astype(np.float64))
    check(get(dX, (N, D), dtype), dx, dxs, dtype, "layernorm dX")
    assert_close(get(dG, D, "f32"), dg, dgs, 1e-5, "layernorm dgamma")
    assert_close(get(dB, D, "f32"), db, dbs, 1e-5, "layernorm dbeta")
    # softmax
    xs, xs64 = rnd(rng, (N, D), dtype, scale=5.0, shift=40.0)
    Y = out(ctx, N * D, dtype)
    tc.softmax_forward(ctx, up(ctx, xs), Y, N, D, dtype=dtype)
    y = softmax_ref(xs64)
    check(get(Y, (N, D), dtype), y, y, dtype, "softmax Y")
    yk = y.astype(np.float32).astype(np_dtype(dtype))
    dX = out(ctx, N * D, dtype)
    tc.softmax_backward(ctx, up(ctx, yk), DY, dX, N, D, dtype=dtype)
    dx, scale = softmax_bwd_ref(to_f64(yk, dtype), dy64)
    check(get(dX, (N, D), dtype), dx, scale, dtype, "softmax dX")


def test_weight_gradients_do_not_depend_on_threads(device, rng):
    """Repeated calls give bit-identical dgamma: the rows' blocks are fixed by
    the shape and their sums are added in block order, whichever thread ran
    which block (on CUDA: per-slot partial sums added in slot order)."""
    N, D = 256, 257
    x, g, dy = f32(rng.standard_normal((N, D))), f32(rng.standard_normal(D)), f32(rng.standard_normal((N, D)))
    r = f32(rmsnorm_ref(x.astype(np.float64), g.astype(np.float64), 1e-5)[1])
    results = []
    with tc.Context(device) as ctx:
        for _ in range(3):
            dX, dG = out(ctx, N * D, "f32"), out(ctx, D, "f32")
            tc.rmsnorm_backward(ctx, up(ctx, x), up(ctx, g), up(ctx, dy), up(ctx, r), dX, dG, N, D, dtype="f32")
            results.append(dG.to_numpy(D, np.float32))
    assert all((res == results[0]).all() for res in results[1:])


# ---- in-place uses that the ABI allows ---------------------------------------------------------------

def test_allowed_in_place_calls(ctx, rng):
    N, D = 3, 37
    x, x64 = rnd(rng, (N, D), "f32")
    g, g64 = rnd(rng, (D,), "f32", shift=1.0)
    dy, dy64 = rnd(rng, (N, D), "f32")
    G = up(ctx, g)
    # rmsnorm_forward: Y is X
    X = up(ctx, x)
    tc.rmsnorm_forward(ctx, X, G, X, None, N, D, dtype="f32")
    y, r = rmsnorm_ref(x64, g64, 1e-5)
    assert_close(get(X, (N, D), "f32"), y, np.abs(y), 1e-5, "rmsnorm in place")
    # rmsnorm_backward: dX is dY, and dX is X
    dx, dxs, _, _ = rmsnorm_bwd_ref(x64, g64, dy64, f32(r).astype(np.float64))
    for alias in ("dY", "X"):
        X, DY, R = up(ctx, x), up(ctx, dy), up(ctx, f32(r))
        target = DY if alias == "dY" else X
        tc.rmsnorm_backward(ctx, X, G, DY, R, target, None, N, D, dtype="f32")
        assert_close(get(target, (N, D), "f32"), dx, dxs, 1e-5, "rmsnorm_backward dX is " + alias)
    # layernorm_forward: Y is X
    X = up(ctx, x)
    tc.layernorm_forward(ctx, X, G, None, X, None, None, N, D, dtype="f32")
    y, mu, r = layernorm_ref(x64, g64, 0.0, 1e-5)
    assert_close(get(X, (N, D), "f32"), y, layernorm_scale(x64, g64, 0.0, mu, r), 1e-5, "layernorm in place")
    # softmax: Y is X; dX is dY
    X = up(ctx, x)
    tc.softmax_forward(ctx, X, X, N, D, dtype="f32")
    y = softmax_ref(x64)
    assert_close(get(X, (N, D), "f32"), y, y, 1e-5, "softmax in place")
    Yb, DY = up(ctx, f32(y)), up(ctx, dy)
    tc.softmax_backward(ctx, Yb, DY, DY, N, D, dtype="f32")
    dx, s = softmax_bwd_ref(f32(y).astype(np.float64), dy64)
    assert_close(get(DY, (N, D), "f32"), dx, s, 1e-5, "softmax_backward dX is dY")
    # swiglu: out is gate; backward writes dgate over gate and dup over dout
    gt, gt64 = rnd(rng, (50,), "f32", scale=3.0)
    u, u64 = rnd(rng, (50,), "f32")
    d, d64 = rnd(rng, (50,), "f32")
    Gt, U = up(ctx, gt), up(ctx, u)
    tc.swiglu_forward(ctx, Gt, U, Gt, 50, dtype="f32")
    ref = swiglu_ref(gt64, u64)
    assert_close(get(Gt, 50, "f32"), ref, np.abs(ref), 1e-5, "swiglu out is gate")
    Gt, Dd = up(ctx, gt), up(ctx, d)
    tc.swiglu_backward(ctx, Gt, U, Dd, Gt, Dd, 50, dtype="f32")
    dgate, dgs, dup = swiglu_bwd_ref(gt64, u64, d64)
    assert_close(get(Gt, 50, "f32"), dgate, dgs, 1e-5, "dgate over gate")
    assert_close(get(Dd, 50, "f32"), dup, np.abs(dup), 1e-5, "dup over dout")


# ---- finite differences ----------------------------------------------------------------------------

def central_diff(f, arr, h=1e-6):
    """d f / d arr by central differences (f: float64 array -> float)."""
    grad = np.zeros_like(arr)
    flat, gflat = arr.reshape(-1), grad.reshape(-1)
    for i in range(flat.size):
        keep = flat[i]
        flat[i] = keep + h
        fp = f(arr)
        flat[i] = keep - h
        fm = f(arr)
        flat[i] = keep
        gflat[i] = (fp - fm) / (2 * h)
    return grad


def test_backward_passes_match_finite_differences(ctx, rng):
    """Each f32 backward kernel against central differences of the float64
    forward definition of L = sum(forward(...) * dY)."""
    N, D, eps = 3, 6, 1e-5
    x = f32(rng.standard_normal((N, D)))
    g = f32(rng.standard_normal(D) + 1.0)
    b = f32(rng.standard_normal(D))
    dy = f32(rng.standard_normal((N, D)))
    x64, g64, b64, dy64 = (a.astype(np.float64) for a in (x, g, b, dy))
    X, G, DY = up(ctx, x), up(ctx, g), up(ctx, dy)

    def fd_check(got, fd, what):
        assert_close(got, fd, np.abs(fd).max() + 1e-12, 1e-5, what)

    # RMSNorm
    r = f32(rmsnorm_ref(x64, g64, eps)[1])
    dX, dG = out(ctx, N * D, "f32"), out(ctx, D, "f32")
    tc.rmsnorm_backward(ctx, X, G, DY, up(ctx, r), dX, dG, N, D, dtype="f32")
    fd_check(get(dX, (N, D), "f32"), central_diff(lambda a: (rmsnorm_ref(a, g64, eps)[0] * dy64).sum(), x64.copy()),
          "rmsnorm dX")
    fd_check(get(dG, D, "f32"), central_diff(lambda a: (rmsnorm_ref(x64, a, eps)[0] * dy64).sum(), g64.copy()),
          "rmsnorm dgamma")
    # LayerNorm
    _, mu, rs = layernorm_ref(x64, g64, b64, eps)
    dX, dG, dB = out(ctx, N * D, "f32"), out(ctx, D, "f32"), out(ctx, D, "f32")
    tc.layernorm_backward(ctx, X, G, DY, up(ctx, f32(mu)), up(ctx, f32(rs)), dX, N, D, dgamma=dG,
                          dbeta=dB, dtype="f32")
    fd_check(get(dX, (N, D), "f32"),
          central_diff(lambda a: (layernorm_ref(a, g64, b64, eps)[0] * dy64).sum(), x64.copy()), "layernorm dX")
    fd_check(get(dG, D, "f32"),
          central_diff(lambda a: (layernorm_ref(x64, a, b64, eps)[0] * dy64).sum(), g64.copy()), "layernorm dgamma")
    fd_check(get(dB, D, "f32"),
          central_diff(lambda a: (layernorm_ref(x64, g64, a, eps)[0] * dy64).sum(), b64.copy()), "layernorm dbeta")
    # softmax (backward takes the forward's Y)
    y = f32(softmax_ref(x64))
    dX = out(ctx, N * D, "f32")
    tc.softmax_backward(ctx, up(ctx, y), DY, dX, N, D, dtype="f32")
    fd_check(get(dX, (N, D), "f32"), central_diff(lambda a: (softmax_ref(a) * dy64).sum(), x64.copy()), "softmax dX")
    # SwiGLU
    n = N * D
    u = f32(rng.standard_normal(n))
    dG, dU = out(ctx, n, "f32"), out(ctx, n, "f32")
    tc.swiglu_backward(ctx, up(ctx, x.reshape(-1)), up(ctx, u), up(ctx, dy.reshape(-1)), dG, dU, n,
                       dtype="f32")
    u64, xf, dyf = u.astype(np.float64), x64.reshape(-1), dy64.reshape(-1)
    fd_check(get(dG, n, "f32"), central_diff(lambda a: (swiglu_ref(a, u64) * dyf).sum(), xf.copy()), "swiglu dgate")
    fd_check(get(dU, n, "f32"), central_diff(lambda a: (swiglu_ref(xf, a) * dyf).sum(), u64.copy()), "swiglu dup")
    # RoPE: the gradient of sum(rope(x) * dY) with respect to x
    B, H, S, hd = 1, 2, 3, 4
    xr = f32(rng.standard_normal((B, H, S, hd)))
    dyr = f32(rng.standard_normal((B, H, S, hd)))
    cos, sin = rope_tables(S, hd)
    for interleaved in (False, True):
        dR = up(ctx, dyr)
        tc.rope_backward(ctx, dR, up(ctx, cos), up(ctx, sin), B, H, S, hd, dtype="f32",
                         interleaved=interleaved)
        fd = central_diff(lambda a: (rope_ref(a, cos, sin, interleaved)[0] * dyr).sum(), xr.astype(np.float64))
        fd_check(get(dR, xr.shape, "f32"), fd, "rope dX interleaved=%s" % interleaved)


def test_backward_consistent_with_the_library_forward(ctx, rng):
    """The library's f32 backward against central differences of the
    library's own f32 forward (h = 1e-2; f32 limits this to ~1e-3)."""
    N, D, h = 2, 5, 1e-2
    x = f32(rng.standard_normal((N, D)))
    g = f32(rng.standard_normal(D) + 1.0)
    dy = f32(rng.standard_normal((N, D)))
    G, DY = up(ctx, g), up(ctx, dy)
    Y, R = out(ctx, N * D, "f32"), out(ctx, N, "f32")

    def loss_rms(a):
        tc.rmsnorm_forward(ctx, up(ctx, f32(a)), G, Y, R, N, D, dtype="f32")
        return (get(Y, (N, D), "f32") * dy).sum()

    def loss_softmax(a):
        tc.softmax_forward(ctx, up(ctx, f32(a)), Y, N, D, dtype="f32")
        return (get(Y, (N, D), "f32") * dy).sum()

    fd_rms = central_diff(loss_rms, x.astype(np.float64), h)
    tc.rmsnorm_forward(ctx, up(ctx, x), G, Y, R, N, D, dtype="f32")
    dX = out(ctx, N * D, "f32")
    tc.rmsnorm_backward(ctx, up(ctx, x), G, DY, R, dX, None, N, D, dtype="f32")
    assert_close(get(dX, (N, D), "f32"), fd_rms, np.abs(fd_rms).max(), 2e-3, "rmsnorm")

    fd_sm = central_diff(loss_softmax, x.astype(np.float64), h)
    tc.softmax_forward(ctx, up(ctx, x), Y, N, D, dtype="f32")
    tc.softmax_backward(ctx, Y, DY, dX, N, D, dtype="f32")
    assert_close(get(dX, (N, D), "f32"), fd_sm, np.abs(fd_sm).max(), 2e-3, "softmax")


# ---- capability and backends ---------------------------------------------------------------------

def test_capability_bit(ctx):
    caps = ctx.runtime_capabilities()
    assert tc.capability_available(caps, tc.TC_CAPABILITY_TRAINING_KERNELS)
    assert tc.capability_available(caps, "training_kernels")


def test_cpu_backend_runs_them(cpu_ctx, rng):
    x, g = f32(rng.standard_normal((2, 8))), f32(np.ones(8))
    tc.rmsnorm_forward(cpu_ctx, up(cpu_ctx, x), up(cpu_ctx, g), out(cpu_ctx, 16, "f32"), None, 2, 8, dtype="f32")
    assert cpu_ctx.last_backend_name() == "portable_cpu"


def test_default_dtype_is_f16(ctx, rng):
    x = rng.standard_normal((2, 8)).astype(np.float16)
    g = np.ones(8, np.float16)
    Y = out(ctx, 16, "f16")
    ctx.rmsnorm_forward(up(ctx, x), up(ctx, g), Y, None, 2, 8)
    y = rmsnorm_ref(x.astype(np.float64), 1.0, 1e-5)[0]
    assert_close(get(Y, (2, 8), "f16"), y, np.abs(y), 1e-2, "f16 default")


# ---- bad input: the documented status, and no byte of any buffer changes -------------------------------

INVALID_ARG, INVALID_SHAPE, BAD_DTYPE = tc.TC_ERR_INVALID_ARG, tc.TC_ERR_INVALID_SHAPE, tc.TC_ERR_UNSUPPORTED_DTYPE


class Call:
    """A valid call of one entry point (f32 unless stated) with every buffer
    filled (outputs poisoned), and helpers to break it one argument at a time."""

    def __init__(self, ctx, rng, fn, buffers, sizes, **scalars):
        self.ctx, self.fn, self.scalars = ctx, fn, scalars
        self.sizes = sizes  # buffer name -> bytes it needs
        self.bufs = {}
        for name, nbytes in buffers.items():
            self.bufs[name] = ctx.buffer_from_array(rng.integers(0, 255, size=nbytes, dtype=np.uint8)
                                                    if nbytes > 0 else poison(-nbytes))
        self.extra = []

    def kwargs(self, **changes):
        kw = dict(self.bufs)
        kw.update(self.scalars)
        kw.update(changes)
        return kw

    def snapshot(self):
        return [b.to_numpy(b.nbytes, np.uint8).copy() for b in list(self.bufs.values()) + self.extra]

    def refused(self, status, **changes):
        for b in changes.values():
            if isinstance(b, tc.Buffer) and b not in self.bufs.values():
                self.extra.append(b)
        before = self.snapshot()
        with pytest.raises(tc.TensorcoreError) as e:
            getattr(tc, self.fn)(self.ctx, **self.kwargs(**changes))
        assert e.value.status == status, "%s %s: %s" % (self.fn, sorted(changes), e.value)
        after = self.snapshot()
        for i, (a, b) in enumerate(zip(before, after)):
            assert (a == b).all(), "%s %s wrote buffer %d" % (self.fn, sorted(changes), i)
        return e.value

    def runs(self):
        getattr(tc, self.fn)(self.ctx, **self.kwargs())


def make_calls(ctx, rng):
    """One valid call per entry point. Negative sizes mark outputs (poisoned)."""
    N, D, f = 3, 8, 4
    nd, n1, d1 = N * D * f, N * f, D * f
    B, H, S, hd = 1, 2, 3, 8
    xr, tab = B * H * S * hd * f, S * hd // 2 * f
    M, Nn, K = 2, 5, 8
    calls = {
        "rmsnorm_forward": Call(ctx, rng, "rmsnorm_forward", {"X": nd, "gamma": d1, "Y": -nd, "rstd_out": -n1},
                                {"X": nd, "gamma": d1, "Y": nd, "rstd_out": n1}, N=N, D=D, eps=1e-5, dtype="f32"),
        "rmsnorm_backward": Call(ctx, rng, "rmsnorm_backward",
                                 {"X": nd, "gamma": d1, "dY": nd, "rstd": n1, "dX": -nd, "dgamma": -d1},
                                 {"X": nd, "gamma": d1, "dY": nd, "rstd": n1, "dX": nd, "dgamma": d1},
                                 N=N, D=D, dtype="f32"),
        "layernorm_forward": Call(ctx, rng, "layernorm_forward",
                                  {"X": nd, "gamma": d1, "beta": d1, "Y": -nd, "mean_out": -n1, "rstd_out": -n1},
                                  {"X": nd, "gamma": d1, "beta": d1, "Y": nd, "mean_out": n1, "rstd_out": n1},
                                  N=N, D=D, eps=1e-5, dtype="f32"),
        "layernorm_backward": Call(ctx, rng, "layernorm_backward",
                                   {"X": nd, "gamma": d1, "dY": nd, "mean": n1, "rstd": n1, "dX": -nd,
                                    "dgamma": -d1, "dbeta": -d1},
                                   {"X": nd, "gamma": d1, "dY": nd, "mean": n1, "rstd": n1, "dX": nd,
                                    "dgamma": d1, "dbeta": d1}, N=N, D=D, dtype="f32"),
        "rope_forward": Call(ctx, rng, "rope_forward", {"X": xr, "cos_t": tab, "sin_t": tab},
                             {"X": xr, "cos_t": tab, "sin_t": tab}, batch=B, heads=H, seq=S, head_dim=hd,
                             dtype="f32"),
        "rope_backward": Call(ctx, rng, "rope_backward", {"dX": xr, "cos_t": tab, "sin_t": tab},
                              {"dX": xr, "cos_t": tab, "sin_t": tab}, batch=B, heads=H, seq=S, head_dim=hd,
                              dtype="f32", interleaved=True),
        "swiglu_forward": Call(ctx, rng, "swiglu_forward", {"gate": nd, "up": nd, "out": -nd},
                               {"gate": nd, "up": nd, "out": nd}, n=N * D, dtype="f32"),
        "swiglu_backward": Call(ctx, rng, "swiglu_backward",
                                {"gate": nd, "up": nd, "dout": nd, "dgate": -nd, "dup": -nd},
                                {"gate": nd, "up": nd, "dout": nd, "dgate": nd, "dup": nd}, n=N * D, dtype="f32"),
        "geglu_forward": Call(ctx, rng, "geglu_forward", {"gate": nd, "up": nd, "out": -nd},
                              {"gate": nd, "up": nd, "out": nd}, n=N * D, dtype="f32"),
        "geglu_backward": Call(ctx, rng, "geglu_backward",
                               {"gate": nd, "up": nd, "dout": nd, "dgate": -nd, "dup": -nd},
                               {"gate": nd, "up": nd, "dout": nd, "dgate": nd, "dup": nd}, n=N * D, dtype="f32"),
        "softmax_forward": Call(ctx, rng, "softmax_forward", {"X": nd, "Y": -nd}, {"X": nd, "Y": nd},
                                N=N, D=D, dtype="f32"),
        "softmax_backward": Call(ctx, rng, "softmax_backward", {"Y": nd, "dY": nd, "dX": -nd},
                                 {"Y": nd, "dY": nd, "dX": nd}, N=N, D=D, dtype="f32"),
        "adamw_step": Call(ctx, rng, "adamw_step",
                           {"params_fp32": nd, "m_fp32": -nd, "v_fp32": -nd, "grads": N * D * 2},
                           {"params_fp32": nd, "m_fp32": nd, "v_fp32": nd, "grads": N * D * 2},
                           grad_dtype="bf16", n=N * D, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
                           weight_decay=0.01, bias_correction1=0.1, bias_correction2=0.001),
        "fused_rmsnorm_gemv": Call(ctx, rng, "fused_rmsnorm_gemv", {"X": M * K * f, "gamma": K * f,
                                                                    "W": Nn * K * f, "Y": -M * Nn * f},
                                   {"X": M * K * f, "gamma": K * f, "W": Nn * K * f, "Y": M * Nn * f},
                                   M=M, N=Nn, K=K, eps=1e-5, dtype="f32"),
        "fused_layernorm_gemv": Call(ctx, rng, "fused_layernorm_gemv",
                                     {"X": M * K * f, "gamma": K * f, "beta": K * f, "W": Nn * K * f,
                                      "Y": -M * Nn * f},
                                     {"X": M * K * f, "gamma": K * f, "beta": K * f, "W": Nn * K * f,
                                      "Y": M * Nn * f}, M=M, N=Nn, K=K, eps=1e-5, dtype="f32"),
    }
    # The RoPE tables must hold finite values for the valid call to be meaningful.
    for name in ("rope_forward", "rope_backward"):
        for t in ("cos_t", "sin_t"):
            calls[name].bufs[t].write(f32(rng.uniform(-1, 1, tab // 4)))
    return calls


OPTIONAL = {"rstd_out", "mean_out", "beta", "dgamma", "dbeta"}
DIM_NAMES = {"N", "D", "n", "M", "K", "batch", "heads", "seq", "head_dim"}
ENTRY_POINTS = ["rmsnorm_forward", "rmsnorm_backward", "layernorm_forward", "layernorm_backward", "rope_forward",
                "rope_backward", "swiglu_forward", "swiglu_backward", "geglu_forward", "geglu_backward",
                "softmax_forward", "softmax_backward",
                "adamw_step", "fused_rmsnorm_gemv", "fused_layernorm_gemv"]


@pytest.fixture
def calls(cpu_ctx, rng):
    return make_calls(cpu_ctx, rng)


@pytest.mark.parametrize("op", ENTRY_POINTS)
def test_bad_buffers(cpu_ctx, calls, op):
    call = calls[op]
    call.runs()  # the unbroken call is valid
    with tc.Context("cpu") as other:
        foreign = other.buffer(1 << 16)
        for name, nbytes in call.sizes.items():
            if name not in OPTIONAL:
                call.refused(INVALID_ARG, **{name: None})  # null
            call.refused(INVALID_ARG, **{name: foreign})   # another context's buffer
            short = cpu_ctx.buffer(nbytes - 1)
            call.refused(INVALID_ARG, **{name: short})     # one byte too small
    with pytest.raises(tc.TensorcoreError) as e:  # no context
        getattr(tc, op)(None, **call.kwargs())
    assert e.value.status == INVALID_ARG
    closed = cpu_ctx.buffer(1 << 12)  # refused by the binding before C sees it
    closed.close()
    name = next(iter(call.sizes))
    with pytest.raises(tc.TensorcoreError) as e:
        getattr(tc, op)(cpu_ctx, **call.kwargs(**{name: closed}))
    assert e.value.status == INVALID_ARG


@pytest.mark.parametrize("op", ENTRY_POINTS)
def test_bad_dims_and_dtypes(calls, op):
    call = calls[op]
    for dim in DIM_NAMES & set(call.scalars):
        for bad in (0, -1):
            call.refused(INVALID_SHAPE, **{dim: bad})
        call.refused(INVALID_SHAPE, **{dim: 1 << 62})  # the byte count overflows 64 bits
        call.refused(INVALID_ARG, **{dim: 1 << 40})  # fits 64 bits, but not the buffers
    key = "grad_dtype" if op == "adamw_step" else "dtype"
    for bad in ("i8", "i32", "f64", 42):
        call.refused(BAD_DTYPE, **{key: bad})


@pytest.mark.parametrize("op", ENTRY_POINTS)
def test_every_entry_point_runs_on_a_stream(ctx, op):
    """stream=s enqueues (tc_<op>_async) and gives the bytes of the synchronous
    call; a stream of another context or a closed one is refused before
    anything is written."""
    seed = secrets.randbits(32)
    now, later = make_calls(ctx, np.random.default_rng(seed))[op], make_calls(ctx, np.random.default_rng(seed))[op]
    now.runs()
    with ctx.stream() as s:
        getattr(tc, op)(ctx, **later.kwargs(), stream=s)
        s.sync()
    for a, b in zip(now.snapshot(), later.snapshot()):
        assert a.tobytes() == b.tobytes(), op
    with tc.Context("cpu") as other, other.stream() as foreign:
        later.refused(INVALID_ARG, stream=foreign)


@pytest.mark.parametrize("op", [o for o in ENTRY_POINTS if o.endswith("norm_forward") or o.endswith("gemv")])
def test_bad_eps(calls, op):
    for eps in (-1e-5, float("nan"), float("inf"), 1e300):
        calls[op].refused(INVALID_ARG, eps=eps)


def test_bad_rope_arguments(cpu_ctx, calls):
    for op in ("rope_forward", "rope_backward"):
        call = calls[op]
        call.refused(INVALID_SHAPE, head_dim=7)          # odd
        call.refused(INVALID_ARG, seq=4)                 # tables hold 3 positions
        xname = "X" if op == "rope_forward" else "dX"
        call.refused(INVALID_ARG, cos_t=call.bufs[xname])  # a table that is the output
    d = tc.TCRopeDesc(batch=1, heads=2, seq=3, head_dim=8, dtype=tc.TC_DTYPE_F32, interleaved=2)
    call = calls["rope_forward"]
    before = call.snapshot()
    st = tc._api.training._rope_forward.sync(cpu_ctx.handle, call.bufs["X"].handle, call.bufs["cos_t"].handle,
                                           call.bufs["sin_t"].handle, d)
    assert st == INVALID_ARG  # the flag is 0 or 1
    assert all((a == b).all() for a, b in zip(before, call.snapshot()))
    assert tc._api.training._rope_forward.sync(cpu_ctx.handle, call.bufs["X"].handle, call.bufs["cos_t"].handle,
                                             call.bufs["sin_t"].handle, None) == INVALID_ARG


def test_bad_adamw_hyperparameters(calls):
    call = calls["adamw_step"]
    for name, bad in [("lr", -1e-3), ("lr", float("nan")), ("beta1", 1.0), ("beta1", -0.1), ("beta2", 1.0),
                      ("eps", -1.0), ("eps", float("inf")), ("weight_decay", -0.1),
                      ("bias_correction1", 0.0), ("bias_correction1", 1.5), ("bias_correction2", -0.5),
                      ("bias_correction2", float("nan"))]:
        call.refused(INVALID_ARG, **{name: bad})


def test_refused_overlaps(cpu_ctx, calls):
    """Outputs may not share memory with other arguments except the exact
    aliases the header allows."""
    c = calls
    c["rmsnorm_forward"].refused(INVALID_ARG, rstd_out=c["rmsnorm_forward"].bufs["X"])
    c["rmsnorm_backward"].refused(INVALID_ARG, dgamma=c["rmsnorm_backward"].bufs["dX"])
    c["rmsnorm_backward"].refused(INVALID_ARG, dgamma=c["rmsnorm_backward"].bufs["X"])
    c["layernorm_forward"].refused(INVALID_ARG, mean_out=c["layernorm_forward"].bufs["rstd_out"])
    c["layernorm_forward"].refused(INVALID_ARG, rstd_out=c["layernorm_forward"].bufs["Y"])
    c["layernorm_backward"].refused(INVALID_ARG, dgamma=c["layernorm_backward"].bufs["dbeta"])
    c["layernorm_backward"].refused(INVALID_ARG, dX=c["layernorm_backward"].bufs["dY"], dbeta=c[
        "layernorm_backward"].bufs["dY"])
    c["swiglu_backward"].refused(INVALID_ARG, dup=c["swiglu_backward"].bufs["dgate"])
    c["adamw_step"].refused(INVALID_ARG, m_fp32=c["adamw_step"].bufs["params_fp32"])
    c["adamw_step"].refused(INVALID_ARG, v_fp32=c["adamw_step"].bufs["m_fp32"])
    c["fused_rmsnorm_gemv"].refused(INVALID_ARG, Y=c["fused_rmsnorm_gemv"].bufs["X"])
    c["fused_layernorm_gemv"].refused(INVALID_ARG, Y=c["fused_layernorm_gemv"].bufs["W"])
    # softmax: Y is X is allowed, Y one element into X is not
    host = np.zeros(2 * 3 * 8, np.float32)
    lo, hi = cpu_ctx.buffer_from_ptr(host, 3 * 8 * 4), cpu_ctx.buffer_from_ptr(host[1:], 3 * 8 * 4)
    with pytest.raises(tc.TensorcoreError) as e:
        tc.softmax_forward(cpu_ctx, lo, hi, 3, 8, dtype="f32")
    assert e.value.status == INVALID_ARG and "overlaps" in str(e.value)
    tc.softmax_forward(cpu_ctx, lo, lo, 3, 8, dtype="f32")
    # the same for a gradient written half over its input
    with pytest.raises(tc.TensorcoreError) as e:
        tc.softmax_backward(cpu_ctx, lo, lo, hi, 3, 8, dtype="f32")
    assert e.value.status == INVALID_ARG
